package interceptor

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/interceptor/internal/testhook"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Full names of the test service's methods.
const (
	unaryMethod        = "/sluice.test.v1.TestService/Unary"
	serverStreamMethod = "/sluice.test.v1.TestService/ServerStream"
	clientStreamMethod = "/sluice.test.v1.TestService/ClientStream"
	bidiMethod         = "/sluice.test.v1.TestService/Bidi"
	testService        = "/sluice.test.v1.TestService/"
)

// fixed is a Limit pinned at n: min = max, so tests know the limit.
func fixed(n int) Limit { return Limit{Algorithm: limiter.FixedConfig{Limit: n}} }

// perCall is a Limit with seed 001's per-call AIMD, so one sample moves
// the limit: initial = max = 10, backoff 0.5, no timeout in reach.
func perCall() Limit {
	return Limit{Algorithm: limiter.AIMDConfig{
		InitialLimit: 10, MinLimit: 1, MaxLimit: 10, BackoffRatio: 0.5,
		Timeout: time.Hour, PerCall: true,
	}}
}

// env is a test service on 127.0.0.1:0 with sluice on the server, the
// client, or both.
type env struct {
	srv    *Server // nil: unprotected server
	cli    *Client // nil: unprotected client
	client testpb.TestServiceClient
	conn   *grpc.ClientConn
	gs     *grpc.Server
	// releases receives one value per permit returned on either side.
	releases chan string
	// rejections receives "side:reason" per rejected call.
	rejections chan string
}

type envConfig struct {
	server      []ServerOption
	client      []ClientOption
	noServer    bool // no sluice on the server
	noClient    bool // no sluice on the client
	outer       []grpc.UnaryServerInterceptor
	outerStream []grpc.StreamServerInterceptor
	register    func(*grpc.Server)
	serverOpts  []grpc.ServerOption // more options for grpc.NewServer
}

// serverDeadline is an outer interceptor that gives every call that came
// with a deadline d on the server's own clock. A client's deadline reaches
// the server as the grpc-timeout header, and its cancellation as a
// RST_STREAM that may arrive first: a call then ends Canceled, not late.
// The server's own deadline, shorter than the client's, ends it
// DeadlineExceeded.
func serverDeadline(d time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if _, ok := ctx.Deadline(); !ok {
			return h(ctx, req)
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return h(ctx, req)
	}
}

// newEnv starts the service and registers cleanups that stop it and check
// that every permit came back.
func newEnv(t *testing.T, svc *testpb.Service, ec envConfig) *env {
	t.Helper()
	e := &env{releases: make(chan string, 1000), rejections: make(chan string, 1000)}
	var sopts []grpc.ServerOption
	// WaitForHandlers: Stop returns only once every handler has, so the
	// permit checks after it see the final state.
	sopts = append(sopts, grpc.WaitForHandlers(true),
		grpc.ChainUnaryInterceptor(ec.outer...), grpc.ChainStreamInterceptor(ec.outerStream...))
	sopts = append(sopts, ec.serverOpts...)
	if !ec.noServer {
		s, err := NewServer(ec.server...)
		require.NoError(t, err)
		hook(t, s.core, func(h *testhook.Hooks) {
			h.Released = func() { e.releases <- "server" }
			h.Rejected = func(reason string) { e.rejections <- "server:" + reason }
		})
		e.srv = s
		sopts = append(sopts, s.ServerOptions()...)
	}
	gs := grpc.NewServer(sopts...)
	e.gs = gs
	testpb.RegisterTestServiceServer(gs, svc)
	if ec.register != nil {
		ec.register(gs)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })

	dopts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if !ec.noClient {
		c, err := NewClient(ec.client...)
		require.NoError(t, err)
		hook(t, c.core, func(h *testhook.Hooks) {
			h.Released = func() { e.releases <- "client" }
			h.Rejected = func(reason string) { e.rejections <- "client:" + reason }
		})
		e.cli = c
		dopts = append(dopts, c.DialOptions()...)
	}
	conn, err := grpc.NewClient(lis.Addr().String(), dopts...)
	require.NoError(t, err)
	e.conn = conn
	e.client = testpb.NewTestServiceClient(conn)

	t.Cleanup(func() {
		require.NoError(t, conn.Close())
		gs.Stop()
		wg.Wait()
		for _, c := range []*core{e.coreOf(e.srv), e.coreOfClient(e.cli)} {
			if c == nil {
				continue
			}
			for _, g := range c.gates() {
				assert.Zero(t, g.lim.Inflight(), "%s %s: permits in flight after the test", c.side, g.name)
				assert.Zero(t, g.lim.QueueLen(), "%s %s: callers queued after the test", c.side, g.name)
			}
			assert.NoError(t, c.close())
		}
	})
	return e
}

// stop stops the server at once, cancelling every call.
func (e *env) stop() { e.gs.Stop() }

// gracefulStop stops the server once every call has finished.
func (e *env) gracefulStop() { e.gs.GracefulStop() }

// settle waits for every call the server received to finish, stopping
// it, and returns how many permits came back that no one awaited.
func (e *env) settle() int {
	e.gracefulStop()
	return len(e.releases)
}

func (e *env) coreOf(s *Server) *core {
	if s == nil {
		return nil
	}
	return s.core
}

func (e *env) coreOfClient(c *Client) *core {
	if c == nil {
		return nil
	}
	return c.core
}

// awaitRelease waits for the next permit returned on side.
func (e *env) awaitRelease(t *testing.T, side string) {
	t.Helper()
	select {
	case got := <-e.releases:
		require.Equal(t, side, got, "a permit came back on the wrong side")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no permit released on the "+side+" side")
	}
}

// awaitRejection waits for the next rejection and checks its side and
// reason ("server:deadline").
func (e *env) awaitRejection(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-e.rejections:
		require.Equal(t, want, got)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no rejection: want "+want)
	}
}

// gate returns the limiter method uses on c's side.
func gateOf(c *core, method string) *gate { return c.tab.Load().lookup(method).gate }

// gates lists every limiter of c.
func (c *core) gates() []*gate {
	c.metrics.mu.Lock()
	defer c.metrics.mu.Unlock()
	var gs []*gate
	for _, ga := range c.metrics.gates {
		gs = append(gs, ga.g)
	}
	return gs
}

// block is a handler body that holds its permit until released.
type block struct {
	entered chan struct{}
	release chan struct{}
}

func newBlock() *block {
	return &block{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (b *block) wait(ctx context.Context) error {
	b.entered <- struct{}{}
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *block) awaitEntered(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-b.entered:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "handler not entered")
		}
	}
}

// algorithmFunc is an AlgorithmConfig of a test's own making: a func, so
// not comparable, as a user's configuration may not be.
type algorithmFunc func() (limiter.Algorithm, error)

func (f algorithmFunc) New() (limiter.Algorithm, error) { return f() }

// asClient gives options of both sides, built as a server's, to a client.
func asClient(opts []ServerOption) []ClientOption {
	out := make([]ClientOption, len(opts))
	for i, o := range opts {
		out[i] = o.(ClientOption)
	}
	return out
}

// serverOpts and clientOpts give options of both sides to one side.
func serverOpts(opts []Option) []ServerOption {
	out := make([]ServerOption, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

func clientOpts(opts []Option) []ClientOption {
	out := make([]ClientOption, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

// hook edits the test hooks of c until the test ends.
func hook(t testing.TB, c *core, change func(*testhook.Hooks)) {
	t.Helper()
	remove := testhook.Update(c, change)
	t.Cleanup(remove)
}
