package redis

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// commandCounter is a go-redis hook that counts the scripts a client
// sends to Redis: each is one round trip, the cost of a decision.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *commandCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if name := strings.ToLower(cmd.Name()); name == "evalsha" || name == "eval" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// countedClient returns a client of s whose scripts are counted.
func countedClient(t *testing.T, s *redisServer) (*goredis.Client, *commandCounter) {
	t.Helper()
	c := s.client(t)
	require.NoError(t, c.FlushAll(t.Context()).Err())
	// Load the scripts, so that each decision is one EVALSHA.
	require.NoError(t, allowScript.Load(t.Context(), c).Err())
	require.NoError(t, refundScript.Load(t.Context(), c).Err())
	n := &commandCounter{}
	c.AddHook(n)
	return c, n
}

// TestAttackDeniedFloodCostsRedisNothing is the attack of one caller over
// its quota that floods: every call must not be a round trip to Redis.
// Over ten retry-after windows of 100 ms, the caller sends 100 calls in
// each; Redis may see the one call the window admits and one denial, the
// rest must be answered from the denial the Limiter remembers.
func TestAttackDeniedFloodCostsRedisNothing(t *testing.T) {
	s := startRedis(t)
	c, n := countedClient(t, s)
	l, clk := stepLimiter(t, c, 10, 2)

	require.True(t, allow(t, l, "attacker").Allowed)
	require.True(t, allow(t, l, "attacker").Allowed)
	const windows, flood = 10, 100
	admitted := 0
	for range windows {
		for range flood {
			if allow(t, l, "attacker").Allowed {
				admitted++
			}
		}
		clk.Step(100 * time.Millisecond)
	}
	assert.Equal(t, windows-1, admitted, "one call per window after the first, as the quota allows")
	t.Logf("%d calls over %d windows: %d scripts run by Redis", 2+windows*flood, windows, n.n.Load())
	assert.LessOrEqual(t, n.n.Load(), int64(2+2*windows), "about one denial per retry-after window")
}

// TestAttackDeniedFloodOverGRPC: the same attack through a server. A
// caller with a quota of one call per 1000 s sends 200 calls: Redis must
// see its first call and one denial, not 200 calls.
func TestAttackDeniedFloodOverGRPC(t *testing.T) {
	s := startRedis(t)
	c, n := countedClient(t, s)
	l, err := New(c, 0.001, 1, WithTimeout(testTimeout))
	require.NoError(t, err)
	client := replica(t, l)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "attacker")
	codesSeen := map[codes.Code]int{}
	for range 200 {
		_, err := client.Unary(ctx, &testpb.UnaryRequest{})
		codesSeen[status.Code(err)]++
	}
	assert.Equal(t, map[codes.Code]int{codes.OK: 1, codes.ResourceExhausted: 199}, codesSeen)
	t.Logf("200 calls: %d scripts run by Redis", n.n.Load())
	assert.LessOrEqual(t, n.n.Load(), int64(2), "the first call and one denial")
}

// TestAttackRefundFlood is the attack through the refund: while a later
// check (here the method's rate, spent by the first call) rejects every
// call, each call the quota admitted is refunded, so the caller never runs
// out of quota and each of its calls costs Redis two round trips, however
// many it sends. Refunds must stop at a quota's worth: after that the
// caller is charged, runs out, and its denial is remembered.
func TestAttackRefundFlood(t *testing.T) {
	s := startRedis(t)
	c, n := countedClient(t, s)
	l, err := New(c, 0.01, 5, WithTimeout(testTimeout))
	require.NoError(t, err)
	client := serve(t,
		interceptor.WithCallerLimiter(callerkey.Metadata("x-api-key"), l),
		interceptor.WithDefault(interceptor.Limit{Rate: interceptor.RateLimit{PerSecond: 0.001, Burst: 1}}))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "attacker")
	codesSeen := map[codes.Code]int{}
	for range 200 {
		_, err := client.Unary(ctx, &testpb.UnaryRequest{})
		codesSeen[status.Code(err)]++
	}
	assert.Equal(t, map[codes.Code]int{codes.OK: 1, codes.ResourceExhausted: 199}, codesSeen)
	t.Logf("200 calls: %d scripts run by Redis", n.n.Load())
	assert.Zero(t, l.downUntil.Load(), "Redis answered every decision in time")
	// The first call; 5 admitted and refunded (2 each); 4 admitted and
	// charged; one denial, remembered.
	assert.Equal(t, int64(1+2*5+4+1), n.n.Load())
}

// TestAttackConcurrentFloodAtTheWindow: the flood comes from many
// goroutines at once, as from many streams. When the remembered denial
// runs out, the one call Redis may now admit asks it; the others must not
// all ask at once, but be denied until the next window, as Redis would.
func TestAttackConcurrentFloodAtTheWindow(t *testing.T) {
	s := startRedis(t)
	c, n := countedClient(t, s)
	l, clk := stepLimiter(t, c, 10, 1)

	require.True(t, allow(t, l, "attacker").Allowed)
	require.False(t, allow(t, l, "attacker").Allowed)
	const windows, flooders, flood = 10, 8, 50
	var admitted atomic.Int64
	for range windows {
		clk.Step(100 * time.Millisecond)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range flooders {
			wg.Go(func() {
				<-start
				for range flood {
					d, err := l.Allow("attacker")
					if assert.NoError(t, err) && d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		close(start)
		wg.Wait()
	}
	assert.Equal(t, int64(windows), admitted.Load(), "one call per window, as the quota allows")
	t.Logf("%d calls from %d goroutines over %d windows: %d scripts run by Redis", 2+windows*flooders*flood, flooders, windows, n.n.Load())
	assert.LessOrEqual(t, n.n.Load(), int64(2+windows), "one call per window asks Redis")
}
