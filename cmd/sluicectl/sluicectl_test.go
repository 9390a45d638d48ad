package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/admin"
	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// unary is the limiter of the test service's Unary method.
const unary = "sluice.test.v1.TestService/Unary"

// A server is the test service, protected by sluice with a fixed limit,
// and, unless told otherwise, the admin service, on one real gRPC server.
type server struct {
	target string
	admin  sluicev1.LimitsServiceClient // to change limits behind the command's back
	stop   func()
}

// operator admits every caller, as the admin service of a test may.
func operator(context.Context, string) (string, error) { return "test-operator", nil }

// serve starts a server on lis with limit as every method's limit and the
// admin service with opts (none: no admin service), and makes one call so
// that a limiter exists.
func serve(t *testing.T, lis net.Listener, limit int, opts ...admin.Option) *server {
	t.Helper()
	return serveTLS(t, lis, limit, nil, insecure.NewCredentials(), opts...)
}

// serveTLS is serve with the server's TLS creds, and the test's own
// client's.
func serveTLS(t *testing.T, lis net.Listener, limit int, srvCreds grpc.ServerOption, creds credentials.TransportCredentials, opts ...admin.Option) *server {
	t.Helper()
	limits, err := interceptor.NewServer(interceptor.WithDefault(interceptor.Limit{Algorithm: limiter.FixedConfig{Limit: limit}}))
	require.NoError(t, err)
	srvOpts := limits.ServerOptions()
	if srvCreds != nil {
		srvOpts = append(srvOpts, srvCreds)
	}
	gs := grpc.NewServer(srvOpts...)
	testpb.RegisterTestServiceServer(gs, &testpb.Service{})
	if len(opts) > 0 {
		opts = append(opts, admin.WithLogger(slog.New(slog.DiscardHandler))) // the audit log
		require.NoError(t, admin.Register(gs, limits, opts...))
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	target := lis.Addr().String()
	if lis.Addr().Network() == "unix" {
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	stop := sync.OnceFunc(func() {
		assert.NoError(t, conn.Close())
		gs.Stop()
		wg.Wait()
		assert.NoError(t, limits.Close())
	})
	t.Cleanup(stop)
	_, err = testpb.NewTestServiceClient(conn).Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	return &server{target: target, admin: sluicev1.NewLimitsServiceClient(conn), stop: stop}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return lis
}

// sluicectl runs the command line args and returns what it printed.
func sluicectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(t.Context(), args, output{w: &out}, io.Discard)
	return out.String(), err
}

func TestList(t *testing.T) {
	s := serve(t, listen(t), 5, admin.WithAuthorizer(operator))
	out, err := sluicectl(t, "list", "-plaintext", s.target)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	assert.Regexp(t, `^\s*LIMIT\s+INFLIGHT\s+QUEUED\s+RTT\s+ADMITTED\s+REJECTED\s+DRY-RUN\s+OVERRIDE\s+LIMITER$`, lines[0])
	assert.Regexp(t, `^\s*5\s+0\s+0\s+\S+s\s+1\s+0\s+-\s+-\s+`+regexp.QuoteMeta(unary)+`$`, lines[1])
}

func TestChanges(t *testing.T) {
	s := serve(t, listen(t), 5, admin.WithAuthorizer(operator))
	steps := []struct {
		args []string
		want string
	}{
		// A name with the leading slash of a gRPC method works too.
		{[]string{"override", "-plaintext", s.target, "/" + unary, "2", "-for", "10m"},
			unary + ": limit 5 -> 2, pinned for 10m0s; then it adapts again from there\n"},
		{[]string{"override", "-plaintext", s.target, unary, "3", "--for=1h"},
			unary + ": limit 2 -> 3, pinned for 1h0m0s (replaces an override with 10m0s left); then it adapts again from there\n"},
		{[]string{"clear", "-plaintext", s.target, unary},
			unary + ": override cleared (1h0m0s was left); limit 3 -> 5, adapting again\n"},
		{[]string{"clear", s.target, unary, "-plaintext"},
			unary + ": had no override; limit 5, adapting\n"},
		{[]string{"dry-run", "-plaintext", s.target, unary, "on"},
			unary + ": dry run off -> on (decisions recorded, none enforced, until the server's configuration is next reloaded)\n"},
		{[]string{"dry-run", "-plaintext", s.target, unary, "on"},
			unary + ": dry run already on, unchanged (decisions recorded, none enforced, until the server's configuration is next reloaded)\n"},
		{[]string{"dry-run", "-plaintext", s.target, "/" + unary, "off"},
			unary + ": dry run on -> off (decisions enforced)\n"},
	}
	for _, step := range steps {
		out, err := sluicectl(t, step.args...)
		require.NoError(t, err, "%q", step.args)
		assert.Equal(t, step.want, out, "%q", step.args)
	}

	_, err := s.admin.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: unary, Limit: 0, Ttl: durationpbOf(time.Hour)})
	require.NoError(t, err)
	out, err := sluicectl(t, "list", "-plaintext", s.target)
	require.NoError(t, err)
	assert.Regexp(t, `\n\s*0\s+0\s+0\s+\S+s\s+1\s+0\s+-\s+(1h0m0s|59m59s) left\s+`+regexp.QuoteMeta(unary)+"\n$", out)
}

func TestWatch(t *testing.T) {
	s := serve(t, listen(t), 5, admin.WithAuthorizer(operator))
	out, err := sluicectl(t, "watch", "-plaintext", "-n", "2", "-interval", "100ms", s.target)
	require.NoError(t, err)
	tables := strings.SplitAfter(out, unary+"\n\n")
	require.Len(t, tables, 3, "two tables, each followed by a blank line: %s", out)
	assert.Empty(t, tables[2])
	for _, table := range tables[:2] {
		assert.Regexp(t, `^sluicectl watch `+regexp.QuoteMeta(s.target)+`  \d\d:\d\d:\d\d  every 100ms  1 limiters\n\n`, table)
		assert.Regexp(t, `\n\s*5\s+0\s+0\s+\S+s\s+(-|0\.0)\s+(-|0\.0)\s+-\s+-\s+`+regexp.QuoteMeta(unary)+"\n\n$", table)
	}
	assert.NotContains(t, out, clearScreen, "not a terminal")
}

// A change shows in the next table; Ctrl-C ends the watch cleanly.
func TestWatchRefresh(t *testing.T) {
	s := serve(t, listen(t), 5, admin.WithAuthorizer(operator))
	scr := newScreen()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"watch", "-plaintext", "-interval", "100ms", s.target}, output{w: scr, tty: true}, io.Discard)
	}()
	scr.waitFor(t, "the first table", func(s string) bool { return strings.Contains(s, unary) })
	_, err := s.admin.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: unary, Limit: 1, Ttl: durationpbOf(time.Hour)})
	require.NoError(t, err)
	scr.waitFor(t, "a table with the override", func(s string) bool { return strings.Contains(lastScreen(s), " left") })
	last := lastScreen(scr.String())
	assert.Regexp(t, `\n\s*1\s+0\s+0\s+\S+s\s+(-|0\.0)\s+(-|0\.0)\s+-\s+(1h0m0s|59m59s) left\s+`+regexp.QuoteMeta(unary)+"\n$", last)
	cancel()
	assert.NoError(t, <-done, "Ctrl-C is a clean exit")
}

// Calls admitted and rejected between two refreshes show as rates, and
// the limiter rejecting the most comes first.
func TestWatchRates(t *testing.T) {
	s := serve(t, listen(t), 5, admin.WithAuthorizer(operator))
	conn, err := grpc.NewClient(s.target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { assert.NoError(t, conn.Close()) }()
	calls := testpb.NewTestServiceClient(conn)
	// A second limiter, which sorts before Unary by name.
	stream, err := calls.ServerStream(t.Context(), &testpb.ServerStreamRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.ErrorIs(t, err, io.EOF)
	_, err = s.admin.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: unary, Limit: 0, Ttl: durationpbOf(time.Hour)})
	require.NoError(t, err)

	scr := newScreen()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"watch", "-plaintext", "-interval", "100ms", s.target}, output{w: scr, tty: true}, io.Discard)
	}()
	scr.waitFor(t, "the first table", func(s string) bool { return strings.Contains(lastScreen(s), unary) })

	// Calls rejected by Unary's override, until a table shows their rate.
	driving, stopDriving := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for driving.Err() == nil {
			_, _ = calls.Unary(driving, &testpb.UnaryRequest{})
		}
	})
	rejecting := regexp.MustCompile(`(?m)^\s*0\s+0\s+0\s+\S+\s+0\.0\s+([0-9.]+)\s+-\s+\S+ left\s+` + regexp.QuoteMeta(unary) + "$")
	var last string
	scr.waitFor(t, "a table with Unary's rejections per second", func(s string) bool {
		last = lastScreen(s)
		m := rejecting.FindStringSubmatch(last)
		return m != nil && m[1] != "0.0"
	})
	stopDriving()
	wg.Wait()
	cancel()
	require.NoError(t, <-done)

	lines := strings.Split(strings.TrimSpace(last), "\n")
	require.Len(t, lines, 5, last)
	assert.Regexp(t, `^\s*LIMIT\s+INFLIGHT\s+QUEUED\s+RTT\s+ADMITTED/S\s+REJECTED/S\s+DRY-RUN\s+OVERRIDE\s+LIMITER$`, lines[2])
	assert.Regexp(t, rejecting, lines[3], "the limiter rejecting calls comes first")
	assert.Regexp(t, `^\s*5\s+0\s+0\s+\S+\s+(-|0\.0)\s+(-|0\.0)\s+-\s+-\s+sluice.test.v1.TestService/ServerStream$`, lines[4])
}

// A server that counts nothing (older than the counts) shows "-".
func TestNoCounts(t *testing.T) {
	lis := listen(t)
	gs := grpc.NewServer()
	sluicev1.RegisterLimitsServiceServer(gs, uncounted{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	defer func() {
		gs.Stop()
		wg.Wait()
	}()
	out, err := sluicectl(t, "list", "-plaintext", lis.Addr().String())
	require.NoError(t, err)
	assert.Regexp(t, `\n\s*5\s+0\s+0\s+-\s+-\s+-\s+-\s+-\s+`+regexp.QuoteMeta(unary)+"\n$", out)
	out, err = sluicectl(t, "watch", "-plaintext", "-n", "1", lis.Addr().String())
	require.NoError(t, err)
	assert.Regexp(t, `\n\s*5\s+0\s+0\s+-\s+-\s+-\s+-\s+-\s+`+regexp.QuoteMeta(unary)+"\n\n$", out)
}

// uncounted is an admin service that reports no counts, as servers did
// before admitted_total and rejected_total.
type uncounted struct {
	sluicev1.UnimplementedLimitsServiceServer
}

func (uncounted) ListLimits(context.Context, *sluicev1.ListLimitsRequest) (*sluicev1.ListLimitsResponse, error) {
	return &sluicev1.ListLimitsResponse{Limiters: []*sluicev1.LimiterStatus{{Name: unary, Limit: 5}}}, nil
}

func (uncounted) WatchLimits(_ *sluicev1.WatchLimitsRequest, stream grpc.ServerStreamingServer[sluicev1.WatchLimitsResponse]) error {
	if err := stream.Send(&sluicev1.WatchLimitsResponse{Limiters: []*sluicev1.LimiterStatus{{Name: unary, Limit: 5}}}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// The server restarts: the watch says the connection is lost, then shows
// the new server's limiters.
func TestWatchReconnects(t *testing.T) {
	lis := listen(t)
	addr := lis.Addr().String()
	s := serve(t, lis, 5, admin.WithAuthorizer(operator))
	scr := newScreen()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"watch", "-plaintext", "-interval", "100ms", addr}, output{w: scr}, io.Discard)
	}()
	scr.waitFor(t, "the first table", func(s string) bool { return strings.Contains(s, unary) })

	s.stop()
	scr.waitFor(t, "the lost connection", func(s string) bool { return strings.Contains(s, "connection lost") })
	lis, err := net.Listen("tcp", addr)
	require.NoError(t, err, "the same port again")
	serve(t, lis, 7, admin.WithAuthorizer(operator))
	newServer := regexp.MustCompile(`\n\s*7\s+0\s+0\s+\S+s\s+(-|0\.0)\s+(-|0\.0)\s+-\s+-\s+` + regexp.QuoteMeta(unary) + "\n")
	scr.waitFor(t, "the new server's limiter", func(s string) bool {
		_, after, _ := strings.Cut(s, "connection lost")
		return newServer.MatchString(after)
	})
	cancel()
	assert.NoError(t, <-done)
}

func TestUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "sluicectl") // short: a socket path has at most 107 bytes
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	lis, err := net.Listen("unix", filepath.Join(dir, "admin.sock"))
	require.NoError(t, err)
	s := serve(t, lis, 5, admin.WithUnixSocketPeers())
	require.True(t, strings.HasPrefix(s.target, "unix:///"), s.target)
	out, err := sluicectl(t, "list", "-plaintext", s.target)
	require.NoError(t, err)
	assert.Contains(t, out, unary)
}

func TestErrors(t *testing.T) {
	refuse := func(context.Context, string) (string, error) {
		return "", errors.New("operators only: send x-operator-token")
	}
	denied := serve(t, listen(t), 5, admin.WithAuthorizer(refuse))
	open := serve(t, listen(t), 5, admin.WithAuthorizer(operator))
	noAdmin := serve(t, listen(t), 5)
	const permission = "PERMISSION_DENIED: this client is not authorized by the server's admin.WithAuthorizer " +
		"(or WithTLSClients, WithUnixSocketPeers); the server said: operators only: send x-operator-token"
	unimplemented := "UNIMPLEMENTED: the server at " + noAdmin.target + " does not serve sluice's admin service (sluice.v1.LimitsService): " +
		"the server must register it with admin.Register, perhaps on another port"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"list denied", []string{"list", "-plaintext", denied.target}, permission},
		{"watch denied", []string{"watch", "-plaintext", denied.target}, permission},
		{"override denied", []string{"override", "-plaintext", denied.target, unary, "1", "-for", "1m"}, permission},
		{"list unimplemented", []string{"list", "-plaintext", noAdmin.target}, unimplemented},
		{"watch unimplemented", []string{"watch", "-plaintext", noAdmin.target}, unimplemented},
		{"clear unimplemented", []string{"clear", "-plaintext", noAdmin.target, unary}, unimplemented},
		{"unknown limiter", []string{"dry-run", "-plaintext", open.target, "/nope.v1.Svc/Get", "on"},
			`NOT_FOUND: the server has no limiter "nope.v1.Svc/Get": "sluicectl list ` + open.target +
				`" shows their names (a limiter appears on its method's first call)`},
		{"ttl too long", []string{"override", "-plaintext", open.target, unary, "1", "-for", "25h"},
			"INVALID_ARGUMENT: interceptor: override ttl is 25h0m0s, must be in (0, 24h0m0s]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sluicectl(t, tt.args...)
			require.Error(t, err)
			assert.Equal(t, tt.want, err.Error())
			assert.Equal(t, 1, exitCode(err, io.Discard))
		})
	}
}

// A server that is not there, or speaks no TLS to a TLS client.
func TestUnreachable(t *testing.T) {
	lis := listen(t)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	_, err := sluicectl(t, "list", "-plaintext", addr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "UNAVAILABLE: cannot reach the admin service at "+addr)
	assert.Contains(t, err.Error(), "is the server up at that address?")

	s := serve(t, listen(t), 5, admin.WithAuthorizer(operator))
	_, err = sluicectl(t, "list", s.target)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "for a server without TLS use -plaintext")
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "name a command: list, watch, override, clear or dry-run"},
		{[]string{"top"}, `unknown command "top": want list, watch, override, clear or dry-run (sluicectl help)`},
		{[]string{"list"}, `list takes 1 argument(s), got 0: []`},
		{[]string{"override", "-plaintext", "localhost:1", unary, "2"},
			"override needs -for DURATION, how long the limit holds, such as -for 10m (at most 24h)"},
		{[]string{"override", "-plaintext", "localhost:1", unary, "-2", "-for", "1m"},
			`flag provided but not defined: -2`},
		{[]string{"override", "-plaintext", "localhost:1", unary, "two", "-for", "1m"},
			`LIMIT "two": want a whole number of calls at once, 0 or more (0 rejects every call)`},
		{[]string{"dry-run", "-plaintext", "localhost:1", unary, "yes"},
			`dry-run ` + unary + ` "yes": want on (record decisions, enforce none) or off (enforce them)`},
		{[]string{"clear", "-plaintext", "localhost:1", "/"},
			"the limiter name is empty: give it as list shows it, such as pkg.Svc/Method"},
		{[]string{"watch", "-plaintext", "-interval", "10ms", "localhost:1"},
			"-interval 10ms: the admin service watches at most every 100ms"},
		{[]string{"list", "-plaintext", "-cacert", "ca.pem", "localhost:1"},
			"-plaintext uses no TLS: leave out -cacert, -cert, -key and -servername, or drop -plaintext"},
		{[]string{"list", "-cert", "c.pem", "localhost:1"}, "a client certificate needs both -cert and -key"},
		{[]string{"list", "-H", "x-token", "localhost:1"},
			`invalid value "x-token" for flag -H: header "x-token": want 'name: value'`},
	}
	for _, tt := range tests {
		_, err := sluicectl(t, tt.args...)
		require.Error(t, err, "%q", tt.args)
		assert.Equal(t, tt.want, err.Error(), "%q", tt.args)
		assert.Equal(t, 2, exitCode(err, io.Discard), "%q", tt.args)
	}
}

// A header given with -H reaches the server's authorizer.
func TestHeader(t *testing.T) {
	token := func(ctx context.Context, _ string) (string, error) {
		if md, _ := metadataFrom(ctx); len(md) == 1 && md[0] == "s3cret" {
			return "token holder", nil
		}
		return "", errors.New("send x-operator-token")
	}
	s := serve(t, listen(t), 5, admin.WithAuthorizer(token))
	_, err := sluicectl(t, "list", "-plaintext", s.target)
	assert.ErrorContains(t, err, "PERMISSION_DENIED")
	out, err := sluicectl(t, "list", "-plaintext", "-H", "X-Operator-Token: s3cret", s.target)
	require.NoError(t, err)
	assert.Contains(t, out, unary)
}

// screen is a writer whose text a test can wait on.
type screen struct {
	mu    sync.Mutex
	b     strings.Builder
	wrote chan struct{}
}

func newScreen() *screen { return &screen{wrote: make(chan struct{}, 1)} }

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.wrote <- struct{}{}:
	default:
	}
	return s.b.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until what was written satisfies ok, for at most 30
// seconds, a bound far beyond what the test needs.
func (s *screen) waitFor(t *testing.T, what string, ok func(string) bool) {
	t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for !ok(s.String()) {
		select {
		case <-s.wrote:
		case <-timeout.C:
			t.Fatalf("waited 30s for %s; the screen:\n%s", what, s.String())
		}
	}
}

// lastScreen is the last complete table drawn on a terminal.
func lastScreen(s string) string {
	screens := strings.Split(s, clearScreen)
	for i := len(screens) - 1; i >= 0; i-- {
		if strings.HasSuffix(screens[i], "\n") && strings.Contains(screens[i], "LIMITER") {
			return screens[i]
		}
	}
	return ""
}

func durationpbOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func metadataFrom(ctx context.Context) ([]string, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	return md.Get("x-operator-token"), ok
}
