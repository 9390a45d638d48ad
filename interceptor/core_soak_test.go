//go:build soak

package interceptor

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/interceptor/internal/testhook"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
)

// TestSoak drives mixed traffic (unary and every stream shape, random
// errors, cancellations and deadlines) through sluice on both sides for
// SOAK_DURATION (default 60s) and checks that no permit is lost, that the
// heap after GC does not grow across the run, and that goroutines return
// to where they started. Run it with `make soak`.
func TestSoak(t *testing.T) {
	duration := 60 * time.Second
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		duration = d
	}
	work := func(ctx context.Context, seed uint64) error {
		r := rand.New(rand.NewPCG(seed, 0))
		switch r.IntN(50) {
		case 0:
			return status.Error(codes.ResourceExhausted, "downstream full")
		case 1, 2:
			return status.Error(codes.NotFound, "no such thing")
		case 3:
			<-ctx.Done() // overrun
			return ctx.Err()
		}
		t := time.NewTimer(time.Duration(r.IntN(3000)) * time.Microsecond)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var seq atomic.Uint64
	svc := &testpb.Service{
		UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
			return &testpb.UnaryResponse{Payload: req.GetPayload()}, work(ctx, seq.Add(1))
		},
		ServerStreamFunc: func(req *testpb.ServerStreamRequest, s grpc.ServerStreamingServer[testpb.ServerStreamResponse]) error {
			for i := range req.GetCount() {
				if err := s.Send(&testpb.ServerStreamResponse{Index: i}); err != nil {
					return err
				}
			}
			return work(s.Context(), seq.Add(1))
		},
	}
	e := newEnv(t, svc, envConfig{
		server: []ServerOption{WithMethod(unaryMethod, Limit{Queue: limiter.Queue{Size: 16}})},
		client: []ClientOption{WithMaxPushback(50 * time.Millisecond)},
	})
	for _, c := range []*core{e.srv.core, e.cli.core} {
		hook(t, c, func(h *testhook.Hooks) { h.Released, h.Rejected = nil, nil })
	}

	// One call of a random shape, ended a random way.
	call := func(r *rand.Rand) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(2+r.IntN(50))*time.Millisecond)
		defer cancel()
		if r.IntN(8) == 0 {
			go cancel() // the caller gives up at some point
		}
		switch r.IntN(4) {
		case 0, 1:
			_, err := e.client.Unary(ctx, &testpb.UnaryRequest{Payload: "x"})
			return err
		case 2:
			s, err := e.client.ServerStream(ctx, &testpb.ServerStreamRequest{Count: int32(r.IntN(5))})
			if err != nil {
				return err
			}
			if r.IntN(4) == 0 {
				return nil // abandoned: the deferred cancel ends it
			}
			for {
				if _, err := s.Recv(); err != nil {
					return err
				}
			}
		default:
			s, err := e.client.Bidi(ctx)
			if err != nil {
				return err
			}
			for range r.IntN(4) {
				if err := s.Send(&testpb.BidiRequest{Payload: "x"}); err != nil {
					break
				}
			}
			if err := s.CloseSend(); err != nil {
				return err
			}
			for {
				if _, err := s.Recv(); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
			}
		}
	}

	heap := func() uint64 {
		runtime.GC() // twice: the first only moves sync.Pool contents aside
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// Warm up so that pools and routes exist before the baseline.
	for i := range 200 {
		_ = call(rand.New(rand.NewPCG(uint64(i), 1)))
	}
	heapBefore, goroutinesBefore := heap(), runtime.NumGoroutine()

	var calls atomic.Int64
	var maxGoroutines atomic.Int64
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for time.Now().Before(deadline) {
				_ = call(r)
				if n := calls.Add(1); n%512 == 0 {
					raise(&maxGoroutines, int64(runtime.NumGoroutine()))
				}
			}
		})
	}
	wg.Wait()

	// Held pushback permits come back within WithMaxPushback; streams
	// abandoned at the end finish on gRPC's goroutines.
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for settle := time.After(5 * time.Second); inflight(e) > 0; {
		select {
		case <-poll.C:
		case <-settle:
			t.Fatalf("%d permits still in flight 5s after the load stopped", inflight(e))
		}
	}
	heapAfter, goroutinesAfter := heap(), runtime.NumGoroutine()
	t.Logf("soak: %d calls in %v (%.0f/s), max goroutines %d, goroutines before/after %d/%d, heap after GC before/after %.1f/%.1f MiB, in flight at end %d",
		calls.Load(), duration, float64(calls.Load())/duration.Seconds(), maxGoroutines.Load(),
		goroutinesBefore, goroutinesAfter, float64(heapBefore)/(1<<20), float64(heapAfter)/(1<<20), inflight(e))
	for _, c := range []*core{e.srv.core, e.cli.core} {
		for _, s := range c.Limiters() {
			t.Logf("%s %s: limit %d, in flight %d", c.side, s.Name, s.Limit, s.Inflight)
		}
	}
	assert.Zero(t, inflight(e), "permits in flight after the soak")
	assert.LessOrEqual(t, heapAfter, heapBefore+8<<20, "heap grew across the run")
	assert.LessOrEqual(t, goroutinesAfter, goroutinesBefore+8, "goroutines grew across the run")
}

func inflight(e *env) int {
	n := 0
	for _, c := range []*core{e.srv.core, e.cli.core} {
		for _, s := range c.Limiters() {
			n += s.Inflight
		}
	}
	return n
}

// raise sets v to max(v, x).
func raise(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}
