package interceptor

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// retryInfo returns the RetryInfo detail of err's status.
func retryInfo(t *testing.T, err error) time.Duration {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	require.FailNow(t, "no RetryInfo detail", "%v", err)
	return 0
}

func TestMethodRateLimit(t *testing.T) {
	e := newEnv(t, &testpb.Service{}, envConfig{
		server:   []ServerOption{WithMethod(unaryMethod, Limit{Rate: RateLimit{PerSecond: 1, Burst: 2}})},
		noClient: true,
	})
	for range 2 {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		require.NoError(t, err, "a full bucket admits the burst")
		e.awaitRelease(t, "server")
	}
	var trailer metadata.MD
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{}, grpc.Trailer(&trailer))
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	e.awaitRejection(t, "server:rate")
	assert.Contains(t, status.Convert(err).Message(), "sluice: server rejected /sluice.test.v1.TestService/Unary: rate limit 1/s (burst 2) exceeded, retry after ")

	// The wait is about a second (one token at 1/s) less the time the
	// calls above took, in whole milliseconds, and the trailer and the
	// RetryInfo detail agree.
	pushback, ok := pushbackOf(trailer)
	require.True(t, ok, "trailer %v", trailer)
	assert.Equal(t, pushback, retryInfo(t, err))
	assert.Greater(t, pushback, 500*time.Millisecond)
	assert.LessOrEqual(t, pushback, time.Second)
	assert.Zero(t, pushback%time.Millisecond)
	assert.Zero(t, gateOf(e.srv.core, unaryMethod).lim.Inflight(), "a call over its rate takes no permit")
}

func TestRateRejectRoundsUp(t *testing.T) {
	s, err := NewServer()
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	r := s.tab.Load().lookup(unaryMethod)
	tests := []struct{ after, want time.Duration }{
		{12345678 * time.Nanosecond, 13 * time.Millisecond},
		{12 * time.Millisecond, 12 * time.Millisecond},
		{1, time.Millisecond},
	}
	for _, tt := range tests {
		rej := s.rateReject(t.Context(), r, reasonRate, tt.after, "rate limit exceeded")
		assert.Equal(t, tt.want, rej.pushback, "%v", tt.after)
		assert.Equal(t, tt.want, retryInfo(t, rej.err))
	}
}

func TestCallerRateLimit(t *testing.T) {
	e := newEnv(t, &testpb.Service{}, envConfig{
		server:   []ServerOption{callerRateLimit(callerkey.Metadata("x-api-key"), RateLimit{PerSecond: 0.001, Burst: 1}, 0)},
		noClient: true,
	})
	call := func(key string) error {
		ctx := t.Context()
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "X-Api-Key", key)
		}
		_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
		return err
	}
	tests := []struct {
		key  string
		want codes.Code
	}{
		{"alice", codes.OK},
		{"alice", codes.ResourceExhausted},
		{"bob", codes.OK}, // each caller has its own bucket
		{"", codes.OK},    // callers without the header share one
		{"", codes.ResourceExhausted},
		{"bob", codes.ResourceExhausted},
	}
	for i, tt := range tests {
		err := call(tt.key)
		require.Equal(t, tt.want, status.Code(err), "call %d (%q): %v", i, tt.key, err)
		if tt.want == codes.OK {
			e.awaitRelease(t, "server")
			continue
		}
		e.awaitRejection(t, "server:caller_rate")
		assert.Contains(t, status.Convert(err).Message(), "caller rate limit 0.001/s (burst 1) exceeded")
		if tt.key != "" {
			assert.NotContains(t, status.Convert(err).Message(), tt.key, "the key is not echoed")
		}
		assert.Greater(t, retryInfo(t, err), 900*time.Second)
	}
}

func TestPeerIP(t *testing.T) {
	tcp := &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5000}
	v6 := &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443}
	mapped := &net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 5000}
	unix := &net.UnixAddr{Name: "/run/app.sock", Net: "unix"}
	tests := []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"ipv4", peer.NewContext(context.Background(), &peer.Peer{Addr: tcp}), "10.1.2.3"},
		{"ipv6 by its /64", peer.NewContext(context.Background(), &peer.Peer{Addr: v6}), "2001:db8::/64"},
		{"ipv4-mapped", peer.NewContext(context.Background(), &peer.Peer{Addr: mapped}), "10.1.2.3"},
		{"unix socket", peer.NewContext(context.Background(), &peer.Peer{Addr: unix}), "/run/app.sock"},
		{"no peer", context.Background(), ""},
		{"nil address", peer.NewContext(context.Background(), &peer.Peer{}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, callerkey.PeerIP(tt.ctx, unaryMethod))
		})
	}
}

func TestMetadataKey(t *testing.T) {
	in := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	tests := []struct {
		name string
		key  string
		ctx  context.Context
		want string
	}{
		{"one value", "X-Tenant", in("x-tenant", "acme"), "acme"},
		{"the last value counts", "X-Tenant", in("x-tenant", "client", "x-tenant", "acme"), "acme"},
		{"the last element counts", "x-tenant", in("x-tenant", "client,proxy, acme "), "acme"},
		{"an empty last element is no key", "x-tenant", in("x-tenant", "acme,"), ""},
		{"binary values are not split", "x-key-bin", in("x-key-bin", "a,b", "x-key-bin", "c,d"), "c,d"},
		{"other headers", "x-tenant", in("x-other", "acme"), ""},
		{"no metadata", "x-tenant", context.Background(), ""},
		{"empty metadata", "x-tenant", metadata.NewIncomingContext(context.Background(), metadata.MD{}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, callerkey.Metadata(tt.key)(tt.ctx, unaryMethod))
		})
	}
}

func TestRateLimitErrors(t *testing.T) {
	tests := []struct {
		name string
		opts []ServerOption
		want string
	}{
		{"negative rate", []ServerOption{WithMethod(unaryMethod, Limit{Rate: RateLimit{PerSecond: -1}})},
			`interceptor: WithMethod("/sluice.test.v1.TestService/Unary"): Limit.Rate: rate of -1 a second, must be a finite number > 0`},
		{"negative burst", []ServerOption{WithDefault(Limit{Rate: RateLimit{PerSecond: 5, Burst: -2}})},
			`interceptor: WithDefault: Limit.Rate: burst of -2, must be >= 1`},
		{"zero caller rate", []ServerOption{callerRateLimit(callerkey.PeerIP, RateLimit{}, 0)},
			`interceptor: caller limit: RateLimit.PerSecond is 0, must be > 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewServer(tt.opts...)
			assert.EqualError(t, err, tt.want)
		})
	}
}
