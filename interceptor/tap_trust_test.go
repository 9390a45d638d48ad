package interceptor

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/interceptor/internal/testhook"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
	"github.com/sluice-go/sluice/ratelimit"
)

// The attacks of this file go for WithEarlyRejection's tap, which takes a
// call's permit when its headers arrive, on the connection's reader,
// before grpc-go has read the request.

// headerSeen is a stats.Handler telling when a server has taken the
// headers of a call of one method: grpc-go reports them after the tap ran.
type headerSeen struct {
	method string
	seen   chan struct{}
}

func newHeaderSeen(method string) *headerSeen {
	return &headerSeen{method: method, seen: make(chan struct{}, 100)}
}

func (h *headerSeen) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h *headerSeen) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (h *headerSeen) HandleConn(context.Context, stats.ConnStats) {}
func (h *headerSeen) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InHeader); ok && in.FullMethod == h.method {
		h.seen <- struct{}{}
	}
}

func (h *headerSeen) await(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-h.seen:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "the server never saw the headers")
		}
	}
}

// earlyTimers replaces a core's timer: the test fires what it set.
type earlyTimers struct {
	mu  sync.Mutex
	set []*earlyTimer
}

type earlyTimer struct {
	d       time.Duration
	f       func()
	stopped atomic.Bool
}

func (ft *earlyTimers) timer(d time.Duration, f func()) (stop func() bool) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	tm := &earlyTimer{d: d, f: f}
	ft.set = append(ft.set, tm)
	return func() bool { return tm.stopped.CompareAndSwap(false, true) }
}

// fire runs every timer set and not stopped, as if their time had come,
// and returns how many ran and the durations they were set for.
func (ft *earlyTimers) fire() (ds []time.Duration) {
	ft.mu.Lock()
	set := ft.set
	ft.set = nil
	ft.mu.Unlock()
	for _, tm := range set {
		if tm.stopped.CompareAndSwap(false, true) {
			ds = append(ds, tm.d)
			tm.f()
		}
	}
	return ds
}

// openUnary starts a call of the Unary method as a bare stream: its
// headers go out now, its request only when the test sends it.
func openUnary(ctx context.Context, t *testing.T, e *env) grpc.ClientStream {
	t.Helper()
	s, err := e.conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, unaryMethod)
	require.NoError(t, err)
	return s
}

// finishUnary sends the request of a call openUnary started and reads its
// answer.
func finishUnary(s grpc.ClientStream) error {
	if err := s.SendMsg(&testpb.UnaryRequest{}); err != nil {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	return s.RecvMsg(&testpb.UnaryResponse{})
}

// TestAttackTapHeldPermits is a caller that opens calls, sends their
// headers and never their request. The tap took a permit for each; one
// nobody claims must come back within a bound, and the honest calls after
// it must be served.
func TestAttackTapHeldPermits(t *testing.T) {
	seen := newHeaderSeen(unaryMethod)
	e := newEnv(t, &testpb.Service{}, envConfig{noClient: true,
		server:     []ServerOption{WithDefault(fixed(4)), WithEarlyRejection()},
		serverOpts: []grpc.ServerOption{grpc.StatsHandler(seen)}})
	timers := &earlyTimers{}
	hook(t, e.srv.core, func(h *testhook.Hooks) { h.AfterFunc = timers.timer })

	// The first call makes the method's limiter (and teaches its RTT).
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")
	seen.await(t, 1)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var held []grpc.ClientStream
	for range 4 {
		held = append(held, openUnary(ctx, t, e))
	}
	seen.await(t, 4)

	// Time passes: every early permit nobody claimed is given back.
	ds := timers.fire()
	for _, d := range ds {
		assert.GreaterOrEqual(t, d, minEarlyHold, "early permit bound")
		assert.LessOrEqual(t, d, maxEarlyHold, "early permit bound")
	}
	for range ds {
		e.awaitRelease(t, "server")
	}

	refused := 0
	const honest = 10
	for range honest {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		if status.Code(err) == codes.ResourceExhausted {
			refused++
			continue
		}
		require.NoError(t, err)
		e.awaitRelease(t, "server")
	}
	assert.Zero(t, refused, "%d of %d honest calls refused while 4 calls held their headers open (limit 4)", refused, honest)
	assert.Len(t, ds, 4, "early permits given back")

	// A held call that sends its request at last takes a permit the
	// normal way.
	require.NoError(t, finishUnary(held[0]))
	e.awaitRelease(t, "server")
	cancel()
}

// recordingAlgorithm is a fixed limit that remembers the RTT of every
// successful timed sample.
type recordingAlgorithm struct {
	n    int
	rtts chan time.Duration
}

func (a *recordingAlgorithm) Limit() int { return a.n }
func (a *recordingAlgorithm) Update(s limiter.Sample) int {
	if s.Outcome == limiter.Success && s.RTT >= 0 {
		a.rtts <- s.RTT
	}
	return a.n
}

// TestAttackTapTrickledBody is a caller that sends its headers, then its
// request late. The server's work starts when the request is there: the
// round trip the limiter learns must not include the caller's delay, or a
// caller makes the method look slow (and inflates the RTT pushback and
// the late rule are built from).
func TestAttackTapTrickledBody(t *testing.T) {
	rec := &recordingAlgorithm{n: 4, rtts: make(chan time.Duration, 100)}
	seen := newHeaderSeen(unaryMethod)
	e := newEnv(t, &testpb.Service{}, envConfig{noClient: true,
		server: []ServerOption{WithEarlyRejection(),
			WithDefault(Limit{Algorithm: algorithmFunc(func() (limiter.Algorithm, error) { return rec, nil })})},
		serverOpts: []grpc.ServerOption{grpc.StatsHandler(seen)}})
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")
	seen.await(t, 1)
	<-rec.rtts

	s := openUnary(t.Context(), t, e)
	seen.await(t, 1) // the tap took the permit
	// The trickle itself: the caller holds its request back a while. (It
	// waits for nothing; the assertion below holds for any delay.)
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	require.NoError(t, finishUnary(s))
	elapsed := time.Since(start)
	e.awaitRelease(t, "server")
	// The server's interval, from the grant its RTT is measured from to
	// the release, lies within the client's from sending the request to
	// the answer.
	rtt := <-rec.rtts
	assert.LessOrEqual(t, rtt, elapsed, "the server timed the call from its headers: RTT %v, request to answer %v", rtt, elapsed)
}

// tapPanicEnv is the environment variable that makes
// TestAttackTapUserCodePanics run one of its cases in this process.
const tapPanicEnv = "SLUICE_TAP_PANIC_CASE"

// tapPanicCases are server options whose user code panics on the calls
// that carry the metadata "boom", and the code such a call must get.
var tapPanicCases = map[string]struct {
	opts []ServerOption
	want codes.Code
}{
	// The tap no longer calls the PushbackFunc: a plain rejection.
	"pushback": {[]ServerOption{WithPushback(panickyPushback)}, codes.ResourceExhausted},
	// Recovered in the tap.
	"key": {[]ServerOption{callerRateLimit(func(ctx context.Context, _ string) string {
		if boom(ctx) {
			panic("key bug")
		}
		return "caller"
	}, RateLimit{PerSecond: 1e6}, 0)}, codes.Internal},
	"trust": {[]ServerOption{WithPriorities(Priorities{Header: "x-priority", Trusted: func(ctx context.Context) bool {
		if boom(ctx) {
			panic("trust bug")
		}
		return true
	}})}, codes.Internal},
	// Never consulted in the tap, which rejects the call at the full
	// limit without asking it.
	"caller limiter": {[]ServerOption{WithCallerLimiter(func(ctx context.Context, _ string) string {
		if boom(ctx) {
			return "boom"
		}
		return "caller"
	}, panickyCallerLimiter{})}, codes.ResourceExhausted},
}

func boom(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get("boom")) > 0
}

// panickyCallerLimiter admits every caller but "boom", for which it panics.
type panickyCallerLimiter struct{}

func (panickyCallerLimiter) Allow(key string) (ratelimit.Decision, error) {
	if key == "boom" {
		panic("caller limiter bug")
	}
	return ratelimit.Decision{Allowed: true}, nil
}
func (panickyCallerLimiter) Refund(string) {}

// TestAttackTapUserCodePanics is user code that panics in the tap, on the
// connection's reader: a call that makes it panic must be answered, the
// connection must go on serving, every permit must come back and the
// server must stop. On the old code the connection wedged and Stop hung,
// so each case runs in a child process that a timeout can end.
func TestAttackTapUserCodePanics(t *testing.T) {
	if name := os.Getenv(tapPanicEnv); name != "" {
		c := tapPanicCases[name]
		tapPanicCase(t, c.opts, c.want)
		return
	}
	for name := range tapPanicCases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAttackTapUserCodePanics$", "-test.v", "-test.timeout=60s")
			cmd.Env = append(os.Environ(), tapPanicEnv+"="+name)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "the case failed or hung:\n%s", out)
		})
	}
}

// tapPanicCase runs in the child: a limit of 1, one call held, then a call
// whose user code panics.
func tapPanicCase(t *testing.T, opts []ServerOption, want codes.Code) {
	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		if req.GetPayload() == "block" {
			return &testpb.UnaryResponse{}, b.wait(ctx)
		}
		return &testpb.UnaryResponse{}, nil
	}}
	e := newEnv(t, svc, envConfig{noClient: true,
		server: append([]ServerOption{WithDefault(fixed(1)), WithEarlyRejection()}, opts...),
		outer:  []grpc.UnaryServerInterceptor{recovery}})
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")

	heldCtx, cancelHeld := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := e.client.Unary(heldCtx, &testpb.UnaryRequest{Payload: "block"})
		done <- err
	}()
	b.awaitEntered(t, 1)

	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "boom", "1", "x-priority", "critical"), 5*time.Second)
	defer cancel()
	_, err = e.client.Unary(ctx, &testpb.UnaryRequest{})
	assert.Equal(t, want, status.Code(err), "the call that made user code panic: %v", err)

	// The connection still carries the held call's cancellation.
	cancelHeld()
	assert.Equal(t, codes.Canceled, status.Code(<-done))
	e.awaitRelease(t, "server")
	_, err = e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err, "the connection serves no more")
	e.awaitRelease(t, "server")
}

// blockingCallerLimiter stands for a remote quota (a Redis round trip):
// Allow of the caller "slow" blocks until the test lets it go.
type blockingCallerLimiter struct {
	entered, release chan struct{}
}

func (l *blockingCallerLimiter) Allow(key string) (ratelimit.Decision, error) {
	if key == "slow" {
		l.entered <- struct{}{}
		<-l.release
	}
	return ratelimit.Decision{Allowed: true}, nil
}
func (l *blockingCallerLimiter) Refund(string) {}

// TestAttackTapRemoteCallerLimiter is a CallerLimiter that takes its time,
// as a remote one does under load. Consulted on the connection's reader,
// it stalls every other call of the connection.
func TestAttackTapRemoteCallerLimiter(t *testing.T) {
	cl := &blockingCallerLimiter{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnv(t, &testpb.Service{}, envConfig{noClient: true,
		server: []ServerOption{WithEarlyRejection(), WithCallerLimiter(callerkey.Metadata("caller"), cl)}})
	as := func(ctx context.Context, caller string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "caller", caller)
	}
	_, err := e.client.Unary(as(t.Context(), "fast"), &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")

	slow := make(chan error, 1)
	go func() {
		_, err := e.client.Unary(as(t.Context(), "slow"), &testpb.UnaryRequest{})
		slow <- err
	}()
	<-cl.entered
	ctx, cancel := context.WithTimeout(as(t.Context(), "fast"), 5*time.Second)
	defer cancel()
	_, err = e.client.Unary(ctx, &testpb.UnaryRequest{})
	assert.NoError(t, err, "another caller's quota check stalled the connection")
	close(cl.release)
	require.NoError(t, <-slow)
	e.awaitRelease(t, "server")
	if err == nil {
		e.awaitRelease(t, "server")
	}
}

// TestAttackTapRejectionsInLoadReports checks that the calls the tap
// rejects count in the load reports' eps, as the interceptor's do.
func TestAttackTapRejectionsInLoadReports(t *testing.T) {
	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		if req.GetPayload() == "block" {
			return &testpb.UnaryResponse{}, b.wait(ctx)
		}
		return &testpb.UnaryResponse{}, nil
	}}
	e := newEnv(t, svc, envConfig{noClient: true,
		server: []ServerOption{WithDefault(fixed(1)), WithEarlyRejection(), WithLoadReports()}})
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")

	done := make(chan error, 1)
	go func() {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{Payload: "block"})
		done <- err
	}()
	b.awaitEntered(t, 1)
	const rejected = 5
	for range rejected {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		require.Equal(t, codes.ResourceExhausted, status.Code(err))
		e.awaitRejection(t, "server:limit")
	}
	close(b.release)
	require.NoError(t, <-done)
	e.awaitRelease(t, "server")

	var tr metadata.MD
	_, err = e.client.Unary(t.Context(), &testpb.UnaryRequest{}, grpc.Trailer(&tr))
	require.NoError(t, err)
	e.awaitRelease(t, "server")
	r := loadReportOf(t, tr)
	require.NotNil(t, r)
	// At least a window's worth: rejected calls over at most two windows.
	assert.GreaterOrEqual(t, r.GetEps(), float64(rejected)/(2*loadWindow.Seconds()), "the tap's rejections are missing from eps")
}
