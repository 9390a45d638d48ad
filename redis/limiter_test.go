package redis

import (
	"context"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/ratelimit"
)

// Limiter is a CallerLimiter, like the local ratelimit.Keyed.
var _ interceptor.CallerLimiter = (*Limiter)(nil)

// stepClock is a clock in µs that a test moves by hand, in place of
// Redis's, so that the correctness table runs as it does locally.
type stepClock struct{ us atomic.Int64 }

func (c *stepClock) now() int64           { return c.us.Load() }
func (c *stepClock) Step(d time.Duration) { c.us.Add(d.Microseconds()) }

// newStepLimiter returns a Limiter on a fresh Redis, with a clock the test
// steps, starting at Redis's own time.
func newStepLimiter(t *testing.T, s *redisServer, rate float64, burst int, opts ...Option) (*Limiter, *stepClock) {
	t.Helper()
	c := s.client(t)
	require.NoError(t, c.FlushAll(t.Context()).Err())
	return stepLimiter(t, c, rate, burst, opts...)
}

// testTimeout bounds the round trips to Redis of tests that compare
// decisions exactly, so that a loaded machine does not hand them to the
// failure policy.
const testTimeout = 10 * time.Second

// stepLimiter returns a Limiter on c, with a clock the test steps,
// starting at Redis's own time, and testTimeout unless opts set one.
func stepLimiter(t *testing.T, c *goredis.Client, rate float64, burst int, opts ...Option) (*Limiter, *stepClock) {
	t.Helper()
	l, err := New(c, rate, burst, append([]Option{WithTimeout(testTimeout)}, opts...)...)
	require.NoError(t, err)
	clk := &stepClock{}
	clk.us.Store(redisNow(t, c))
	l.now = clk.now
	return l, clk
}

func allow(t *testing.T, l *Limiter, key string) ratelimit.Decision {
	t.Helper()
	d, err := l.Allow(key)
	require.NoError(t, err)
	return d
}

func TestConfigErrors(t *testing.T) {
	ok := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer ok.Close()
	noCtx := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer noCtx.Close()
	for _, tt := range []struct {
		name   string
		client goredis.Scripter
		rate   float64
		burst  int
		opts   []Option
		want   string
	}{
		{"nil client", nil, 1, 1, nil, "redis: New: the client is nil"},
		{"no context timeouts", noCtx, 1, 1, nil, errContextTimeout.Error()},
		{"zero rate", ok, 0, 1, nil, "redis: rate is 0, must be a number in [1e-09, 1e+06]"},
		{"NaN rate", ok, math.NaN(), 1, nil, "redis: rate is NaN, must be a number in [1e-09, 1e+06]"},
		{"rate too high", ok, 2e6, 1, nil, "redis: rate is 2e+06, must be a number in [1e-09, 1e+06]"},
		{"zero burst", ok, 1, 0, nil, "redis: burst is 0, must be >= 1"},
		{"burst beyond the window", ok, 1e-9, 3, nil, "redis: burst is 3, must be in [1, 2] at rate 1e-09, as a burst must refill within 71 years"},
		{"empty prefix", ok, 1, 1, []Option{WithPrefix("")}, `redis: WithPrefix: the prefix is empty; it keeps quotas apart from other keys, use e.g. "myapp:quota:"`},
		{"zero timeout", ok, 1, 1, []Option{WithTimeout(0)}, "redis: WithTimeout(0s): must be > 0"},
		{"negative backoff", ok, 1, 1, []Option{WithBackoff(-time.Second)}, "redis: WithBackoff(-1s): must be > 0"},
		{"no local memory", ok, 1, 1, []Option{WithMaxLocalKeys(0)}, "redis: WithMaxLocalKeys(0): must be >= 1; the memory is what spares Redis the calls of callers over their quota"},
		{"all", noCtx, -1, -1, []Option{WithTimeout(-1)}, "redis: WithTimeout(-1ns): must be > 0\n" + errContextTimeout.Error() +
			"\nredis: rate is -1, must be a number in [1e-09, 1e+06]\nredis: burst is -1, must be >= 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, err := New(tt.client, tt.rate, tt.burst, tt.opts...)
			assert.Nil(t, l)
			require.EqualError(t, err, tt.want)
		})
	}
	for _, rate := range []float64{MinRate, MaxRate} {
		l, err := New(ok, rate, 1)
		require.NoError(t, err, "rate %v", rate)
		assert.Equal(t, rate, l.Rate())
		assert.Equal(t, 1, l.Burst())
	}
}

// The cases below are those of the local ratelimit.Keyed, run against Redis.

func TestBurstThenRate(t *testing.T) {
	s := startRedis(t)
	for _, tt := range []struct {
		name  string
		rate  float64
		burst int
		step  time.Duration
		over  time.Duration
		want  []time.Duration // admission times after the burst
	}{
		{"10/s burst 3", 10, 3, 10 * time.Millisecond, 500 * time.Millisecond,
			[]time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond}},
		{"0.5/s burst 1", 0.5, 1, 250 * time.Millisecond, 7 * time.Second,
			[]time.Duration{2 * time.Second, 4 * time.Second, 6 * time.Second}},
		{"1000/s burst 100", 1000, 100, 500 * time.Microsecond, 5 * time.Millisecond,
			[]time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond, 5 * time.Millisecond}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, clk := newStepLimiter(t, s, tt.rate, tt.burst)
			for i := range tt.burst {
				assert.Equal(t, ratelimit.Decision{Allowed: true, Remaining: tt.burst - 1 - i}, allow(t, l, "k"))
			}
			d := allow(t, l, "k")
			assert.False(t, d.Allowed, "the burst is spent")
			assert.Equal(t, time.Duration(math.Round(1e6/tt.rate))*time.Microsecond, d.RetryAfter)

			var got []time.Duration
			for at := tt.step; at <= tt.over; at += tt.step {
				clk.Step(tt.step)
				if allow(t, l, "k").Allowed {
					got = append(got, at)
				}
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestRetryAfterIsExact: one microsecond (Redis's resolution) before
// RetryAfter is too early, RetryAfter itself is admitted, and denials
// cost nothing.
func TestRetryAfterIsExact(t *testing.T) {
	s := startRedis(t)
	for _, rate := range []float64{0.5, 1, 3, 7, 1000, 12345.678, 1e6} {
		for _, burst := range []int{1, 4} {
			l, clk := newStepLimiter(t, s, rate, burst)
			for range burst {
				require.True(t, allow(t, l, "k").Allowed)
			}
			for range 20 {
				d := allow(t, l, "k")
				require.False(t, d.Allowed)
				require.Positive(t, d.RetryAfter)
				if d.RetryAfter > time.Microsecond {
					clk.Step(d.RetryAfter - time.Microsecond)
					early := allow(t, l, "k")
					require.Equal(t, ratelimit.Decision{RetryAfter: time.Microsecond}, early, "rate %v burst %d: 1 µs early", rate, burst)
					clk.Step(time.Microsecond)
				} else {
					clk.Step(d.RetryAfter)
				}
				require.Equal(t, ratelimit.Decision{Allowed: true}, allow(t, l, "k"), "rate %v burst %d", rate, burst)
			}
		}
	}
}

func TestKeysAreIndependent(t *testing.T) {
	s := startRedis(t)
	l, _ := newStepLimiter(t, s, 1, 2)
	for _, key := range []string{"alice", "bob", "carol"} {
		assert.True(t, allow(t, l, key).Allowed)
		assert.True(t, allow(t, l, key).Allowed)
		assert.False(t, allow(t, l, key).Allowed, key)
	}
	n, err := l.client.(*goredis.Client).DBSize(t.Context()).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(3), n)
}

func TestEmptyKey(t *testing.T) {
	s := startRedis(t)
	l, _ := newStepLimiter(t, s, 1, 1)
	d, err := l.Allow("")
	assert.ErrorIs(t, err, ratelimit.ErrEmptyKey)
	assert.Equal(t, ratelimit.Decision{}, d)
	l.Refund("") // nothing to do
}

func TestRefund(t *testing.T) {
	s := startRedis(t)
	l, clk := newStepLimiter(t, s, 1, 2)
	l.Refund("never seen") // nothing to give back, nothing created
	c := l.client.(*goredis.Client)
	n, err := c.DBSize(t.Context()).Result()
	require.NoError(t, err)
	assert.Zero(t, n)

	assert.Equal(t, ratelimit.Decision{Allowed: true, Remaining: 1}, allow(t, l, "k"))
	assert.Equal(t, ratelimit.Decision{Allowed: true, Remaining: 0}, allow(t, l, "k"))
	l.Refund("k")
	assert.Equal(t, ratelimit.Decision{Allowed: true, Remaining: 0}, allow(t, l, "k"), "the refunded request is back")
	assert.False(t, allow(t, l, "k").Allowed)

	// A refund that gives the key its whole burst back forgets it.
	clk.Step(time.Second)
	l.Refund("k")
	n, err = c.DBSize(t.Context()).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a key at its full burst is deleted")
	assert.Equal(t, ratelimit.Decision{Allowed: true, Remaining: 1}, allow(t, l, "k"))
}

// TestKeysExpireWhenFull: Redis forgets a key when it would have its
// whole burst back, by Redis's own clock. At 2/s the key lives a second,
// long enough for a busy machine to list it before it goes.
func TestKeysExpireWhenFull(t *testing.T) {
	s := startRedis(t)
	c := s.client(t)
	l, err := New(c, 2, 2, WithPrefix("test:q:"), WithTimeout(testTimeout))
	require.NoError(t, err)
	require.True(t, allow(t, l, "alice").Allowed)
	require.True(t, allow(t, l, "alice").Allowed)

	keys, err := c.Keys(t.Context(), "*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1)
	assert.Regexp(t, `^test:q:[0-9a-f]{32}$`, keys[0], "prefixed and hashed")
	assert.NotContains(t, keys[0], "alice")
	ttl, err := c.PTTL(t.Context(), keys[0]).Result()
	require.NoError(t, err)
	assert.Positive(t, ttl)
	assert.LessOrEqual(t, ttl, time.Second, "two requests at 2/s are earned back in 1 s")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, poll(ctx, func() bool { return c.Exists(ctx, keys[0]).Val() == 0 }), "the key expires")
	assert.Equal(t, ratelimit.Decision{Allowed: true, Remaining: 1}, allow(t, l, "alice"), "with its whole burst back")
}

// TestReplicasShareTheQuota: three limiters with clients of their own, as
// three replicas would, hammer one key; together they are admitted at the
// configured rate, within 5 %, over a span of Redis's clock.
func TestReplicasShareTheQuota(t *testing.T) {
	s := startRedis(t)
	const rate, burst = 200.0, 40 // the burst absorbs stalls of the callers' loops up to 200 ms
	var replicas []*Limiter
	for range 3 {
		l, err := New(s.client(t), rate, burst, WithFailurePolicy(FailClosed), WithTimeout(testTimeout))
		require.NoError(t, err)
		// Dial and load the script now: tokens the key earns between the
		// first reading of Redis's clock and the first Allow are lost.
		require.True(t, allow(t, l, "warm-up").Allowed)
		replicas = append(replicas, l)
	}
	probe := s.client(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	var admitted, fromRedis atomic.Int64
	first := redisNow(t, probe)
	var wg sync.WaitGroup
	for _, l := range replicas {
		wg.Go(func() {
			for ctx.Err() == nil {
				d, err := l.Allow("tenant-a")
				if err == nil && d.Allowed {
					admitted.Add(1)
				}
				if err == nil && (d.Allowed || d.RetryAfter < l.cfg.backoff) {
					fromRedis.Add(1)
				}
			}
		})
	}
	wg.Wait()
	last := redisNow(t, probe)
	span := time.Duration(last-first) * time.Microsecond
	want := float64(burst) + rate*span.Seconds()
	got := float64(admitted.Load())
	t.Logf("3 replicas: %v admitted in %v of Redis time, %v expected (%d decisions)", got, span, want, fromRedis.Load())
	assert.InEpsilon(t, want, got, 0.05, "the fleet holds the per-key rate")
	assert.Greater(t, fromRedis.Load(), int64(3*rate*span.Seconds()), "the replicas asked more than the quota allows")
}

// reader returns a limiter option reporting to a ManualReader, and a
// function that reads the decisions by source and outcome.
func reader(t *testing.T) (Option, func() map[string]int64) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return WithMeterProvider(mp), func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, r.Collect(t.Context(), &rm))
		got := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != MetricDecisions {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					src, _ := dp.Attributes.Value("source")
					out, _ := dp.Attributes.Value("outcome")
					got[src.AsString()+"/"+out.AsString()] = dp.Value
				}
			}
		}
		return got
	}
}

// TestRedisDownAndBack kills Redis mid-test: decisions come at once from
// the failure policy, counted as such, and from Redis again once it is
// restarted.
func TestRedisDownAndBack(t *testing.T) {
	for _, tt := range []struct {
		name    string
		opt     Option
		source  string
		allowed bool
	}{
		{"fallback", nil, SourceFallback, true},
		{"fail open", WithFailurePolicy(FailOpen), SourceFailOpen, true},
		{"fail closed", WithFailurePolicy(FailClosed), SourceFailClosed, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := startRedis(t)
			mopt, decisions := reader(t)
			l, err := New(s.client(t), 1000, 1000, tt.opt, mopt, WithBackoff(20*time.Millisecond), WithTimeout(200*time.Millisecond))
			require.NoError(t, err)
			require.True(t, allow(t, l, "k").Allowed)
			assert.Equal(t, map[string]int64{"redis/allowed": 1}, decisions())

			s.stop()
			// Redis is gone: each decision returns (never hangs) with the
			// policy's answer.
			for range 50 {
				d := allowWithin(t, l, "k", 5*time.Second)
				assert.Equal(t, tt.allowed, d.Allowed)
				if !tt.allowed {
					assert.Positive(t, d.RetryAfter)
					assert.LessOrEqual(t, d.RetryAfter, 20*time.Millisecond, "retry when Redis is tried again")
				}
			}
			out := "rejected"
			if tt.allowed {
				out = "allowed"
			}
			assert.Equal(t, int64(50), decisions()[tt.source+"/"+out])

			require.NoError(t, s.start())
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			require.NoError(t, poll(ctx, func() bool {
				allowWithin(t, l, "k", 5*time.Second)
				return decisions()["redis/allowed"] > 1
			}), "back to Redis once it answers")
			assert.Zero(t, l.downUntil.Load())
		})
	}
}

// TestSlowRedis: a Redis that does not answer within the timeout (its
// process stopped) is a failure like a dead one, and the backoff spares it
// the next calls. The timeout also bounds the first call, which dials and
// loads the script: 500 ms, not a production 20 ms, so that a busy CI
// machine does not fail it before Redis is stopped.
func TestSlowRedis(t *testing.T) {
	s := startRedis(t)
	mopt, decisions := reader(t)
	l, err := New(s.client(t), 10, 10, mopt, WithFailurePolicy(FailClosed), WithTimeout(500*time.Millisecond), WithBackoff(time.Hour))
	require.NoError(t, err)
	require.True(t, allow(t, l, "k").Allowed)

	s.pause(t)
	for range 5 {
		d := allowWithin(t, l, "k", 5*time.Second)
		assert.False(t, d.Allowed)
		assert.Positive(t, d.RetryAfter)
	}
	assert.Equal(t, map[string]int64{"redis/allowed": 1, "fail_closed/rejected": 5}, decisions())
}

// allowWithin calls Allow and fails the test if it has not returned
// within d: a decision must never hang.
func allowWithin(t *testing.T, l *Limiter, key string, d time.Duration) ratelimit.Decision {
	t.Helper()
	type result struct {
		d   ratelimit.Decision
		err error
	}
	ch := make(chan result, 1)
	go func() {
		dec, err := l.Allow(key)
		ch <- result{dec, err}
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r.d
	case <-timer.C:
		require.FailNow(t, "Allow hung", "no decision within %v", d)
		return ratelimit.Decision{}
	}
}

// TestServerWithRedisQuota plugs the Limiter into a server with the one
// option.
func TestServerWithRedisQuota(t *testing.T) {
	s := startRedis(t)
	l, err := New(s.client(t), 1, 1)
	require.NoError(t, err)
	srv, err := interceptor.NewServer(interceptor.WithCallerLimiter(callerkey.PeerIP, l))
	require.NoError(t, err)
	require.NoError(t, srv.Close())
	assert.True(t, strings.HasPrefix(l.String(), "redis.Limiter(rate=1/s"))
}
