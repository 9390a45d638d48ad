package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is where step clocks start.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// stepClock is a clock that a test moves by hand: forward, backward, or
// into failure.
type stepClock struct {
	mu  sync.Mutex
	t   time.Time
	err error
}

func newStepClock() *stepClock { return &stepClock{t: t0} }

// Now implements clock.
func (c *stepClock) Now() (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return time.Time{}, c.err
	}
	return c.t, nil
}

// Step moves the clock by d, backwards if d < 0.
func (c *stepClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Fail makes Now return err from now on, or succeed again if err is nil.
func (c *stepClock) Fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

func newStepGCRA(t testing.TB, rate float64, burst int, opts ...KeyedOption) (*Keyed, *stepClock) {
	t.Helper()
	clk := newStepClock()
	g, err := NewKeyed(rate, burst, append([]KeyedOption{withClock(clk)}, opts...)...)
	require.NoError(t, err)
	return g, clk
}

func allow(t *testing.T, g *Keyed, key string) Decision {
	t.Helper()
	d, err := g.Allow(key)
	require.NoError(t, err)
	return d
}

func TestKeyedConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rate  float64
		burst int
		opts  []KeyedOption
		want  string
	}{
		{"zero rate", 0, 1, nil, "ratelimit: Keyed rate is 0, must be a number in [1e-9, 1e9]"},
		{"negative rate", -5, 1, nil, "ratelimit: Keyed rate is -5, must be a number in [1e-9, 1e9]"},
		{"NaN rate", math.NaN(), 1, nil, "ratelimit: Keyed rate is NaN, must be a number in [1e-9, 1e9]"},
		{"infinite rate", math.Inf(1), 1, nil, "ratelimit: Keyed rate is +Inf, must be a number in [1e-9, 1e9]"},
		{"rate too high", 2e9, 1, nil, "ratelimit: Keyed rate is 2e+09, must be a number in [1e-9, 1e9]"},
		{"zero burst", 1, 0, nil, "ratelimit: Keyed burst is 0, must be >= 1"},
		{"burst beyond the window", 1e-9, 3, nil,
			"ratelimit: Keyed burst is 3, must be in [1, 2] at rate 1e-09, as a burst must refill within 73 years"},
		{"negative max keys", 1, 1, []KeyedOption{WithMaxKeys(-1)}, "ratelimit: Keyed max keys is -1, must be >= 0, 0 for no bound"},
		{"all", -1, -1, []KeyedOption{WithMaxKeys(-2)}, "ratelimit: Keyed rate is -1, must be a number in [1e-9, 1e9]\n" +
			"ratelimit: Keyed burst is -1, must be >= 1\n" +
			"ratelimit: Keyed max keys is -2, must be >= 0, 0 for no bound"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, err := NewKeyed(tt.rate, tt.burst, tt.opts...)
			assert.Nil(t, g)
			require.EqualError(t, err, tt.want)
		})
	}

	// The extremes of the ranges are valid.
	for _, rate := range []float64{minRate, maxRate} {
		g, err := NewKeyed(rate, 1, withClock(nil))
		require.NoError(t, err, "rate %v", rate)
		assert.Equal(t, rate, g.Rate())
		assert.Equal(t, 1, g.Burst())
	}
}

func TestKeyedBurstThenRate(t *testing.T) {
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
			g, clk := newStepGCRA(t, tt.rate, tt.burst)
			for i := range tt.burst {
				assert.Equal(t, Decision{Allowed: true, Remaining: tt.burst - 1 - i}, allow(t, g, "k"))
			}
			d := allow(t, g, "k")
			assert.False(t, d.Allowed, "the burst is spent")
			assert.Equal(t, time.Duration(math.Round(1e9/tt.rate)), d.RetryAfter)

			var got []time.Duration
			for at := tt.step; at <= tt.over; at += tt.step {
				clk.Step(tt.step)
				if allow(t, g, "k").Allowed {
					got = append(got, at)
				}
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestKeyedRetryAfterIsExact: one nanosecond before RetryAfter is too
// early, RetryAfter itself is admitted, and denials cost nothing.
func TestKeyedRetryAfterIsExact(t *testing.T) {
	for _, rate := range []float64{0.5, 1, 3, 7, 1000, 12345.678, 1e9} {
		for _, burst := range []int{1, 4} {
			g, clk := newStepGCRA(t, rate, burst)
			for range burst {
				require.True(t, allow(t, g, "k").Allowed)
			}
			for range 20 {
				d := allow(t, g, "k")
				require.False(t, d.Allowed)
				require.Positive(t, d.RetryAfter)
				if d.RetryAfter > 1 {
					clk.Step(d.RetryAfter - 1)
					early := allow(t, g, "k")
					require.Equal(t, Decision{RetryAfter: 1}, early, "rate %v burst %d: 1 ns early", rate, burst)
					clk.Step(1)
				} else {
					clk.Step(d.RetryAfter)
				}
				require.Equal(t, Decision{Allowed: true}, allow(t, g, "k"), "rate %v burst %d", rate, burst)
			}
		}
	}
}

func TestKeyedKeysAreIndependent(t *testing.T) {
	g, _ := newStepGCRA(t, 1, 2)
	for _, key := range []string{"alice", "bob", "carol"} {
		assert.True(t, allow(t, g, key).Allowed)
		assert.True(t, allow(t, g, key).Allowed)
		assert.False(t, allow(t, g, key).Allowed, key)
	}
	assert.Equal(t, 3, g.Len())
}

func TestKeyedEmptyKey(t *testing.T) {
	g, _ := newStepGCRA(t, 1, 1)
	d, err := g.Allow("")
	assert.ErrorIs(t, err, ErrEmptyKey)
	assert.EqualError(t, err, "ratelimit: empty rate limit key")
	assert.Equal(t, Decision{}, d)
	assert.Equal(t, 0, g.Len())
}

func TestKeyedClockError(t *testing.T) {
	g, clk := newStepGCRA(t, 1, 1)
	require.True(t, allow(t, g, "k").Allowed)

	boom := errors.New("boom")
	clk.Fail(boom)
	d, err := g.Allow("k")
	assert.ErrorIs(t, err, boom)
	assert.EqualError(t, err, "ratelimit: Keyed clock: boom")
	assert.Equal(t, Decision{}, d, "no decision without a time")
	_, err = g.Allow("new")
	assert.ErrorIs(t, err, boom)
	n, err := g.Cleanup()
	assert.ErrorIs(t, err, boom)
	assert.Zero(t, n)
	assert.Equal(t, 1, g.Len(), "a failed call changes nothing")

	clk.Fail(nil)
	assert.Equal(t, Decision{RetryAfter: time.Second}, allow(t, g, "k"), "the key's state survived")
	clk.Step(time.Second)
	assert.True(t, allow(t, g, "k").Allowed)
}

// A clock failing at construction leaves the limiter usable once it
// recovers.
func TestKeyedClockFailingFromTheStart(t *testing.T) {
	clk := newStepClock()
	clk.Fail(errors.New("not yet"))
	g, err := NewKeyed(1, 1, withClock(clk))
	require.NoError(t, err)
	_, err = g.Allow("k")
	require.Error(t, err)
	clk.Fail(nil)
	assert.True(t, allow(t, g, "k").Allowed)
	assert.Equal(t, Decision{RetryAfter: time.Second}, allow(t, g, "k"))
}

func TestKeyedClockBackwards(t *testing.T) {
	g, clk := newStepGCRA(t, 1, 2)
	require.True(t, allow(t, g, "k").Allowed)
	require.True(t, allow(t, g, "k").Allowed)

	clk.Step(-10 * time.Second)
	assert.Equal(t, Decision{RetryAfter: 11 * time.Second}, allow(t, g, "k"),
		"no burst back: the wait is measured on the clock, which must catch up")
	assert.True(t, allow(t, g, "other").Allowed, "a new key has its burst whatever the clock")
	n, err := g.Cleanup()
	require.NoError(t, err)
	assert.Zero(t, n, "a key is idle by the latest time seen, not by the clock stepped back")

	clk.Step(10 * time.Second)
	assert.Equal(t, Decision{RetryAfter: time.Second}, allow(t, g, "k"))
	clk.Step(time.Second)
	assert.Equal(t, Decision{Allowed: true}, allow(t, g, "k"))
	assert.False(t, allow(t, g, "k").Allowed)
}

// TestKeyedBackwardsGrantsNothing replays one random history twice:
// on a monotonic clock, and on the same clock with random steps back. The
// steps back never admit a request more.
func TestKeyedBackwardsGrantsNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	steady, steadyClk := newStepGCRA(t, 10, 5)
	shaky, shakyClk := newStepGCRA(t, 10, 5)
	var steadyN, shakyN int
	for range 5000 {
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

func TestKeyedCleanup(t *testing.T) {
	g, clk := newStepGCRA(t, 1, 2)
	require.True(t, allow(t, g, "idle").Allowed) // full again after 1 s
	require.True(t, allow(t, g, "busy").Allowed)
	require.True(t, allow(t, g, "busy").Allowed) // full again after 2 s

	clk.Step(time.Second)
	n, err := g.Cleanup()
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, 1, g.Len(), "the key still paying back its burst stays")
	assert.Equal(t, Decision{Allowed: true, Remaining: 1}, allow(t, g, "idle"), "a removed key has its whole burst, as it had")
	assert.Equal(t, Decision{Allowed: true, Remaining: 0}, allow(t, g, "busy"), "a kept key keeps its debt")

	clk.Step(time.Hour)
	n, err = g.Cleanup()
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Zero(t, g.Len())
}

// TestKeyedCleanupChangesNoDecision replays one random history on two
// limiters, one cleaned up after every request: they decide alike.
func TestKeyedCleanupChangesNoDecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	kept, keptClk := newStepGCRA(t, 5, 3)
	cleaned, cleanedClk := newStepGCRA(t, 5, 3)
	removed := 0
	for i := range 5000 {
		d := time.Duration(rng.IntN(100)) * time.Millisecond
		keptClk.Step(d)
		cleanedClk.Step(d)
		key := strconv.Itoa(rng.IntN(20))
		require.Equal(t, allow(t, kept, key), allow(t, cleaned, key), "request %d", i)
		n, err := cleaned.Cleanup()
		require.NoError(t, err)
		removed += n
	}
	assert.Positive(t, removed)
	assert.Less(t, cleaned.Len(), kept.Len())
	assertConsistent(t, kept)
	assertConsistent(t, cleaned)
}

func TestKeyedMaxKeys(t *testing.T) {
	g, clk := newStepGCRA(t, 1, 3, WithMaxKeys(2*gcraShards)) // two keys per shard

	// Three keys that share a shard.
	same := []string{"key-0"}
	_, s0 := g.hash(same[0])
	for i := 1; len(same) < 3; i++ {
		k := "key-" + strconv.Itoa(i)
		if _, s := g.hash(k); s == s0 {
			same = append(same, k)
		}
	}
	busy, idle, newcomer := same[0], same[1], same[2]
	for range 3 {
		require.True(t, allow(t, g, busy).Allowed)
	}
	require.True(t, allow(t, g, idle).Allowed)
	clk.Step(400 * time.Millisecond)
	assert.Equal(t, Decision{Allowed: true, Remaining: 2}, allow(t, g, newcomer),
		"a full shard takes a newcomer")
	assert.Equal(t, Decision{Allowed: true, Remaining: 2}, allow(t, g, idle),
		"by forgetting the key nearest to a full burst")
	assert.Equal(t, Decision{RetryAfter: 600 * time.Millisecond}, allow(t, g, busy),
		"and keeps the key that spent its burst")

	clk.Step(10 * time.Second)
	assert.Equal(t, Decision{Allowed: true, Remaining: 2}, allow(t, g, "key-x"),
		"keys back at a full burst are swept first")
	assertConsistent(t, g)

	// A flood of distinct keys at one instant never shuts a newcomer out.
	clk.Step(time.Hour)
	for i := range 10000 {
		d := allow(t, g, fmt.Sprintf("flood-%d", i))
		assert.True(t, d.Allowed, "flood key %d", i)
	}
	assert.LessOrEqual(t, g.Len(), 2*gcraShards)
	assertConsistent(t, g)
}

func TestKeyedForgetsAFlood(t *testing.T) {
	g, clk := newStepGCRA(t, 1, 1)
	for i := range 100_000 {
		allow(t, g, strconv.Itoa(i))
	}
	assertConsistent(t, g)
	clk.Step(time.Second)
	require.True(t, allow(t, g, "survivor").Allowed)
	n, err := g.Cleanup()
	require.NoError(t, err)
	assert.Equal(t, 100_000, n)
	assert.Equal(t, 1, g.Len())
	assertConsistent(t, g)
}

// assertConsistent checks that each shard respects its bound and that
// nextExpiry is a lower bound of the shard's TATs.
func assertConsistent(t *testing.T, g *Keyed) {
	t.Helper()
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		if g.maxPerShard > 0 {
			assert.LessOrEqual(t, len(s.tats), g.maxPerShard, "shard %d", i)
		}
		for h, tat := range s.tats {
			assert.Equal(t, uint64(i), h&(gcraShards-1), "a key in the wrong shard")
			assert.LessOrEqual(t, s.nextExpiry, tat)
		}
		s.mu.Unlock()
	}
}

func TestKeyedConcurrent(t *testing.T) {
	g, clk := newStepGCRA(t, 100, 50, WithMaxKeys(10000))
	run := func(keys func(worker, i int) string) map[string]int {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			allowed = map[string]int{}
		)
		for w := range 8 {
			wg.Go(func() {
				mine := map[string]int{}
				for i := range 500 {
					key := keys(w, i)
					d, err := g.Allow(key)
					if !assert.NoError(t, err) {
						return
					}
					if d.Allowed {
						mine[key]++
					}
					if i%100 == 0 {
						_, _ = g.Cleanup()
						_ = g.Len()
					}
				}
				mu.Lock()
				for k, n := range mine {
					allowed[k] += n
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		return allowed
	}

	// All on one key: its burst is paid out exactly once.
	assert.Equal(t, map[string]int{"shared": 50}, run(func(int, int) string { return "shared" }))
	clk.Step(100 * time.Millisecond)
	assert.Equal(t, map[string]int{"shared": 10}, run(func(int, int) string { return "shared" }), "then the rate")

	// Each worker on 5 keys of its own: each key gets its burst.
	got := run(func(w, i int) string { return fmt.Sprintf("w%d-%d", w, i%5) })
	assert.Len(t, got, 40)
	for k, n := range got {
		assert.Equal(t, 50, n, k)
	}
	assertConsistent(t, g)
}

// TestKeyedCleanupRacesAllow removes keys while requests for them are
// being decided. A removal is exact only if no admission can land in an
// entry already forgotten: every key must get its burst exactly once.
func TestKeyedCleanupRacesAllow(t *testing.T) {
	const burst, keys = 3, 200
	g, clk := newStepGCRA(t, 1, burst)
	for round := range 5 {
		// Every key one request in, then idle: removable, yet a burst away
		// from refusal.
		for k := range keys {
			require.True(t, allow(t, g, strconv.Itoa(k)).Allowed)
		}
		clk.Step(time.Hour)

		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			allowed = make(map[string]int)
			stop    atomic.Bool
		)
		for range 2 {
			wg.Go(func() {
				for !stop.Load() {
					_, err := g.Cleanup()
					assert.NoError(t, err)
				}
			})
		}
		var deciders sync.WaitGroup
		for w := range 6 {
			deciders.Go(func() {
				mine := make(map[string]int)
				for i := range keys * 2 {
					key := strconv.Itoa((i + w*37) % keys)
					if allow(t, g, key).Allowed {
						mine[key]++
					}
				}
				mu.Lock()
				for k, n := range mine {
					allowed[k] += n
				}
				mu.Unlock()
			})
		}
		deciders.Wait()
		stop.Store(true)
		wg.Wait()

		require.Len(t, allowed, keys, "round %d", round)
		for k, n := range allowed {
			require.Equal(t, burst, n, "round %d key %s", round, k)
		}
		assertConsistent(t, g)
		clk.Step(time.Hour)
	}
}

func TestKeyedMaxKeysPerShard(t *testing.T) {
	for _, tt := range []struct{ maxKeys, perShard int }{
		{0, 0}, {1, 1}, {64, 1}, {65, 2}, {1000, 16}, {math.MaxInt, math.MaxInt/gcraShards + 1},
	} {
		g, err := NewKeyed(1, 1, WithMaxKeys(tt.maxKeys))
		require.NoError(t, err)
		assert.Equal(t, tt.perShard, g.maxPerShard, "WithMaxKeys(%d)", tt.maxKeys)
	}
}

// elapse lets d pass. Inside a synctest bubble the time is virtual: it
// passes at once, when every goroutine of the bubble is blocked.
func elapse(d time.Duration) { <-time.After(d) }

// TestKeyedSystemClock runs the default clock in a synctest bubble,
// where it reads virtual time: the waits are exact there too.
func TestKeyedSystemClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := NewKeyed(1, 2)
		require.NoError(t, err)
		assert.Equal(t, Decision{Allowed: true, Remaining: 1}, allow(t, g, "k"))
		assert.Equal(t, Decision{Allowed: true}, allow(t, g, "k"))
		assert.Equal(t, Decision{RetryAfter: time.Second}, allow(t, g, "k"))
		elapse(time.Second)
		assert.Equal(t, Decision{Allowed: true}, allow(t, g, "k"))
		elapse(2 * time.Second)
		n, err := g.Cleanup()
		require.NoError(t, err)
		assert.Equal(t, 1, n)
	})
}
