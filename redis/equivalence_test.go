package redis

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/ratelimit"
)

func TestClockBackwards(t *testing.T) {
	s := startRedis(t)
	l, clk := newStepLimiter(t, s, 1, 2)
	require.True(t, allow(t, l, "k").Allowed)
	require.True(t, allow(t, l, "k").Allowed)

	clk.Step(-10 * time.Second)
	assert.Equal(t, ratelimit.Decision{RetryAfter: 11 * time.Second}, allow(t, l, "k"),
		"no burst back: the wait is measured on the clock, which must catch up")
	assert.True(t, allow(t, l, "other").Allowed, "a new key has its burst whatever the clock")

	clk.Step(10 * time.Second)
	assert.Equal(t, ratelimit.Decision{RetryAfter: time.Second}, allow(t, l, "k"))
	clk.Step(time.Second)
	assert.Equal(t, ratelimit.Decision{Allowed: true}, allow(t, l, "k"))
	assert.False(t, allow(t, l, "k").Allowed)
}

// TestBackwardsGrantsNothing replays one random history twice: on a
// monotonic clock, and on the same clock with random steps back. The
// steps back never admit a request more.
func TestBackwardsGrantsNothing(t *testing.T) {
	s := startRedis(t)
	rng := rand.New(rand.NewPCG(1, 2))
	steady, steadyClk := newStepLimiter(t, s, 10, 5, WithPrefix("steady:"))
	shaky, shakyClk := newStepLimiter(t, s, 10, 5, WithPrefix("shaky:"))
	shakyClk.us.Store(steadyClk.now())
	var steadyN, shakyN int
	for range 1000 {
		d := time.Duration(rng.IntN(50)) * time.Millisecond
		steadyClk.Step(d)
		shakyClk.Step(d)
		back := time.Duration(rng.IntN(3)) * 100 * time.Millisecond
		shakyClk.Step(-back)
		key := strconv.Itoa(rng.IntN(4))
		if allow(t, steady, key).Allowed {
			steadyN++
		}
		if allow(t, shaky, key).Allowed {
			shakyN++
		}
		shakyClk.Step(back)
	}
	assert.LessOrEqual(t, shakyN, steadyN)
	assert.Positive(t, shakyN)
}

// TestDecidesLikeKeyed replays one random history of requests and refunds
// on a local ratelimit.Keyed, under testing/synctest's virtual time, then
// on Redis, on a clock stepped alike: every decision is the same. The
// Limiter holds refunds to the quota's rate and burst (see Refund): the
// local side does so with a second Keyed of the same rate and burst.
func TestDecidesLikeKeyed(t *testing.T) {
	s := startRedis(t)
	for _, tt := range []struct {
		rate  float64
		burst int
	}{{5, 3}, {1000, 20}, {0.5, 1}} {
		t.Run(fmt.Sprintf("%v/s burst %d", tt.rate, tt.burst), func(t *testing.T) {
			type request struct {
				step   time.Duration
				key    string
				want   ratelimit.Decision
				refund bool
			}
			var history []request
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(3, 4))
				local, err := ratelimit.NewKeyed(tt.rate, tt.burst)
				require.NoError(t, err)
				refunds, err := ratelimit.NewKeyed(tt.rate, tt.burst)
				require.NoError(t, err)
				step := time.Duration(float64(time.Second) / tt.rate / 2)
				for range 1500 {
					r := request{step: time.Duration(rng.Int64N(int64(step))).Truncate(time.Microsecond), key: strconv.Itoa(rng.IntN(10))}
					time.Sleep(r.step) // virtual: passes at once, exactly
					r.want, err = local.Allow(r.key)
					require.NoError(t, err)
					if r.want.Allowed && rng.IntN(5) == 0 {
						if d, err := refunds.Allow(r.key); err == nil && d.Allowed {
							local.Refund(r.key)
						}
						r.refund = true
					}
					history = append(history, r)
				}
			})
			l, clk := newStepLimiter(t, s, tt.rate, tt.burst)
			for i, r := range history {
				clk.Step(r.step)
				require.Equal(t, r.want, allow(t, l, r.key), "request %d", i)
				if r.refund {
					l.Refund(r.key)
				}
			}
		})
	}
}

// TestConcurrent: many callers on one key at one instant get its burst
// exactly once: each decision is atomic in Redis.
func TestConcurrent(t *testing.T) {
	s := startRedis(t)
	l, clk := newStepLimiter(t, s, 100, 50)
	run := func() int {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			allowed int
		)
		for range 8 {
			wg.Go(func() {
				n := 0
				for range 50 {
					d, err := l.Allow("shared")
					if !assert.NoError(t, err) {
						return
					}
					if d.Allowed {
						n++
					}
				}
				mu.Lock()
				allowed += n
				mu.Unlock()
			})
		}
		wg.Wait()
		return allowed
	}
	assert.Equal(t, 50, run(), "the burst")
	clk.Step(100 * time.Millisecond)
	assert.Equal(t, 10, run(), "then the rate")
}
