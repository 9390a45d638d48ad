package interceptor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
)

// cheap is the payload of a request the test service refuses at once, as
// a handler refuses a request that fails validation.
const cheap = "invalid"

// workOrRefuse is a handler that takes d unless the request is cheap.
func workOrRefuse(d time.Duration) func(context.Context, *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
	return func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		if req.GetPayload() == cheap {
			return nil, status.Error(codes.InvalidArgument, "payload: not allowed")
		}
		return &testpb.UnaryResponse{}, doWorkFor(ctx, d)
	}
}

// TestAttackCheapErrorsTeachRTT is the deadline attack made to work again
// with cheap errors: a caller floods a method with requests it refuses in
// microseconds. Were those answers round trips the server learns from,
// the method's learned RTT would fall far below its real work, and a call
// held for a deadline far shorter than that work would then look like one
// the server made late. An error answer did none of the method's work: it
// must teach no RTT, and the limit must not move.
func TestAttackCheapErrorsTeachRTT(t *testing.T) {
	svc := &testpb.Service{UnaryFunc: workOrRefuse(slowWork)}
	e := newEnv(t, svc, envConfig{noClient: true, server: []ServerOption{WithDefault(perCall())}})
	call := func(payload string, d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := e.client.Unary(ctx, &testpb.UnaryRequest{Payload: payload})
		e.awaitRelease(t, "server")
		return err
	}
	for range 5 {
		require.NoError(t, call("", time.Second))
	}
	g := gateOf(e.coreOf(e.srv), unaryMethod)
	for round := range 2 {
		for range 40 {
			require.Equal(t, codes.InvalidArgument, status.Code(call(cheap, time.Second)))
		}
		// Only OK answers teach the RTT, and each took at least slowWork.
		assert.GreaterOrEqual(t, g.state().RTT, slowWork, "round %d: the cheap errors taught the RTT", round)
		require.Error(t, call("", slowWork/4))
	}
	assert.Equal(t, 10, g.lim.Limit(), "the attacker's deadlines moved the limit")
}

// recorder is an Algorithm that keeps every sample and never moves.
type recorder struct {
	mu      sync.Mutex
	samples []limiter.Sample
}

func (r *recorder) Update(s limiter.Sample) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
	return 10
}

func (r *recorder) Limit() int { return 10 }

func (r *recorder) take() []limiter.Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.samples
	r.samples = nil
	return s
}

// TestOnlyOKTeachesRTT: on both sides, an OK answer reaches the algorithm
// timed and moves the learned RTT; an error answer that is not overload is
// still a success (there was room to answer) but reaches the algorithm
// untimed, and the learned RTT does not see it.
func TestOnlyOKTeachesRTT(t *testing.T) {
	for _, side := range []string{"server", "client"} {
		t.Run(side, func(t *testing.T) {
			rec := &recorder{}
			lim := []ServerOption{WithMethod(unaryMethod, Limit{Algorithm: algorithmFunc(func() (limiter.Algorithm, error) { return rec, nil })})}
			ec := envConfig{noClient: side == "server", noServer: side == "client"}
			if side == "server" {
				ec.server = lim
			} else {
				ec.client = asClient(lim)
			}
			e := newEnv(t, &testpb.Service{UnaryFunc: workOrRefuse(work)}, ec)
			c := e.coreOf(e.srv)
			if side == "client" {
				c = e.coreOfClient(e.cli)
			}
			call := func(payload string) error {
				_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{Payload: payload})
				e.awaitRelease(t, side)
				return err
			}
			require.NoError(t, call(""))
			g := gateOf(c, unaryMethod)
			learned := g.state().RTT
			require.GreaterOrEqual(t, learned, work)
			for range 3 {
				require.Equal(t, codes.InvalidArgument, status.Code(call(cheap)))
			}
			assert.Equal(t, learned, g.state().RTT, "an error answer moved the learned RTT")
			samples := rec.take()
			require.Len(t, samples, 4)
			assert.GreaterOrEqual(t, samples[0].RTT, work, "the OK answer")
			for i, s := range samples[1:] {
				assert.Equal(t, limiter.Success, s.Outcome, "error answer %d", i)
				assert.Equal(t, limiter.UntimedRTT, s.RTT, "error answer %d reached the algorithm timed", i)
			}
		})
	}
}
