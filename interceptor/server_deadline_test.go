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
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// work is a handler's own duration in these tests: long next to the
// attacker's deadlines, short next to everyone else's.
const work = 20 * time.Millisecond

// slowWork is an honest call's duration in the tests of an attacker's
// deadlines. A call that overran counts as the server's doing once the
// server held it for twice what its calls take, so only a stall of that
// long, less the attacker's deadline, passes an attacker's call for the
// server's: the longer the work, the less a busy machine can fake it.
const slowWork = 150 * time.Millisecond

// doWork takes work, or until ctx ends, as a handler that calls a
// downstream with its context does.
func doWork(ctx context.Context) error { return doWorkFor(ctx, work) }

// doWorkFor takes d, or until ctx ends.
func doWorkFor(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestAttackDeadlineCannotLowerLimit is the attack of a client that sends
// one call in four with a deadline it knows the server cannot meet, expired
// or nearly so. The server was not slow: the caller chose the deadline. So
// the limit everyone shares must not move. (Before the rule, each such
// call counted as overload: the per-call AIMD below halves on each.)
func TestAttackDeadlineCannotLowerLimit(t *testing.T) {
	tests := []struct {
		name     string
		deadline time.Duration
	}{
		// Deadlines long enough for the call to reach the server (a
		// shorter one fails in the client before anything is sent).
		{"deadline of a quarter of the work", slowWork / 4},
		{"deadline of half the work", slowWork / 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
				return &testpb.UnaryResponse{}, doWorkFor(ctx, slowWork)
			}}
			e := newEnv(t, svc, envConfig{noClient: true, server: []ServerOption{WithDefault(perCall())}})
			for i := range 20 {
				d := time.Second
				if i%4 == 3 {
					d = tt.deadline
				}
				ctx, cancel := context.WithTimeout(context.Background(), d)
				_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
				cancel()
				if d == time.Second {
					require.NoError(t, err)
					e.awaitRelease(t, "server")
				}
			}
			// An attacker's call may end in the client, on a busy machine,
			// before the server reads it: count releases once all are done.
			assert.Greater(t, e.settle(), 0, "no attacker's call reached the server's limiter")
			assert.Equal(t, 10, gateOf(e.coreOf(e.srv), unaryMethod).lim.Limit(), "the attacker's deadlines moved the limit")
		})
	}
}

// TestAttackDeadlineStreams is the same attack on a streaming method: a
// stream lives as long as its client wants, so a deadline it chose says
// nothing about the server.
func TestAttackDeadlineStreams(t *testing.T) {
	svc := &testpb.Service{ServerStreamFunc: func(_ *testpb.ServerStreamRequest, ss grpc.ServerStreamingServer[testpb.ServerStreamResponse]) error {
		<-ss.Context().Done()
		return ss.Context().Err()
	}}
	e := newEnv(t, svc, envConfig{noClient: true, server: []ServerOption{WithDefault(perCall())}})
	for range 22 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		st, err := e.client.ServerStream(ctx, &testpb.ServerStreamRequest{})
		if err == nil {
			_, _ = st.Recv()
		}
		cancel()
	}
	assert.Greater(t, e.settle(), 0, "no stream reached the server's limiter")
	assert.Equal(t, 10, gateOf(e.coreOf(e.srv), serverStreamMethod).lim.Limit(), "the attacker's deadlines moved the limit")
}

// TestLateServerStillBacksOff is the rule's other side: when the server's
// own time made the call late, that is overload and the limit backs off.
func TestLateServerStillBacksOff(t *testing.T) {
	var slow atomic.Bool
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		if slow.Load() {
			<-ctx.Done() // stuck downstream: only the deadline ends it
			return nil, ctx.Err()
		}
		return &testpb.UnaryResponse{}, doWork(ctx)
	}}
	// The deadline is the server's own (see serverDeadline), 10 × what it
	// learns a call takes; the client's is longer.
	e := newEnv(t, svc, envConfig{noClient: true, server: []ServerOption{WithDefault(perCall())},
		outer: []grpc.UnaryServerInterceptor{serverDeadline(10 * work)}})
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
		e.awaitRelease(t, "server")
		return err
	}
	for range 5 {
		require.NoError(t, call())
	}
	slow.Store(true)
	require.Equal(t, codes.DeadlineExceeded, status.Code(call()))
	assert.Equal(t, 5, gateOf(e.coreOf(e.srv), unaryMethod).lim.Limit(), "a call the server made late is overload")
}

// TestFreshServerHearsOverruns: a fresh server whose every call overruns
// its deadline (a downstream stuck from the start) has no OK call to judge
// the deadlines by, and an overrun then counts as overload. Ignored, as
// once they were, they left a fresh default limiter that had admitted
// every call holding the limit where the start put it: over real gRPC,
// processor sharing at 5× from the first call kept no call within its
// deadline.
func TestFreshServerHearsOverruns(t *testing.T) {
	const calls = 50
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		<-ctx.Done() // stuck downstream: only the deadline ends it
		return nil, ctx.Err()
	}}
	e := newEnv(t, svc, envConfig{noClient: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*work)
	defer cancel()
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
			assert.Error(t, err)
		})
	}
	wg.Wait()
	for range calls {
		e.awaitRelease(t, "server")
	}
	assert.Less(t, gateOf(e.coreOf(e.srv), unaryMethod).lim.Limit(), calls/2, "the overruns of a fresh server are overload")
}
