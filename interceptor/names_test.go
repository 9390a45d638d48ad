package interceptor

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// TestTypoRefused: a name the linked protobuf definitions rule out is an
// error of every constructor, in code and in a config file alike.
func TestTypoRefused(t *testing.T) {
	tests := []struct {
		name string
		opt  Option
		want string
	}{
		{"method", WithMethod("/sluice.test.v1.TestService/Unray", fixed(1)),
			`interceptor: method name "/sluice.test.v1.TestService/Unray" cannot be served: service sluice.test.v1.TestService has no method Unray; its methods are Unary, ServerStream, ClientStream, Bidi`},
		{"method case", WithMethod("/sluice.test.v1.TestService/unary", fixed(1)),
			`interceptor: method name "/sluice.test.v1.TestService/unary" cannot be served: service sluice.test.v1.TestService has no method unary; did you mean Unary? (names are case-sensitive)`},
		{"service case", WithMethod("/sluice.test.v1.testService/", fixed(1)),
			`interceptor: method name "/sluice.test.v1.testService/" cannot be served: no service sluice.test.v1.testService is linked into this program; did you mean sluice.test.v1.TestService? (names are case-sensitive)`},
		{"exempt", WithExempt("/sluice.test.v1.TestService/Bidy"),
			`interceptor: method name "/sluice.test.v1.TestService/Bidy" cannot be served: service sluice.test.v1.TestService has no method Bidy; its methods are Unary, ServerStream, ClientStream, Bidi`},
		{"a message", WithMethod("/sluice.test.v1.UnaryRequest/", fixed(1)),
			`interceptor: method name "/sluice.test.v1.UnaryRequest/" cannot be served: sluice.test.v1.UnaryRequest is a protobuf message, not a service`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewServer(tt.opt)
			assert.EqualError(t, err, tt.want)
			_, err = NewClient(tt.opt)
			assert.EqualError(t, err, tt.want, "a client's entry is as dead")
		})
	}

}

// TestUncheckedNamesWarned: names the registry cannot check are logged
// once each at the first call of a server built by NewServer, over real gRPC; a correct name is not, nor is anything
// once CheckRegistered has checked the names.
func TestUncheckedNamesWarned(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := NewServer(WithLogger(logger),
		WithMethod(unaryMethod, fixed(5)),                   // correct, checked by the registry
		WithMethod("/sluice.test.v1.TestServce/", fixed(1)), // a typo no definition can catch
		WithExempt("/shop.v1.Admin/"),                       // not served here either
	)
	require.NoError(t, err)
	e := newEnv(t, &testpb.Service{}, envConfig{noServer: true, noClient: true, serverOpts: s.ServerOptions()})
	assert.Empty(t, logs.String(), "nothing is logged before the first call")

	for range 3 {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		require.NoError(t, err)
	}
	st, err := e.client.ServerStream(t.Context(), &testpb.ServerStreamRequest{Count: 1})
	require.NoError(t, err)
	for err == nil {
		_, err = st.Recv()
	}

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 2, "one line per unchecked name, once: %s", logs.String())
	assert.Contains(t, lines[0], "level=WARN")
	assert.Contains(t, lines[0], "name=/sluice.test.v1.TestServce/")
	assert.Contains(t, lines[0], `why="no protobuf service sluice.test.v1.TestServce is linked into this program"`)
	assert.Contains(t, lines[0], "Server.CheckRegistered")
	assert.Contains(t, lines[1], "name=/shop.v1.Admin/")
	assert.NotContains(t, logs.String(), "TestService/Unary", "a correct name is not warned of")
}

// TestUncheckedNamesAfterCheckRegistered: CheckRegistered reports the
// names exactly, and the first call then logs nothing; a Reload's new
// unchecked name is warned of at the next call, an old one not again.
func TestUncheckedNamesAfterCheckRegistered(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := NewServer(WithLogger(logger), WithMethod(unaryMethod, fixed(5)), WithExempt("/shop.v1.Admin/"))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	e := newEnv(t, &testpb.Service{}, envConfig{noServer: true, noClient: true, serverOpts: s.ServerOptions(),
		register: func(gs *grpc.Server) {
			assert.EqualError(t, s.CheckRegistered(gs), "interceptor: configured but not served by this server: /shop.v1.Admin/")
		}})
	_, err = e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	assert.Empty(t, logs.String(), "CheckRegistered has said it")

	require.NoError(t, s.Reload(WithExempt("/shop.v1.Admin/", "/shop.v1.Audit/")))
	_, err = e.client.Unary(context.Background(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	_, err = e.client.Unary(context.Background(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 1, "CheckRegistered reported /shop.v1.Admin/ already: %s", logs.String())
	assert.Contains(t, lines[0], "name=/shop.v1.Audit/")
}

// TestCheckRegisteredCreatesLimiters: after CheckRegistered, every
// registered method that is not exempt has its limiter before its first
// call, and keeps one across a Reload that changes its entry.
func TestCheckRegisteredCreatesLimiters(t *testing.T) {
	s, err := NewServer(WithMethod(serverStreamMethod, fixed(3)), WithExempt(bidiMethod))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	gs := grpc.NewServer(s.ServerOptions()...)
	testpb.RegisterTestServiceServer(gs, &testpb.Service{})
	defer gs.Stop()
	assert.Empty(t, s.Limiters(), "no call yet")

	require.NoError(t, s.CheckRegistered(gs))
	limits := func() map[string]int {
		out := map[string]int{}
		for _, l := range s.Limiters() {
			out[l.Name] = l.Limit
		}
		return out
	}
	all := []string{"sluice.test.v1.TestService/Unary", "sluice.test.v1.TestService/ServerStream", "sluice.test.v1.TestService/ClientStream"}
	got := limits()
	assert.ElementsMatch(t, all, slices.Collect(maps.Keys(got)), "Bidi is exempt")
	assert.Equal(t, 3, got["sluice.test.v1.TestService/ServerStream"])

	require.NoError(t, s.Reload(WithMethod(serverStreamMethod, fixed(4))))
	got = limits()
	assert.ElementsMatch(t, all, slices.Collect(maps.Keys(got)))
	assert.Equal(t, 4, got["sluice.test.v1.TestService/ServerStream"])
}
