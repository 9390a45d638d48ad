package interceptor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
)

func TestServerRejectsOverLimit(t *testing.T) {
	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		return &testpb.UnaryResponse{}, b.wait(ctx)
	}}
	e := newEnv(t, svc, envConfig{
		server:   []ServerOption{WithMethod(unaryMethod, fixed(2)), WithPushback(func(LimiterState) time.Duration { return 250 * time.Millisecond })},
		noClient: true,
	})
	ctx := t.Context()

	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
			assert.NoError(t, err)
		})
	}
	b.awaitEntered(t, 2)

	var trailer metadata.MD
	_, err := e.client.Unary(ctx, &testpb.UnaryRequest{}, grpc.Trailer(&trailer))
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, "sluice: server rejected /sluice.test.v1.TestService/Unary: concurrency limit 2 reached (2 in flight, 0 queued)",
		status.Convert(err).Message())
	assert.Equal(t, []string{"250"}, trailer.Get(pushbackKey))

	close(b.release)
	wg.Wait()
	for range 2 {
		e.awaitRelease(t, "server")
	}
}

func TestServerOutcomeAdjustsLimit(t *testing.T) {
	tests := []struct {
		name    string
		handler func(ctx context.Context) error
		call    func(t *testing.T, c testpb.TestServiceClient, entered <-chan struct{}) error
		want    codes.Code
		limit   int           // after the call, from 10
		expiry  time.Duration // the server's own deadline (serverDeadline), if any
	}{
		{"success leaves a full limit", func(context.Context) error { return nil },
			nil, codes.OK, 10, 0},
		{"RESOURCE_EXHAUSTED from the handler backs off",
			func(context.Context) error { return status.Error(codes.ResourceExhausted, "downstream full") },
			nil, codes.ResourceExhausted, 5, 0},
		// Before any call has answered OK there is nothing to judge a
		// deadline by, and an overrun counts (TestFreshServerHearsOverruns;
		// TestAttackDeadlineCannotLowerLimit has the rule once it has).
		{"a deadline overrun with nothing learned counts",
			func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
			func(t *testing.T, c testpb.TestServiceClient, _ <-chan struct{}) error {
				// Past the server's own deadline: the server ends the call.
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				_, err := c.Unary(ctx, &testpb.UnaryRequest{})
				return err
			}, codes.DeadlineExceeded, 5, 200 * time.Millisecond},
		{"a handler finishing after the deadline with nothing learned counts",
			func(ctx context.Context) error { <-ctx.Done(); return nil },
			func(t *testing.T, c testpb.TestServiceClient, _ <-chan struct{}) error {
				// Past the server's own deadline: the server ends the call.
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				_, err := c.Unary(ctx, &testpb.UnaryRequest{})
				return err // the server's late OK
			}, codes.OK, 5, 200 * time.Millisecond},
		{"a cancelled call changes nothing",
			func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
			func(t *testing.T, c testpb.TestServiceClient, entered <-chan struct{}) error {
				ctx, cancel := context.WithCancel(t.Context())
				go func() { <-entered; cancel() }()
				_, err := c.Unary(ctx, &testpb.UnaryRequest{})
				return err
			}, codes.Canceled, 10, 0},
		{"other errors are not overload",
			func(context.Context) error { return status.Error(codes.NotFound, "no such thing") },
			nil, codes.NotFound, 10, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entered := make(chan struct{})
			var once sync.Once
			svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
				once.Do(func() { close(entered) })
				return &testpb.UnaryResponse{}, tt.handler(ctx)
			}}
			ec := envConfig{server: []ServerOption{WithDefault(perCall())}, noClient: true}
			if tt.expiry > 0 {
				ec.outer = []grpc.UnaryServerInterceptor{serverDeadline(tt.expiry)}
			}
			e := newEnv(t, svc, ec)
			call := tt.call
			if call == nil {
				call = func(t *testing.T, c testpb.TestServiceClient, _ <-chan struct{}) error {
					_, err := c.Unary(t.Context(), &testpb.UnaryRequest{})
					return err
				}
			}
			assert.Equal(t, tt.want, status.Code(call(t, e.client, entered)))
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				require.FailNow(t, "the call never reached the handler")
			}
			e.awaitRelease(t, "server")
			assert.Equal(t, tt.limit, gateOf(e.srv.core, unaryMethod).lim.Limit())
		})
	}
}

// recovery is the usual recovery interceptor, installed outside sluice.
func recovery(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return h(ctx, req)
}

func recoveryStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return h(srv, ss)
}

func TestServerPanicReleasesPermit(t *testing.T) {
	svc := &testpb.Service{
		UnaryFunc: func(context.Context, *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
			panic("handler bug")
		},
		ServerStreamFunc: func(*testpb.ServerStreamRequest, grpc.ServerStreamingServer[testpb.ServerStreamResponse]) error {
			panic("stream handler bug")
		},
	}
	e := newEnv(t, svc, envConfig{
		server:      []ServerOption{WithDefault(perCall())},
		noClient:    true,
		outer:       []grpc.UnaryServerInterceptor{recovery},
		outerStream: []grpc.StreamServerInterceptor{recoveryStream},
	})
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	assert.Equal(t, "panic: handler bug", status.Convert(err).Message(), "the panic reaches the recovery interceptor")
	e.awaitRelease(t, "server")

	stream, err := e.client.ServerStream(t.Context(), &testpb.ServerStreamRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	assert.Equal(t, "panic: stream handler bug", status.Convert(err).Message())
	e.awaitRelease(t, "server")

	for _, m := range []string{unaryMethod, serverStreamMethod} {
		assert.Equal(t, 10, gateOf(e.srv.core, m).lim.Limit(), "a panic is no overload signal")
	}
}

func TestServerStreamHoldsPermit(t *testing.T) {
	b := newBlock()
	svc := &testpb.Service{ServerStreamFunc: func(_ *testpb.ServerStreamRequest, s grpc.ServerStreamingServer[testpb.ServerStreamResponse]) error {
		if err := b.wait(s.Context()); err != nil {
			return err
		}
		return s.Send(&testpb.ServerStreamResponse{})
	}}
	e := newEnv(t, svc, envConfig{server: []ServerOption{WithMethod(serverStreamMethod, fixed(1)), WithPushback(func(LimiterState) time.Duration { return NoPushback })}, noClient: true})

	first, err := e.client.ServerStream(t.Context(), &testpb.ServerStreamRequest{})
	require.NoError(t, err)
	b.awaitEntered(t, 1)

	second, err := e.client.ServerStream(t.Context(), &testpb.ServerStreamRequest{})
	require.NoError(t, err)
	_, err = second.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Empty(t, second.Trailer().Get(pushbackKey), "NoPushback sends no trailer")

	close(b.release)
	_, err = first.Recv()
	require.NoError(t, err)
	_, err = first.Recv()
	require.ErrorIs(t, err, io.EOF)
	e.awaitRelease(t, "server")
}

func TestServerQueue(t *testing.T) {
	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		return &testpb.UnaryResponse{}, b.wait(ctx)
	}}
	e := newEnv(t, svc, envConfig{
		server:   []ServerOption{WithMethod(unaryMethod, Limit{Algorithm: limiter.FixedConfig{Limit: 1}, Queue: limiter.Queue{Size: 1}})},
		noClient: true,
		outer:    []grpc.UnaryServerInterceptor{serverDeadline(50 * time.Millisecond)},
	})
	g := gateOf(e.srv.core, unaryMethod)

	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		assert.NoError(t, err)
	})
	b.awaitEntered(t, 1)

	// A queued call whose deadline passes gets DEADLINE_EXCEEDED. The
	// server's own deadline (50 ms) passes first.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
	cancel()
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
	// The server learns of the expiry a moment after the client.
	e.awaitRejection(t, "server:deadline")

	// One caller waits; the next finds the queue full.
	wg.Go(func() {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		assert.NoError(t, err)
	})
	for g.lim.QueueLen() == 0 {
		// The queued caller's arrival is not observable otherwise; yield
		// to the gRPC goroutines until it is in the queue.
		runtime.Gosched()
	}
	_, err = e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	e.awaitRejection(t, "server:limit")

	close(b.release)
	wg.Wait()
	e.awaitRelease(t, "server")
	e.awaitRelease(t, "server")
}

func TestMethodPrecedenceOverGRPC(t *testing.T) {
	svc := &testpb.Service{}
	e := newEnv(t, svc, envConfig{
		server: []ServerOption{
			WithDefault(fixed(7)),
			WithMethod(testService, fixed(5)),
			WithMethod(unaryMethod, fixed(3)),
			WithExempt(bidiMethod),
		},
		noClient: true,
		register: func(s *grpc.Server) { healthpb.RegisterHealthServer(s, health.NewServer()) },
	})
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")

	hc := healthpb.NewHealthClient(e.conn)
	_, err = hc.Check(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)

	s := e.srv.core
	assert.Equal(t, 3, gateOf(s, unaryMethod).lim.Limit())
	assert.Equal(t, 5, gateOf(s, serverStreamMethod).lim.Limit())
	assert.Same(t, gateOf(s, serverStreamMethod), gateOf(s, clientStreamMethod), "a service entry shares one limiter")
	assert.Nil(t, gateOf(s, bidiMethod), "exempt")
	assert.Nil(t, gateOf(s, "/grpc.health.v1.Health/Check"), "health is exempt by default")
	assert.Equal(t, 7, gateOf(s, "/other.v1.Svc/A").lim.Limit())
	assert.NotSame(t, gateOf(s, "/other.v1.Svc/A"), gateOf(s, "/other.v1.Svc/B"), "default limiters are per method")
	assert.NoError(t, e.srv.CheckRegistered(grpcServerInfo{"sluice.test.v1.TestService": {"Unary", "ServerStream", "ClientStream", "Bidi"}}))
}

func TestCheckRegistered(t *testing.T) {
	s, err := NewServer(
		WithMethod(unaryMethod, fixed(1)),
		// Declared by the linked definition, but not registered.
		WithMethod(bidiMethod, fixed(1)),
		// No linked definition to check it by.
		WithMethod("/sluice.test.v1.TestServcie/", fixed(1)),
	)
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	err = s.CheckRegistered(grpcServerInfo{"sluice.test.v1.TestService": {"Unary"}})
	assert.EqualError(t, err, "interceptor: configured but not served by this server: /sluice.test.v1.TestServcie/, /sluice.test.v1.TestService/Bidi")
}

// grpcServerInfo fakes a server's registered services.
type grpcServerInfo map[string][]string

func (g grpcServerInfo) GetServiceInfo() map[string]grpc.ServiceInfo {
	out := map[string]grpc.ServiceInfo{}
	for svc, methods := range g {
		var mi []grpc.MethodInfo
		for _, m := range methods {
			mi = append(mi, grpc.MethodInfo{Name: m})
		}
		out[svc] = grpc.ServiceInfo{Methods: mi}
	}
	return out
}

func TestServerHealthCanBeLimited(t *testing.T) {
	s, err := NewServer(WithMethod("/grpc.health.v1.Health/", fixed(4)))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	g := gateOf(s.core, "/grpc.health.v1.Health/Check")
	require.NotNil(t, g, "naming a default exemption replaces it")
	assert.Equal(t, 4, g.lim.Limit())
}

func TestOptionErrors(t *testing.T) {
	badAIMD := limiter.AIMDConfig{BackoffRatio: 1.2}
	tests := []struct {
		name string
		opts []Option
		want string
	}{
		{"no leading slash", []Option{WithMethod("pkg.Svc/Method", Limit{})},
			`interceptor: method name "pkg.Svc/Method" does not start with '/': want "/package.Service/Method" or "/package.Service/"`},
		{"no service separator", []Option{WithMethod("/pkg.Svc", Limit{})},
			`interceptor: method name "/pkg.Svc" has no '/' after the service: want "/package.Service/Method" or "/package.Service/"`},
		{"empty service", []Option{WithExempt("//Method")},
			`interceptor: method name "//Method" has an empty service: want "/package.Service/Method" or "/package.Service/"`},
		{"too many slashes", []Option{WithMethod("/a/b/c", Limit{})},
			`interceptor: method name "/a/b/c" has more than two '/': want "/package.Service/Method" or "/package.Service/"`},
		{"spaces", []Option{WithMethod("/pkg.Svc/Do it", Limit{})},
			`interceptor: method name "/pkg.Svc/Do it" contains spaces or control characters: want "/package.Service/Method" or "/package.Service/"`},
		{"empty package part", []Option{WithMethod("/pkg..Svc/", Limit{})},
			`interceptor: method name "/pkg..Svc/" has an empty package or service name part: want "/package.Service/Method" or "/package.Service/"`},
		{"duplicate", []Option{WithMethod(unaryMethod, Limit{}), WithExempt(unaryMethod)},
			`interceptor: method "/sluice.test.v1.TestService/Unary" is configured twice`},
		{"bad algorithm in a method", []Option{WithMethod(unaryMethod, Limit{Algorithm: badAIMD})},
			`interceptor: WithMethod("/sluice.test.v1.TestService/Unary"): limiter: AIMDConfig.BackoffRatio is 1.2, must be in [0.5, 1)`},
		{"bad default", []Option{WithDefault(Limit{Algorithm: limiter.FixedConfig{Limit: 0}})},
			`interceptor: WithDefault: limiter: FixedConfig.Limit is 0, must be in [1, 1048576]`},
		{"bad queue", []Option{WithDefault(Limit{Queue: limiter.Queue{Size: -1}})},
			`interceptor: WithDefault: limiter: Queue.Size is -1, must be in [0, 1048576]`},
		{"nil algorithm result", []Option{WithDefault(Limit{Algorithm: algorithmFunc(func() (limiter.Algorithm, error) { return nil, nil })})},
			`interceptor: WithDefault: Limit.Algorithm returned a nil Algorithm`},
		{"nil classifier", []Option{WithClassifier(nil)},
			`interceptor: WithClassifier(nil): a Classifier is required; omit the option for DefaultClassifier`},
		{"nil meter provider", []Option{WithMeterProvider(nil)},
			`interceptor: WithMeterProvider(nil): a MeterProvider is required; omit the option for the global one`},
		{"every problem is reported", []Option{WithMethod("a", Limit{}), WithMethod("b", Limit{})},
			"interceptor: method name \"a\" does not start with '/': want \"/package.Service/Method\" or \"/package.Service/\"\n" +
				"interceptor: method name \"b\" does not start with '/': want \"/package.Service/Method\" or \"/package.Service/\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewServer(serverOpts(tt.opts)...)
			assert.Nil(t, s)
			assert.EqualError(t, err, tt.want)
			c, err := NewClient(clientOpts(tt.opts)...)
			assert.Nil(t, c)
			assert.EqualError(t, err, tt.want)
		})
	}
}

// TestSideOptionErrors checks the options of one side.
func TestSideOptionErrors(t *testing.T) {
	_, err := NewServer(WithPushback(nil))
	assert.EqualError(t, err, "interceptor: WithPushback(nil): a PushbackFunc is required; omit the option for DefaultPushback")
	_, err = NewClient(WithMaxPushback(-time.Second))
	assert.EqualError(t, err, "interceptor: WithMaxPushback(-1s): must be >= 0 (0 turns pushback off)")
}

func TestNilOptionIsIgnored(t *testing.T) {
	var none Option // a nil func in a non-nil ServerOption or ClientOption
	s, err := NewServer(nil, WithDefault(fixed(3)), none, nil)
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	assert.Equal(t, 3, gateOf(s.core, unaryMethod).lim.Limit())
	c, err := NewClient(none, nil)
	require.NoError(t, err)
	assert.NoError(t, c.Close())
}

func TestRoutesAreBounded(t *testing.T) {
	s, err := NewServer(WithMethod(unaryMethod, fixed(2)))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	for i := range maxRoutes + 10 {
		s.tab.Load().lookup(fmt.Sprintf("/gen.Svc/M%d", i))
	}
	assert.LessOrEqual(t, len(*s.tab.Load().routes.Load()), maxRoutes)
	r := s.tab.Load().lookup("/gen.Svc/Late")
	assert.Equal(t, otherMethod, r.gate.name)
	later := s.tab.Load().lookup("/gen.Svc/Later")
	assert.Same(t, r.gate, later.gate, "overflow methods share one limiter")
	assert.Same(t, r.attrs, later.attrs, "and one set of attributes, rpc.method _OTHER")
	assert.Equal(t, 2, gateOf(s.core, unaryMethod).lim.Limit(), "configured methods keep their limiter past the bound")
}

var errBoom = errors.New("boom")

func TestDefaultClassifier(t *testing.T) {
	tests := []struct {
		name string
		res  Result
		want limiter.Outcome
	}{
		{"ok", Result{}, limiter.Success},
		{"ok but late", Result{Late: true}, limiter.Dropped},
		{"resource exhausted", Result{Err: status.Error(codes.ResourceExhausted, "")}, limiter.Dropped},
		{"deadline exceeded", Result{Err: status.Error(codes.DeadlineExceeded, "")}, limiter.Dropped},
		{"bare context deadline", Result{Err: context.DeadlineExceeded}, limiter.Dropped},
		{"wrapped context deadline", Result{Err: fmt.Errorf("db: %w", context.DeadlineExceeded)}, limiter.Dropped},
		{"canceled", Result{Err: status.Error(codes.Canceled, "")}, limiter.Ignored},
		{"bare context canceled", Result{Err: context.Canceled}, limiter.Ignored},
		{"not found", Result{Err: status.Error(codes.NotFound, "")}, limiter.Success},
		{"unavailable", Result{Err: status.Error(codes.Unavailable, "")}, limiter.Success},
		{"plain error", Result{Err: errBoom}, limiter.Success},
		{"stream ok", Result{Stream: true}, limiter.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, DefaultClassifier(tt.res))
		})
	}
}

func TestCustomClassifier(t *testing.T) {
	svc := &testpb.Service{UnaryFunc: func(context.Context, *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		return nil, status.Error(codes.Unavailable, "db down")
	}}
	unavailableIsOverload := func(r Result) limiter.Outcome {
		if status.Code(r.Err) == codes.Unavailable {
			return limiter.Dropped
		}
		return DefaultClassifier(r)
	}
	e := newEnv(t, svc, envConfig{server: []ServerOption{WithDefault(perCall()), WithClassifier(unavailableIsOverload)}, noClient: true})
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	assert.Equal(t, codes.Unavailable, status.Code(err))
	e.awaitRelease(t, "server")
	assert.Equal(t, 5, gateOf(e.srv.core, unaryMethod).lim.Limit())
}

func TestDefaultPushback(t *testing.T) {
	tests := []struct {
		rtt, want time.Duration
	}{
		{0, 100 * time.Millisecond},
		{time.Microsecond, minPushback},
		{20 * time.Millisecond, 20 * time.Millisecond},
		{time.Minute, maxPushback},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, DefaultPushback(LimiterState{RTT: tt.rtt}), "rtt %v", tt.rtt)
	}
}

func TestLimiters(t *testing.T) {
	s, err := NewServer(WithMethod(testService, fixed(3)), WithDefault(fixed(2)))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	assert.Empty(t, s.Limiters())
	r := s.tab.Load().lookup(unaryMethod)
	s.tab.Load().lookup(bidiMethod) // same service limiter
	s.tab.Load().lookup("/other.v1.Svc/Get")
	tok, rej := s.admit(t.Context(), r)
	require.Nil(t, rej)
	assert.Equal(t, []LimiterState{
		{Name: "sluice.test.v1.TestService/", Limit: 3, Inflight: 1},
		{Name: "other.v1.Svc/Get", Limit: 2},
	}, s.Limiters())
	s.finish(t.Context(), r, &tok, Result{})
}

// TestFreshProcessRefusesNothing: 200 calls at once through a fresh
// default limiter, on either side, in front of a handler that has room for
// all of them. Started at a limit of 20, the client refused 180 of them
// with no server-side sluice at all, and the server 168–177.
func TestFreshProcessRefusesNothing(t *testing.T) {
	const calls = 200
	tests := []struct {
		name string
		ec   envConfig
	}{
		{"client, unprotected server", envConfig{noServer: true}},
		{"server, unprotected client", envConfig{noClient: true}},
		{"both", envConfig{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each handler holds its call until all have arrived, so that
			// no call returns, and no limit is learned, before the last
			// is admitted.
			var arrived sync.WaitGroup
			arrived.Add(calls)
			all := make(chan struct{})
			go func() { arrived.Wait(); close(all) }()
			svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
				arrived.Done()
				select {
				case <-all:
					return &testpb.UnaryResponse{}, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}}
			e := newEnv(t, svc, tt.ec)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			errs := make([]error, calls)
			var wg sync.WaitGroup
			for i := range calls {
				wg.Go(func() {
					_, errs[i] = e.client.Unary(ctx, &testpb.UnaryRequest{})
				})
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "call %d", i)
			}
		})
	}
}

// TestFreshProcessLoopingCallers: 200 callers calling in a loop for 2 s
// through a fresh default limiter, on either side, in front of a 20 ms
// handler with room for all of them. Started at a limit of 20, the server
// refused 10–25 % of their calls, all in the first second.
func TestFreshProcessLoopingCallers(t *testing.T) {
	if testing.Short() {
		t.Skip("2 s of load per row")
	}
	const callers, work, load = 200, 20 * time.Millisecond, 2 * time.Second
	tests := []struct {
		name string
		ec   envConfig
	}{
		{"client, unprotected server", envConfig{noServer: true}},
		{"server, unprotected client", envConfig{noClient: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Every call waits until the callers' first calls have all
			// arrived, so that none returns before the last caller has
			// started: what is measured is the start, not how fast this
			// machine starts goroutines.
			var arrived atomic.Int64
			all := make(chan struct{})
			svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
				if arrived.Add(1) == callers {
					close(all)
				}
				select {
				case <-all:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				done := time.NewTimer(work) // the handler's work
				defer done.Stop()
				select {
				case <-done.C:
					return &testpb.UnaryResponse{}, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}}
			e := newEnv(t, svc, tt.ec)
			// Drain newEnv's channels, which hold 1000, while the load runs.
			stop := make(chan struct{})
			var drained sync.WaitGroup
			drained.Go(func() {
				for {
					select {
					case <-e.releases:
					case <-e.rejections:
					case <-stop:
						return
					}
				}
			})
			defer func() { close(stop); drained.Wait() }()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			end := time.Now().Add(load)
			var calls, refused, failed atomic.Int64
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for time.Now().Before(end) {
						_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
						switch {
						case status.Code(err) == codes.ResourceExhausted:
							refused.Add(1)
						case err != nil:
							failed.Add(1)
						}
						calls.Add(1)
					}
				})
			}
			wg.Wait()
			t.Logf("%d calls, %d refused, %d failed", calls.Load(), refused.Load(), failed.Load())
			require.Positive(t, calls.Load())
			assert.Zero(t, failed.Load(), "calls failed otherwise")
			assert.LessOrEqual(t, float64(refused.Load()), 0.01*float64(calls.Load()), "calls refused")
		})
	}
}
