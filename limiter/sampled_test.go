package limiter

import (
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAIMDTimeEvery: the AIMD lets the Limiter time a sample of the calls
// only when round trips' mean RTT is under sampledBelow, in proportion to
// how short they are, and never while it judges calls one by one.
func TestAIMDTimeEvery(t *testing.T) {
	tests := []struct {
		name      string
		cfg       AIMDConfig
		slowStart bool
		probing   bool
		rtt       time.Duration
		then      time.Duration // the RTT of one more call, if not 0
		want      int
	}{
		{name: "100 ns", rtt: 100 * time.Nanosecond, want: 10},
		{name: "20 ns", rtt: 20 * time.Nanosecond, want: 50},
		{name: "capped", rtt: 5 * time.Nanosecond, want: maxTimeEvery},
		{name: "a microsecond", rtt: time.Microsecond, want: 1},
		{name: "then a slow call", rtt: 100 * time.Nanosecond, then: slowSample, want: 1},
		{name: "then a short one", rtt: 100 * time.Nanosecond, then: slowSample / 2, want: 10},
		{name: "a millisecond", rtt: time.Millisecond, want: 1},
		{name: "slow start", slowStart: true, rtt: 100 * time.Nanosecond, want: 1},
		{name: "probing", probing: true, rtt: 100 * time.Nanosecond, want: 1},
		{name: "PerCall", cfg: AIMDConfig{PerCall: true}, rtt: 100 * time.Nanosecond, want: 1},
		{name: "Timeout", cfg: AIMDConfig{Timeout: time.Millisecond}, rtt: 100 * time.Nanosecond, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAIMD(tt.cfg)
			require.NoError(t, err)
			assert.Equal(t, 1, a.timeEvery(), "before any round trip")
			a.slowStart = tt.slowStart
			a.publishLocked()
			feed(a, roundTrip(t0, tt.rtt, minTripSamples, 5, Success))
			if tt.then != 0 {
				require.Equal(t, 10, a.timeEvery())
				a.updateWeighted(Sample{RTT: tt.then, Inflight: 5, Outcome: Success, At: t0.Add(time.Second)}, 10)
			}
			if tt.probing {
				a.base.probing = true
				a.publishLocked()
			}
			assert.Equal(t, tt.want, a.timeEvery())
		})
	}
}

// TestAIMDSampledDropShare: with a sample of the calls timed, a timed
// success stands for timeEvery calls, and the share of drops that a round
// trip backs off by is taken of all of them. Counted by samples instead,
// one drop among nine timed successes, each standing for ten calls, would
// read as a tenth of the round trip, not a 91st: a trickle of refusals
// among very short calls would cost nine times what it costs among long
// ones.
func TestAIMDSampledDropShare(t *testing.T) {
	a, at := steadyAIMD(t, 0, true)
	require.Equal(t, 30.0, a.limit)
	a.updateUntimed(Dropped, 30)
	a.updateUntimed(Success, 30) // stood for by the timed successes
	for _, s := range roundTrip(at, 10*time.Millisecond, minTripSamples-1, 30, Success) {
		a.updateWeighted(s, 10)
	}
	// One drop of 1 + 9 × 10 calls, and the round trip's quarter step.
	share := 1.0 / 91
	assert.InDelta(t, 30*(1-share*(1-defaultAIMDBackoffRatio))+adaptiveGain, a.limit, 1e-9)
}

// TestSampledTiming drives a default Limiter with calls of 100 ns: once
// slow start is over, about one call in ten is timed. The others cost no
// clock read: Release returns 0 for them and Granted has no time. Every
// permit still comes back, and a drop among untimed calls still reaches
// the algorithm. With WithEveryCallTimed, or calls of a microsecond or
// more, every call is timed.
//
// The counts are random (the Limiter picks the calls to time at random):
// the bounds are 9 standard deviations from the expected count, so a
// correct Limiter fails them with a probability below 10⁻¹⁸.
func TestSampledTiming(t *testing.T) {
	const calls = 3000
	tests := []struct {
		name     string
		opts     []Option
		call     time.Duration
		min, max int // timed calls among the calls
	}{
		{name: "100 ns", call: 100 * time.Nanosecond, min: 150, max: 450},
		{name: "every call timed", opts: []Option{WithEveryCallTimed()}, call: 100 * time.Nanosecond, min: calls, max: calls},
		{name: "1 µs", call: time.Microsecond, min: calls, max: calls},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, err := New(tt.opts...)
				require.NoError(t, err)
				// A round trip of drops ends slow start.
				for range minTripSamples {
					tok, ok := l.TryAcquire()
					require.True(t, ok)
					time.Sleep(tt.call)
					require.Equal(t, tt.call, tok.Release(Dropped))
				}
				timed := 0
				var untimed Token
				for range calls {
					tok, ok := l.TryAcquire()
					require.True(t, ok)
					granted := tok.Granted()
					time.Sleep(tt.call)
					if !granted.IsZero() {
						timed++
						assert.Equal(t, tt.call, tok.Release(Success))
					} else if untimed.Held() {
						assert.Zero(t, tok.Release(Success))
					} else {
						untimed = tok // kept, to be dropped below
					}
				}
				assert.GreaterOrEqual(t, timed, tt.min)
				assert.LessOrEqual(t, timed, tt.max)
				if tt.min == calls {
					assert.False(t, untimed.Held())
					return
				}

				require.True(t, untimed.Held())
				a := l.alg.(*AIMD)
				drops := a.win.counts.Load() & (oneSample - 1)
				assert.Zero(t, untimed.Release(Dropped))
				assert.Equal(t, drops+1, a.win.counts.Load()&(oneSample-1), "the drop is in the round trip")
				assert.Zero(t, l.Inflight(), "every permit is back")
			})
		})
	}
}

// TestStressSampled releases timed and untimed calls of a sampling AIMD
// from many goroutines at once, with every outcome, through Release and
// ReleaseUntimed, while round trips close: every permit comes back, and
// the race detector sees the lock-free paths. The AIMD starts out
// sampling one call in ten; calls slower than slowSample (likely under
// the race detector) may end the sampling partway.
func TestStressSampled(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{InitialLimit: 64, MinLimit: 8})
	require.NoError(t, err)
	a.slowStart = false
	a.mean = 100 * time.Nanosecond
	a.publishLocked()
	require.Equal(t, 10, a.timeEvery())
	l, err := New(WithAlgorithm(a))
	require.NoError(t, err)

	var workers sync.WaitGroup
	for w := range 8 {
		workers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for range 2000 {
				tok, ok := l.TryAcquire()
				if !ok {
					continue
				}
				o := Outcome(rng.IntN(3))
				if rng.IntN(8) == 0 {
					tok.ReleaseUntimed(o)
				} else {
					tok.Release(o)
				}
				assert.False(t, tok.Held())
			}
		})
	}
	workers.Wait()
	assertSettled(t, l)
	assert.GreaterOrEqual(t, l.Limit(), 8)
}
