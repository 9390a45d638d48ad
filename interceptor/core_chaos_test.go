package interceptor

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/interceptor/internal/testhook"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
)

// The chaos tests end calls in the rude ways real traffic does and check
// the one invariant users trust: once every call has ended, nothing is in
// flight and nobody is queued (newEnv's cleanup asserts it on every
// limiter, and goleak checks for stuck goroutines).

// queuedServer is a server limited to 2 with a queue of 8 whose handlers
// block until their context ends or b is released.
func queuedServer(t *testing.T, b *block, ec envConfig) *env {
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		return &testpb.UnaryResponse{}, b.wait(ctx)
	}}
	ec.server = append(ec.server, WithMethod(unaryMethod, Limit{Algorithm: limiter.FixedConfig{Limit: 2}, Queue: limiter.Queue{Size: 8}}))
	return newEnv(t, svc, ec)
}

// fill starts n calls and waits until 2 run and n-2 are queued.
func fill(t *testing.T, e *env, b *block, n int, call func() error) *sync.WaitGroup {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() { errs <- call() })
	}
	b.awaitEntered(t, 2)
	g := gateOf(e.srv.core, unaryMethod)
	giveUp := time.After(10 * time.Second)
	for g.lim.QueueLen() < n-2 {
		// The queue's growth is not observable otherwise: poll it.
		select {
		case err := <-errs:
			require.FailNow(t, "a call ended before the queue filled", "%v", err)
		case <-giveUp:
			require.FailNow(t, "the queue never filled")
		case <-time.After(time.Millisecond):
		}
	}
	return &wg
}

func TestChaosServerStopWithQueue(t *testing.T) {
	b := newBlock()
	e := queuedServer(t, b, envConfig{noClient: true})
	wg := fill(t, e, b, 6, func() error {
		_, err := e.client.Unary(context.Background(), &testpb.UnaryRequest{})
		if code := status.Code(err); code != codes.Unavailable && code != codes.Canceled {
			t.Errorf("after Stop: %v, want UNAVAILABLE or CANCELED", err)
		}
		return err
	})
	e.stop() // Stop closes every connection: handlers and waiters see their contexts end
	wg.Wait()
	for range 6 {
		select {
		case <-e.releases:
		case <-e.rejections:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "a call never ended after Stop")
		}
	}
}

func TestChaosGracefulStopWithQueue(t *testing.T) {
	b := newBlock()
	e := queuedServer(t, b, envConfig{noClient: true})
	wg := fill(t, e, b, 6, func() error {
		_, err := e.client.Unary(context.Background(), &testpb.UnaryRequest{})
		assert.NoError(t, err, "GracefulStop lets admitted and queued calls finish")
		return err
	})
	stopped := make(chan struct{})
	go func() { e.gracefulStop(); close(stopped) }()
	close(b.release) // the running calls finish; the queued ones run next
	wg.Wait()
	<-stopped
	for range 6 {
		e.awaitRelease(t, "server")
	}
}

func TestChaosConnectionClosedAbruptly(t *testing.T) {
	b := newBlock()
	e := queuedServer(t, b, envConfig{noClient: true})
	// A second client whose connection is cut with calls running and queued.
	conn, err := grpc.NewClient(e.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	client := testpb.NewTestServiceClient(conn)
	wg := fill(t, e, b, 6, func() error {
		_, err := client.Unary(context.Background(), &testpb.UnaryRequest{})
		assert.Error(t, err)
		return err
	})
	require.NoError(t, conn.Close())
	wg.Wait()
	for range 6 {
		select {
		case <-e.releases:
		case <-e.rejections:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "a call never ended after its connection closed")
		}
	}
}

func TestChaosDeadlineStorm(t *testing.T) {
	tests := []struct {
		name   string
		server []ServerOption
	}{
		{"queued", []ServerOption{WithMethod(unaryMethod, Limit{Queue: limiter.Queue{Size: 64}})}},
		// The tap takes the permits; most calls expire after it, some
		// before their handler.
		{"early rejection", []ServerOption{WithMethod(unaryMethod, fixed(8)), WithEarlyRejection()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { deadlineStorm(t, tt.server) })
	}
}

func deadlineStorm(t *testing.T, server []ServerOption) {
	n := 2000
	if raceEnabled {
		n = 600
	}
	var served atomic.Int64
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		if req.GetPayload() == "warm-up" {
			return &testpb.UnaryResponse{}, nil
		}
		served.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	e := newEnv(t, svc, envConfig{
		server: server,
		client: []ClientOption{WithDefault(Limit{Queue: limiter.Queue{Size: 64}})},
	})
	// Thousands of events would overflow the harness's channels: count
	// none, but hear of every release, to wait for the last ones below.
	released := make(chan struct{}, 1)
	signal := func() {
		select {
		case released <- struct{}{}:
		default:
		}
	}
	for _, c := range []*core{e.srv.core, e.cli.core} {
		hook(t, c, func(h *testhook.Hooks) { h.Released, h.Rejected = signal, nil })
	}
	// Connect first: calls of a few milliseconds could all expire while
	// the connection is being set up. And end each side's start (its first
	// probe times 16 calls): until then a fresh limiter backs off on every
	// drop, and a storm of overruns from its first calls can leave the
	// client's limit at 1 and every call expiring in its queue.
	for range 20 {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{Payload: "warm-up"})
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200) // bound the goroutines, not the calls
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(2+i%3)*time.Millisecond)
			defer cancel()
			_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
			switch status.Code(err) {
			case codes.DeadlineExceeded, codes.ResourceExhausted, codes.Canceled:
			default:
				t.Errorf("call %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	e.stop()
	assert.Positive(t, served.Load(), "the storm reached the server")
	// A permit the tap took for a stream that grpc-go then aborted (its
	// deadline had passed) comes back from a context.AfterFunc, in a
	// goroutine of its own: wait for those, release by release.
	inflight := func() (n int) {
		for _, c := range []*core{e.srv.core, e.cli.core} {
			for _, g := range c.gates() {
				n += g.lim.Inflight()
			}
		}
		return n
	}
	for inflight() > 0 {
		select {
		case <-released:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "permits still in flight 10 s after the storm", "%d", inflight())
		}
	}
	for _, c := range []*core{e.srv.core, e.cli.core} {
		for _, g := range c.gates() {
			assert.Zero(t, g.lim.Inflight(), "%s %s", c.side, g.name)
			assert.GreaterOrEqual(t, g.lim.Limit(), 1)
		}
	}
}
