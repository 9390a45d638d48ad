package limiter

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// seedAIMD returns an AIMD with seed 001's per-call semantics.
func seedAIMD(t *testing.T, c AIMDConfig) *AIMD {
	t.Helper()
	c.PerCall = true
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	a, err := NewAIMD(c)
	require.NoError(t, err)
	return a
}

func call(rtt time.Duration, inflight int, o Outcome) Sample {
	return Sample{RTT: rtt, Inflight: inflight, Outcome: o, At: t0}
}

// TestAIMDRule feeds AIMD's per-call rule the sample sequences of seed 001.
func TestAIMDRule(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		cfg     AIMDConfig
		samples []Sample
		want    []int // limit after each sample
	}{
		{"success when loaded grows by one",
			AIMDConfig{InitialLimit: 10}, []Sample{call(50*ms, 10, Success)}, []int{11}},
		{"success when lightly loaded changes nothing",
			AIMDConfig{InitialLimit: 10}, []Sample{call(50*ms, 2, Success), call(50*ms, 4, Success)}, []int{10, 10}},
		{"exactly half loaded grows",
			AIMDConfig{InitialLimit: 10}, []Sample{call(50*ms, 5, Success)}, []int{11}},
		{"drop multiplies by the backoff ratio",
			AIMDConfig{InitialLimit: 10}, []Sample{call(50*ms, 10, Dropped)}, []int{9}},
		{"rtt above the timeout is a drop",
			AIMDConfig{InitialLimit: 10, Timeout: time.Second}, []Sample{call(2*time.Second, 10, Success)}, []int{9}},
		{"rtt equal to the timeout is not",
			AIMDConfig{InitialLimit: 10, Timeout: time.Second}, []Sample{call(time.Second, 10, Success)}, []int{11}},
		{"ignored changes nothing",
			AIMDConfig{InitialLimit: 10}, []Sample{call(50*ms, 10, Ignored), call(10*time.Second, 10, Ignored)}, []int{10, 10}},
		{"repeated drops decay smoothly as a float",
			AIMDConfig{InitialLimit: 10},
			[]Sample{call(ms, 10, Dropped), call(ms, 10, Dropped), call(ms, 10, Dropped)}, []int{9, 8, 7}}, // 9, 8.1, 7.29
		{"floored at the minimum",
			AIMDConfig{InitialLimit: 5, MinLimit: 5},
			[]Sample{call(ms, 10, Dropped), call(ms, 10, Dropped)}, []int{5, 5}},
		{"capped at the maximum",
			AIMDConfig{InitialLimit: 10, MaxLimit: 11},
			[]Sample{call(ms, 10, Success), call(ms, 10, Success)}, []int{11, 11}},
		{"custom backoff ratio",
			AIMDConfig{InitialLimit: 100, BackoffRatio: 0.5}, []Sample{call(ms, 100, Dropped)}, []int{50}},
		{"recovers additively",
			AIMDConfig{InitialLimit: 10},
			[]Sample{call(ms, 10, Dropped), call(ms, 9, Success), call(ms, 10, Success)}, []int{9, 10, 11}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := seedAIMD(t, tt.cfg)
			var got []int
			for _, s := range tt.samples {
				got = append(got, a.Update(s))
				assert.Equal(t, got[len(got)-1], a.Limit(), "Update's result and Limit agree")
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestAIMDConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  AIMDConfig
		want []string // each must appear in the error
	}{
		{"backoff too low", AIMDConfig{BackoffRatio: 0.3},
			[]string{"limiter: AIMDConfig.BackoffRatio is 0.3, must be in [0.5, 1)"}},
		{"backoff one", AIMDConfig{BackoffRatio: 1},
			[]string{"limiter: AIMDConfig.BackoffRatio is 1, must be in [0.5, 1)"}},
		{"negative minimum", AIMDConfig{MinLimit: -1},
			[]string{"limiter: AIMDConfig.MinLimit is -1, must be in [1, 1048576]"}},
		{"min above max", AIMDConfig{MinLimit: 50, MaxLimit: 10, InitialLimit: 50},
			[]string{"limiter: AIMDConfig.MinLimit is 50, must be <= MaxLimit (10)",
				"limiter: AIMDConfig.InitialLimit is 50, must be in [MinLimit, MaxLimit] = [50, 10]"}},
		{"initial below min", AIMDConfig{InitialLimit: 5, MinLimit: 10, MaxLimit: 100},
			[]string{"limiter: AIMDConfig.InitialLimit is 5, must be in [MinLimit, MaxLimit] = [10, 100]"}},
		{"max above MaxLimit", AIMDConfig{MaxLimit: MaxLimit + 1},
			[]string{"limiter: AIMDConfig.MaxLimit is 1048577, must be in [1, 1048576]"}},
		{"negative timeout", AIMDConfig{Timeout: -time.Second},
			[]string{"limiter: AIMDConfig.Timeout is -1s, must be > 0, or 0 for the adaptive threshold"}},
		{"several at once", AIMDConfig{BackoffRatio: 2, Timeout: -1},
			[]string{"AIMDConfig.BackoffRatio is 2", "AIMDConfig.Timeout is -1ns"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAIMD(tt.cfg)
			require.Error(t, err)
			assert.Nil(t, a)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
			var ce *FieldError
			assert.ErrorAs(t, err, &ce)
		})
	}
}

func TestAIMDDefaults(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{})
	require.NoError(t, err)
	assert.Equal(t, AIMDConfig{
		InitialLimit: defaultAIMDInitialLimit,
		MinLimit:     defaultAIMDMinLimit,
		MaxLimit:     defaultAIMDMaxLimit,
		BackoffRatio: defaultAIMDBackoffRatio,
	}, a.cfg)
	assert.Equal(t, 20, a.Limit())

	// Defaults bend around explicit bounds instead of contradicting them.
	a, err = NewAIMD(AIMDConfig{MaxLimit: 8})
	require.NoError(t, err)
	assert.Equal(t, 8, a.Limit())
	a, err = NewAIMD(AIMDConfig{MinLimit: 2000})
	require.NoError(t, err)
	assert.Equal(t, 2000, a.Limit())
	assert.Equal(t, 2000, a.cfg.MaxLimit)
}

// roundTrip returns n calls that all started at start and returned at
// start+rtt, with the given in-flight count and outcome.
func roundTrip(start time.Time, rtt time.Duration, n, inflight int, o Outcome) []Sample {
	out := make([]Sample, n)
	for i := range out {
		out[i] = Sample{RTT: rtt, Inflight: inflight, Outcome: o, At: start.Add(rtt)}
	}
	return out
}

// spreadPair returns two successes that started at start and took mean −
// spread and mean + spread: a mean of mean and a coefficient of variation
// of spread / mean.
func spreadPair(start time.Time, mean, spread time.Duration, inflight int) []Sample {
	return append(roundTrip(start, mean-spread, 1, inflight, Success),
		roundTrip(start, mean+spread, 1, inflight, Success)...)
}

// newWarmAIMD returns a default AIMD of limit 40 past slow start.
func newWarmAIMD(t *testing.T) *AIMD {
	t.Helper()
	a, err := NewAIMD(AIMDConfig{InitialLimit: 40})
	require.NoError(t, err)
	a.slowStart = false
	return a
}

func feed(a Algorithm, samples []Sample) int {
	n := a.Limit()
	for _, s := range samples {
		n = a.Update(s)
	}
	return n
}

// TestSlowStartGrowsAFilledLimit: slow start grows the limit by one per
// success only while the successes found it at least slowStartFill full,
// so it takes the limit to about calls in flight / 0.7. Growing whenever
// they held half of it took the limit to twice the calls in flight: at
// exactly full load, 50 for a capacity of 16.
func TestSlowStartGrowsAFilledLimit(t *testing.T) {
	tests := []struct {
		inflight, want int // 10 successes from a limit of 20
	}{
		{inflight: 10, want: 20}, // growing at half full: 21
		{inflight: 14, want: 21}, // 29
		{inflight: 20, want: 29}, // 30
		{inflight: 25, want: 30},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.inflight), func(t *testing.T) {
			a, err := NewAIMD(AIMDConfig{InitialLimit: 20})
			require.NoError(t, err)
			assert.Equal(t, tt.want, feed(a, roundTrip(t0, 10*time.Millisecond, 10, tt.inflight, Success)))
			assert.True(t, a.slowStart)
		})
	}
}

// TestAIMDRoundTrips checks that, by default, AIMD applies its rule once
// per round trip: a whole round trip of drops backs off once.
func TestAIMDRoundTrips(t *testing.T) {
	ms := time.Millisecond
	a, err := NewAIMD(AIMDConfig{InitialLimit: 20, Timeout: 100 * ms})
	require.NoError(t, err)

	// Slow start: every success that found the limit 70 % full grows it
	// by one.
	at := t0
	require.Equal(t, 30, feed(a, roundTrip(at, 10*ms, 10, 21, Success)))

	// A round trip in which every call was dropped backs off once, not
	// ten times: 30 × 0.9 = 27. That also ends slow start.
	at = at.Add(10 * ms)
	assert.Equal(t, 27, feed(a, roundTrip(at, 10*ms, 10, 27, Dropped)))

	// Congestion avoidance: a clean loaded round trip grows by one.
	at = at.Add(10 * ms)
	assert.Equal(t, 28, feed(a, roundTrip(at, 10*ms, 10, 27, Success)))

	// A round trip does not close before one of its own calls returns:
	// stragglers from before it opened cannot end it.
	at = at.Add(10 * ms)
	old := roundTrip(at.Add(-50*ms), 55*ms, 30, 28, Dropped)
	assert.Equal(t, 28, feed(a, old), "calls that started before the round trip opened")
	// The first call of its own closes it, with the drops: 30 of its 31
	// calls were dropped, so it backs off by 30/31 of 10 % and, like any
	// round trip that is not late, grows by one: 28 × 0.903 + 1 = 26.3.
	assert.Equal(t, 26, feed(a, roundTrip(at, 10*ms, 1, 28, Success)))
}

// TestAIMDDropShare checks DCTCP's rule: a round trip backs off in
// proportion to the share of its calls that were dropped.
func TestAIMDDropShare(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		drops int // of 10 calls
		want  float64
	}{
		{"none: one step up", 0, 41},
		{"one: 1 % down, one step up", 1, 40*(1-0.1*0.1) + 1},
		{"half: 5 % down, one step up", 5, 40*(1-0.5*0.1) + 1},
		{"all: BackoffRatio, no step up", 10, 40 * 0.9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAIMD(AIMDConfig{InitialLimit: 40, Timeout: time.Second})
			require.NoError(t, err)
			a.slowStart = false
			trip := roundTrip(t0, 10*ms, 10, 40, Success)
			for i := range tt.drops {
				trip[i].Outcome = Dropped
			}
			feed(a, trip)
			assert.InDelta(t, tt.want, a.limit, 1e-9)
		})
	}
}

// TestAIMDLateWithDrops: a round trip whose successes are late backs off
// even when some of its calls were dropped, to the limit at which it would
// have been on time and by BackoffRatio at most. Under overload
// deadline overruns are drops, and a round trip with a share of them is
// exactly the one whose other calls finished slowly; counted only for its
// share, it cost 2 % where a late round trip costs 10 %, and with
// processor sharing and noisy service times a limiter that started under
// 2× overload stayed at 4.9× the downstream's capacity (p99 9.7·S).
func TestAIMDLateWithDrops(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		rtt   time.Duration // of the successes; the baseline is 10 ms
		drops int           // of 10 calls
		want  float64
	}{
		{"late, no drops", 20 * ms, 0, 30 * 0.9},
		// Just past the threshold (13 ms): back to it, not 10 % lower.
		{"a little late", 13_500 * time.Microsecond, 0, 30 * 13 / 13.5},
		{"a little late, one drop", 14 * ms, 1, 30 * 13.0 / 14},
		{"late, one drop", 20 * ms, 1, 30 * 0.9},
		{"late, half dropped", 20 * ms, 5, 30 * 0.9},
		{"all dropped", 20 * ms, 10, 30 * 0.9},
		{"on time, one drop: its share", 10 * ms, 1, 30*(1-0.1*0.1) + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, at := steadyAIMD(t, 0, false)
			feedTrip(a, at, tt.rtt, tt.drops)
			assert.InDelta(t, tt.want, a.limit, 1e-9)
		})
	}
}

// TestAIMDQuarterSteps: once a probe has confirmed the baseline, the
// adaptive threshold moves the limit by quarter steps (a late round trip
// backs off a quarter of the way to the threshold, a loaded one grows by
// a quarter); before it,
// while the limit comes down from slow start, by whole ones. Drops take
// the whole step either way, and an explicit Timeout keeps the classic
// rule.
func TestAIMDQuarterSteps(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name      string
		timeout   time.Duration
		confirmed bool          // a probe has confirmed the baseline
		rtt       time.Duration // of the round trip's successes; the baseline is 10 ms, so 12 ms is on time but not spare
		drops     int           // of 10 calls
		want      float64
	}{
		{"confirmed, late: a quarter of the way to the threshold", 0, true, 14 * ms, 0, 30 * (1 - (1-13.0/14)/4)},
		{"confirmed, late past 10 %: a quarter of BackoffRatio's step", 0, true, 16 * ms, 0, 30 * (1 - (1-0.9)/4)},
		{"confirmed, far late (1.5 × the threshold): the whole step", 0, true, 20 * ms, 0, 30 * 0.9},
		{"confirmed, on time: a quarter up", 0, true, 12 * ms, 0, 30.25},
		{"confirmed, all dropped: the whole step", 0, true, 10 * ms, 10, 30 * 0.9},
		{"confirmed, one drop: its share, a quarter up", 0, true, 10 * ms, 1, 30*(1-0.1*0.1) + 0.25},
		{"before the first probe, late: to the threshold", 0, false, 14 * ms, 0, 30 * 13.0 / 14},
		{"before the first probe, on time: one up", 0, false, 12 * ms, 0, 31},
		{"explicit timeout, on time: one up", time.Second, true, 10 * ms, 0, 31},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, at := steadyAIMD(t, tt.timeout, tt.confirmed)
			feedTrip(a, at, tt.rtt, tt.drops)
			assert.InDelta(t, tt.want, a.limit, 1e-9)
		})
	}
}

// steadyAIMD returns an AIMD at a limit of 30, past slow start, and the
// time its next round trip opens. With the adaptive threshold (timeout 0)
// light load has set the baseline to 10 ms first, and confirmed says
// whether a probe has since confirmed it.
func steadyAIMD(t *testing.T, timeout time.Duration, confirmed bool) (*AIMD, time.Time) {
	t.Helper()
	ms := time.Millisecond
	a, err := NewAIMD(AIMDConfig{InitialLimit: 30, Timeout: timeout})
	require.NoError(t, err)
	at := t0
	if timeout == 0 {
		for range smoothWarmup {
			feed(a, roundTrip(at, 10*ms, minTripSamples, 5, Success))
			at = at.Add(10 * ms)
		}
		require.Equal(t, 10*ms, a.base.rtt)
	}
	a.slowStart = false
	if confirmed {
		a.probes = 1 // taken and over: not probing, not collecting
	}
	a.publishLocked()
	return a, at
}

// feedTrip feeds a a round trip of 10 calls opening at at, with 30 in
// flight, whose successes took rtt and whose first drops calls were
// dropped.
func feedTrip(a *AIMD, at time.Time, rtt time.Duration, drops int) {
	trip := roundTrip(at, rtt, 10, 30, Success)
	for i := range drops {
		trip[i].Outcome = Dropped
	}
	feed(a, trip)
}

// TestAIMDAdaptive walks the adaptive threshold through its states with a
// service that takes 10 ms without a queue.
func TestAIMDAdaptive(t *testing.T) {
	ms := time.Millisecond
	a, err := NewAIMD(AIMDConfig{InitialLimit: 30})
	require.NoError(t, err)
	at := t0
	trip := func(rtt time.Duration, inflight int) int {
		n := feed(a, roundTrip(at, rtt, minTripSamples, inflight, Success))
		at = at.Add(rtt)
		return n
	}

	// Light load: round trips at low in-flight learn the baseline and
	// do not grow the limit.
	for range smoothWarmup {
		assert.Equal(t, 30, trip(10*ms, 5))
	}
	assert.Equal(t, 10*ms, a.base.rtt)

	// Loaded, no queue: slow start grows per call, then a late call
	// (above 1.3 × 10 ms) ends it; the round trip's mean is late too, so
	// the limit backs off once.
	assert.Equal(t, 40, trip(10*ms, 30))
	assert.Equal(t, 37, trip(14*ms, 40)) // 40 × 13/14: back to the threshold
	assert.False(t, a.slowStart)

	// Queueing within the tolerance: one step per round trip, and the
	// baseline does not move however long it lasts. (The third full
	// round trip starts the first probe, which lowers Limit but not the
	// limit it restores.)
	trip(12*ms, 37)
	assert.InDelta(t, 40*13.0/14+1, a.limit, 1e-9)
	trip(12*ms, 38)
	assert.InDelta(t, 40*13.0/14+2, a.limit, 1e-9)
	assert.True(t, a.base.probing, "first probe after three full round trips")
	for range 100 {
		trip(12*ms, 20)
	}
	assert.Equal(t, 10*ms, a.base.rtt, "queued round trips cannot raise the baseline")

	// A round trip that filled the limit without a queue shows spare
	// capacity: grow by an eighth.
	before := a.limit
	trip(10*ms, a.Limit())
	assert.InDelta(t, before+before/8, a.limit, 1e-9)
}

// TestFirstProbeDepth: the first probe goes deep (a quarter of the limit)
// only when a round trip of the warm-up that set the baseline filled the
// limit, as a limiter that starts under overload does; after a warm-up
// under less load it lowers the limit to two thirds, as later probes do.
// Deep after any warm-up, at exactly full load with S = 100 ms it held the
// limit at a quarter for 3.5 RTTs and turned away the calls that came
// meanwhile (virtual time: 93.6 % of ideal from 1 s to 6 s over 8 seeds
// with processor sharing, 96.1 % with a first probe at two thirds).
func TestFirstProbeDepth(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		inflight int // of the warm-up's round trips, against a limit of 40
		want     float64
	}{
		{"warm-up under overload: deep", 40, firstProbeFraction},
		{"warm-up under light load: two thirds", 5, probeFraction},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAIMD(AIMDConfig{InitialLimit: 40})
			require.NoError(t, err)
			a.slowStart = false // it would grow the limit by every loaded call
			at := t0
			for range smoothWarmup {
				feed(a, roundTrip(at, 10*ms, minTripSamples, tt.inflight, Success))
				at = at.Add(10 * ms)
			}
			require.Equal(t, 10*ms, a.base.rtt)
			for i := 0; !a.base.probing; i++ {
				require.Less(t, i, 10, "no probe after 10 full round trips")
				feed(a, roundTrip(at, 10*ms, minTripSamples, a.Limit(), Success))
				at = at.Add(10 * ms)
			}
			assert.Equal(t, int(tt.want*a.limit), a.Limit(), "the probe's limit")
		})
	}
}

// TestAIMDProbe checks how a probe refreshes a baseline that sustained
// load has left unconfirmed.
func TestAIMDProbe(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		load  time.Duration // the RTT of the loaded round trips before the probe
		probe time.Duration // what the probe's calls take
		want  time.Duration // the baseline after it
		trips int           // round trips before the first probe
	}{
		// Slow start grows the limit by a round trip's samples, so its
		// round trips do not fill the limit: two of them before three
		// full ones.
		{"slightly slower: follows", 12 * ms, 11 * ms, 11 * ms, 5},
		{"met a queue: the baseline stays", 12 * ms, 20 * ms, 10 * ms, 5},
		{"faster beyond its noise: learned", 12 * ms, 8 * ms, 8 * ms, 5},
		// A late call ends slow start at once. Three late round trips
		// are not yet a collapse: the first probe keeps the baseline, and
		// the next one, while every round trip stays late, learns it.
		{"downstream slowed for good: learned", 30 * ms, 30 * ms, 10 * ms, firstProbeTrips},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAIMD(AIMDConfig{InitialLimit: 40, MinLimit: 10, MaxLimit: 60})
			require.NoError(t, err)
			at := t0
			trip := func(rtt time.Duration, inflight int) {
				feed(a, roundTrip(at, rtt, minTripSamples, inflight, Success))
				at = at.Add(rtt)
			}
			// probe runs the loaded round trips until a probe starts and
			// then the probe, whose calls take rtt; it returns how long the
			// baseline went unconfirmed and the probe's limit.
			probe := func(load, rtt time.Duration) (time.Duration, int, float64) {
				learned := a.base.updated
				for !a.base.probing {
					trip(load, a.Limit())
				}
				waited, limit := at.Sub(learned), a.Limit()
				steady, base := a.limit, a.base.rtt
				// Once a round trip's worth of calls admitted under the
				// probe limit is back, the limit is restored, and the
				// probe collects its slower calls for 4 baselines. A
				// first probe that drained a queue scales the limit
				// down with the RTT, by a quarter at most.
				feed(a, roundTrip(at, rtt, minTripSamples, a.Limit(), Success))
				assert.False(t, a.base.probing)
				if a.probes == 1 && rtt < base {
					assert.Equal(t, int(steady*max(float64(rtt)/float64(base), 0.75)), a.Limit(), "limit scaled")
				} else {
					assert.GreaterOrEqual(t, a.Limit(), int(steady), "limit restored")
				}
				feed(a, []Sample{{RTT: ms, Inflight: 5, Outcome: Ignored, At: at.Add(60 * ms)}})
				assert.True(t, a.base.collecting, "ignored samples do not advance the probe")
				feed(a, []Sample{{RTT: ms, Inflight: 5, Outcome: Success, At: at.Add(200 * ms)}})
				assert.False(t, a.base.collecting)
				at = at.Add(200 * ms)
				return waited, limit, steady
			}
			for range smoothWarmup {
				trip(10*ms, 5)
			}
			require.Equal(t, 10*ms, a.base.rtt)
			// As if the warm-up had filled the limit, as a limiter that
			// starts under overload does (see TestFirstProbeDepth).
			a.base.queued = true

			// The first probe comes after a few full round trips, late
			// or not, and goes deep, to drain the queue of a limiter that
			// started under overload.
			waited, limit, steady := probe(tt.load, tt.probe)
			assert.Equal(t, time.Duration(tt.trips)*tt.load, waited, "first probe")
			assert.Equal(t, max(10, int(firstProbeFraction*steady)), limit, "first probe at a quarter")
			assert.Equal(t, tt.want, a.base.rtt)

			// The next ones wait probeInterval, or twice that while the
			// limit keeps falling, and lower the limit to two thirds.
			if tt.load > 13*ms { // every round trip late: never steady
				waited, _, _ = probe(tt.load, tt.probe)
				assert.InDelta(t, 2*probeInterval, waited, float64(10*tt.load), "probe of a collapse")
				assert.Equal(t, tt.probe, a.base.rtt, "the slower RTT learned")
				return
			}
			// (Round trips 20 % above the baseline neither confirm it nor
			// are late.)
			load := a.base.rtt * 6 / 5
			waited, limit, steady = probe(load, a.base.rtt)
			assert.InDelta(t, probeInterval, waited, float64(10*load), "later probe")
			assert.Equal(t, max(10, int(probeFraction*steady)), limit, "later probe at two thirds")

			// A shallow probe that reads a slightly slower RTT may have
			// met a queue of its own making: the baseline stays, and the
			// next probe goes deep. A deep one that reads the same has
			// found a slower downstream.
			base := a.base.rtt
			slower := base * 108 / 100
			_, limit, steady = probe(load, slower)
			assert.Equal(t, max(10, int(probeFraction*steady)), limit, "shallow")
			assert.Equal(t, base, a.base.rtt, "a shallow probe does not raise the baseline")
			_, limit, steady = probe(load, slower)
			assert.Equal(t, max(10, int(firstProbeFraction*steady)), limit, "deep")
			assert.Equal(t, slower, a.base.rtt, "a deep probe does")
			_, limit, steady = probe(slower*6/5, slower)
			assert.Equal(t, max(10, int(probeFraction*steady)), limit, "shallow again")
		})
	}
}

// TestAIMDFirstProbeNoisyRTT: with noisy RTTs, the first calls of a probe
// to return are the short ones. Judged on them alone, the first probe read
// a third of the service time as a drained queue, and the limit and the
// baseline followed it down: every round trip after was late, and the
// limit of TestDefaultsProtect's C = 64 exponential case collapsed.
func TestAIMDFirstProbeNoisyRTT(t *testing.T) {
	ms := time.Millisecond
	a := newWarmAIMD(t)
	at := t0
	// samples returns n calls that started at at and took rtt.
	samples := func(n int, rtt time.Duration, inflight int) []Sample {
		return roundTrip(at, rtt, n, inflight, Success)
	}
	// noisy runs a round trip of calls that take mean-9 ms and mean+9 ms:
	// a coefficient of variation of 0.9 at a mean of 10 ms.
	noisy := func(mean time.Duration, inflight int) {
		for range 50 {
			feed(a, append(samples(1, mean-9*ms, inflight), samples(1, mean+9*ms, inflight)...))
		}
		at = at.Add(mean + 9*ms)
	}
	for range smoothWarmup {
		noisy(10*ms, 5)
	}
	require.InDelta(t, 0.9, a.cv, 0.05)
	// Loaded round trips 20 % slower neither confirm the baseline nor
	// are late; the third starts the first probe.
	for i := 0; !a.base.probing && i < 100; i++ {
		noisy(12*ms, a.Limit())
	}
	require.True(t, a.base.probing, "first probe")
	steady := a.limit
	at = a.base.probeFrom

	// The probe's first returns average 1 ms, far below the baseline.
	for i := 0; a.base.probing && i < 100; i++ {
		feed(a, samples(1, ms, 5))
	}
	require.True(t, a.base.collecting)
	assert.GreaterOrEqual(t, a.limit, steady, "limit restored whole, not scaled on the short calls")

	// The long ones come back; one call after the collection ends it.
	feed(a, samples(a.base.probeN, 19*ms, 5))
	feed(a, []Sample{{RTT: 60 * ms, Inflight: 5, Outcome: Success, At: at.Add(50 * ms)}})
	require.False(t, a.base.collecting)
	assert.InDelta(t, 10*ms, a.base.rtt, float64(ms), "baseline")
	assert.GreaterOrEqual(t, a.limit, steady, "limit")
}

func TestAIMDExplicitTimeoutNeverProbes(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{InitialLimit: 30, Timeout: time.Second})
	require.NoError(t, err)
	at := t0
	for range 1000 {
		feed(a, roundTrip(at, 10*time.Millisecond, minTripSamples, 30, Success))
		at = at.Add(10 * time.Millisecond)
	}
	assert.False(t, a.base.probing)
	assert.Zero(t, a.base.rtt)
}

func TestFixed(t *testing.T) {
	f, err := NewFixed(7)
	require.NoError(t, err)
	assert.Equal(t, 7, f.Update(call(time.Hour, 100, Dropped)))
	assert.Equal(t, 7, f.Limit())

	for _, n := range []int{0, -1, MaxLimit + 1} {
		_, err := NewFixed(n)
		assert.ErrorContains(t, err, "limiter: Fixed limit is")
		assert.ErrorContains(t, err, "must be in [1, 1048576]")
	}
}

// TestAIMDUntimed checks that untimed samples (streams) apply the per-call
// rule in adaptive mode without touching the RTT baseline.
func TestAIMDUntimed(t *testing.T) {
	tests := []struct {
		name    string
		samples []Sample
		want    []float64
	}{
		{"loaded success in slow start grows by one", []Sample{call(UntimedRTT, 10, Success)}, []float64{11}},
		{"light success changes nothing", []Sample{call(UntimedRTT, 2, Success)}, []float64{10}},
		{"drop backs off", []Sample{call(UntimedRTT, 10, Dropped), call(UntimedRTT, 10, Dropped)}, []float64{9, 8.1}},
		{"ignored changes nothing", []Sample{call(UntimedRTT, 10, Ignored)}, []float64{10}},
		{"a drop ends slow start: successes then add one per limit's worth",
			[]Sample{call(UntimedRTT, 10, Dropped), call(UntimedRTT, 9, Success), call(UntimedRTT, 9, Success)},
			[]float64{9, 9 + 1.0/9, 9 + 1.0/9 + 1/(9+1.0/9)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAIMD(AIMDConfig{InitialLimit: 10})
			require.NoError(t, err)
			var got []float64
			for _, s := range tt.samples {
				a.Update(s)
				got = append(got, a.limit)
			}
			assert.InDeltaSlice(t, tt.want, got, 1e-9)
			assert.Zero(t, a.base.rtt, "untimed samples must not set the baseline")
		})
	}
}

// TestAIMDUntimedPushback is the client that its server pushes back: ten
// untimed drops, then ten loaded successes, must not leave the limit above
// where it started.
func TestAIMDUntimedPushback(t *testing.T) {
	a, err := NewAIMD(AIMDConfig{})
	require.NoError(t, err)
	for range 10 {
		a.Update(call(UntimedRTT, 20, Dropped))
	}
	assert.Equal(t, 6, a.Limit()) // 20 × 0.9^10
	for range 10 {
		a.Update(call(UntimedRTT, a.Limit(), Success))
	}
	assert.Less(t, a.Limit(), 20)
	assert.Equal(t, 8, a.Limit())
}

// TestWindowConcurrent adds samples from several goroutines while another
// closes windows: every sample is counted in exactly one round trip.
func TestWindowConcurrent(t *testing.T) {
	var w window
	const workers, each = 4, 5000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range each {
				o := Success
				if i%10 == 0 {
					o = Dropped
				}
				w.add(Sample{RTT: time.Millisecond, Inflight: i % 50, Outcome: o, At: t0.Add(time.Duration(i) * time.Millisecond)}, 1, 1)
			}
		})
	}
	var n, drops int
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for closing := true; closing; {
		select {
		case <-done:
			closing = false
		default:
		}
		rt := w.close(t0)
		n, drops = n+rt.n, drops+rt.drops
	}
	assert.Equal(t, workers*each, n)
	assert.Equal(t, workers*each/10, drops)
}

// TestUntimedDrops checks that every latency-based algorithm backs off on
// a drop without an RTT (a stream's), and ignores an untimed success.
func TestUntimedDrops(t *testing.T) {
	newVegas := func() Algorithm {
		v, err := NewVegas(VegasConfig{InitialLimit: 20})
		require.NoError(t, err)
		return v
	}
	newGradient2 := func() Algorithm {
		g, err := NewGradient2(Gradient2Config{InitialLimit: 20})
		require.NoError(t, err)
		return g
	}
	for name, newAlg := range map[string]func() Algorithm{"Vegas": newVegas, "Gradient2": newGradient2} {
		t.Run(name, func(t *testing.T) {
			a := newAlg()
			assert.Equal(t, 20, a.Update(call(UntimedRTT, 20, Success)), "an untimed success says nothing")
			assert.Less(t, a.Update(call(UntimedRTT, 20, Dropped)), 20, "an untimed drop is overload")
		})
	}
}

// TestWindowSubMicrosecond is the round trip of calls shorter than a
// microsecond (the limiter used on its own around in-memory work): its
// variability is a number, so round trips keep their size.
func TestWindowSubMicrosecond(t *testing.T) {
	var w window
	for i := range 10 {
		w.add(Sample{RTT: 100 + time.Duration(i), Inflight: 1, Outcome: Success, At: t0.Add(time.Duration(i) * time.Microsecond)}, 10, 1)
	}
	cv := w.close(t0.Add(time.Millisecond)).cv()
	assert.False(t, math.IsNaN(cv))
	assert.Equal(t, minTripSamples, samplesNeeded(cv))
}

// TestAIMDProbeJudgedByItsOwnNoise: whether a probe that reads below the
// baseline drained a queue is judged by the noise of the probe's own
// calls, when they are quiet. The round trips' variability is a poor
// judge there: at a queue it is the queue's (calls wait for different
// times), not the downstream's. Judged by it, a probe of a steady
// downstream that read 13 % below a baseline set by a queue at a cold
// start was taken for noise, and at 5× over real gRPC the limit sat at
// 1.5·C for good, with p50 1.68·S.
func TestAIMDProbeJudgedByItsOwnNoise(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name   string
		spread time.Duration // the probe's calls take 10 ms ± spread
		want   time.Duration
	}{
		{"quiet probe below the baseline: learned", 0, 10 * ms},
		{"noisy probe below the baseline: kept", 9 * ms, 12 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newWarmAIMD(t)
			at := t0
			// Round trips at a queue: 9 and 15 ms, a mean of 12 ms and a
			// coefficient of variation of 0.25, quiet by quietCV.
			queued := func(inflight int) {
				for range 10 {
					feed(a, spreadPair(at, 12*ms, 3*ms, inflight))
				}
				at = at.Add(15 * ms)
			}
			for range smoothWarmup {
				queued(30)
			}
			a.base.queued = true
			require.InDelta(t, 12*ms, a.base.rtt, float64(ms/10))
			require.InDelta(t, 0.25, a.cv, 0.01)
			for i := 0; !a.base.probing && i < 100; i++ {
				queued(a.Limit())
			}
			require.True(t, a.base.probing, "first probe")
			at = a.base.probeFrom
			// The calls admitted under the probe limit, then one call
			// after the collection time, which ends the probe.
			for i := 0; a.base.probing && i < 100; i++ {
				feed(a, spreadPair(at, 10*ms, tt.spread, 5))
			}
			require.True(t, a.base.collecting)
			feed(a, []Sample{{RTT: ms, Inflight: 5, Outcome: Success, At: at.Add(200 * ms)}})
			require.False(t, a.base.collecting)
			assert.InDelta(t, tt.want, a.base.rtt, float64(ms/10))
		})
	}
}

// TestAIMDNoisyLowProbeConfirmed: with noisy RTTs a probe's mean of a
// few dozen calls can read far below the service time by chance, and a
// baseline that follows it makes every round trip late. After the first
// probe, such a reading is therefore only believed when the next probe,
// deep, confirms it. Believed at once, one probe of a 60 s run at 2× with
// exponential service times (virtual time, FIFO, seed 3) read 0.37·S,
// the baseline went to 0.54·S and the limit fell from 29 to 3 for ten
// seconds: 82.6 % of ideal over the run.
func TestAIMDNoisyLowProbeConfirmed(t *testing.T) {
	ms := time.Millisecond
	a := newWarmAIMD(t)
	at := t0
	// noisy feeds calls of mean ± spread, pairs of them, n in all.
	noisy := func(mean, spread time.Duration, n, inflight int) {
		for range n / 2 {
			feed(a, spreadPair(at, mean, spread, inflight))
		}
		at = at.Add(mean + spread)
	}
	// probe runs loaded round trips 20 % above the baseline (neither
	// late nor confirming it) until a probe starts, then the probe's
	// calls, of mean ± spread, then one call that ends the collection.
	probe := func(mean, spread time.Duration) (deep bool) {
		for i := 0; !a.base.probing && i < 1000; i++ {
			noisy(a.base.rtt*6/5, a.base.rtt/2, 100, a.Limit())
		}
		require.True(t, a.base.probing)
		deep = a.base.deep
		at = a.base.probeFrom
		for i := 0; a.base.probing && i < 1000; i++ {
			noisy(mean, spread, 2, 5)
		}
		require.True(t, a.base.collecting)
		feed(a, []Sample{{RTT: ms, Inflight: 5, Outcome: Success, At: at.Add(time.Second)}})
		require.False(t, a.base.collecting)
		at = at.Add(time.Second)
		return deep
	}
	for range smoothWarmup {
		noisy(10*ms, 9*ms, 100, 5)
	}
	probe(10*ms, 9*ms) // the first probe reads the service time
	require.InDelta(t, 10*ms, a.base.rtt, float64(ms/2))
	base := a.base.rtt

	// A probe reads 4 ms, far below its noise: not believed yet.
	assert.False(t, probe(4*ms, 2*ms), "a shallow probe")
	assert.Equal(t, base, a.base.rtt, "a low noisy reading alone moves nothing")
	// The next probe goes deep and reads the service time: the low
	// reading was chance.
	assert.True(t, probe(10*ms, 9*ms), "a deep probe checks it")
	assert.Equal(t, base, a.base.rtt)

	// Two low readings in a row: the downstream did get faster.
	probe(4*ms, 2*ms)
	assert.True(t, probe(4*ms, 2*ms))
	assert.Less(t, a.base.rtt, 6*ms, "confirmed")
}
