package limiter

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/fielderr"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// seedAIMD returns an AIMD with seed 001's per-call semantics.
func seedAIMD(t *testing.T, c AIMDConfig) *aimd {
	t.Helper()
	c.PerCall = true
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	a, err := newAIMD(c)
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
			a, err := newAIMD(tt.cfg)
			require.Error(t, err)
			assert.Nil(t, a)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
			var ce *fielderr.Error
			assert.ErrorAs(t, err, &ce)
		})
	}
}

func TestAIMDDefaults(t *testing.T) {
	a, err := newAIMD(AIMDConfig{})
	require.NoError(t, err)
	assert.Equal(t, AIMDConfig{
		InitialLimit: defaultAIMDInitialLimit,
		MinLimit:     defaultAIMDMinLimit,
		MaxLimit:     defaultAIMDMaxLimit,
		BackoffRatio: defaultAIMDBackoffRatio,
	}, a.cfg)
	assert.Equal(t, 1000, a.Limit(), "admits every call until the first returns")
	a, err = newAIMD(AIMDConfig{InitialLimit: 20})
	require.NoError(t, err)
	assert.Equal(t, 20, a.Limit(), "an explicit InitialLimit starts there")

	// Defaults bend around explicit bounds instead of contradicting them.
	a, err = newAIMD(AIMDConfig{MaxLimit: 8})
	require.NoError(t, err)
	assert.Equal(t, 8, a.Limit())
	a, err = newAIMD(AIMDConfig{MinLimit: 2000})
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

func feed(a Algorithm, samples []Sample) int {
	n := a.Limit()
	for _, s := range samples {
		n = a.Update(s)
	}
	return n
}

// TestAIMDRoundTrips checks that with an explicit Timeout AIMD applies the
// classic rule once per round trip: a whole round trip of drops backs off
// once, calls slower than Timeout are drops, and stragglers from before a
// round trip opened cannot close it.
func TestAIMDRoundTrips(t *testing.T) {
	ms := time.Millisecond
	a, err := newAIMD(AIMDConfig{InitialLimit: 20, Timeout: 100 * ms})
	require.NoError(t, err)
	at := t0
	require.Equal(t, 21, feed(a, roundTrip(at, 10*ms, 10, 20, Success)), "a loaded round trip adds one")
	at = at.Add(10 * ms)
	assert.Equal(t, 18, feed(a, roundTrip(at, 10*ms, 10, 21, Dropped)), "drops back off once: 21 × 0.9")
	at = at.Add(10 * ms)
	assert.Equal(t, 17, feed(a, roundTrip(at, 200*ms, 10, 2, Success)), "slower than Timeout: 18.9 × 0.9")
	at = at.Add(200 * ms)
	assert.Equal(t, 17, feed(a, roundTrip(at.Add(-50*ms), 55*ms, 30, 17, Dropped)), "calls that started before the round trip opened")
	// The first call of its own closes it, with the drops: 30 of its 31
	// calls were dropped, so it backs off by 30/31 of 10 % and, loaded,
	// grows by one: 17.01 × 0.903 + 1 = 16.4.
	assert.Equal(t, 16, feed(a, roundTrip(at, 10*ms, 1, 17, Success)))
}

// TestAIMDDropShare checks DCTCP's rule in the classic AIMD: a round trip
// backs off in proportion to the share of its calls that were dropped.
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
			a, err := newAIMD(AIMDConfig{InitialLimit: 40, Timeout: time.Second})
			require.NoError(t, err)
			trip := roundTrip(t0, 10*ms, 10, 40, Success)
			for i := range tt.drops {
				trip[i].Outcome = Dropped
			}
			feed(a, trip)
			assert.InDelta(t, tt.want, a.classic.limit, 1e-9)
		})
	}
}

// TestAIMDUntimed checks the classic AIMD on calls without an RTT
// (streams): a drop backs off, a loaded success adds one per limit's worth
// of successes, a light one or an ignored one nothing.
func TestAIMDUntimed(t *testing.T) {
	tests := []struct {
		name    string
		samples []Sample
		want    []float64
	}{
		{"loaded success adds 1/limit", []Sample{call(UntimedRTT, 10, Success)}, []float64{10.1}},
		{"light success changes nothing", []Sample{call(UntimedRTT, 2, Success)}, []float64{10}},
		{"drop backs off", []Sample{call(UntimedRTT, 10, Dropped), call(UntimedRTT, 10, Dropped)}, []float64{9, 8.1}},
		{"ignored changes nothing", []Sample{call(UntimedRTT, 10, Ignored)}, []float64{10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := newAIMD(AIMDConfig{InitialLimit: 10, Timeout: time.Second})
			require.NoError(t, err)
			var got []float64
			for _, s := range tt.samples {
				a.Update(s)
				got = append(got, a.classic.limit)
			}
			assert.InDeltaSlice(t, tt.want, got, 1e-9)
		})
	}
}

func TestFixed(t *testing.T) {
	f, err := newFixed(7)
	require.NoError(t, err)
	assert.Equal(t, 7, f.Update(call(time.Hour, 100, Dropped)))
	assert.Equal(t, 7, f.Limit())

	for _, n := range []int{0, -1, MaxLimit + 1} {
		_, err := newFixed(n)
		assert.ErrorContains(t, err, "limiter: FixedConfig.Limit is")
		assert.ErrorContains(t, err, "must be in [1, 1048576]")
	}
}

// TestAIMDUntimedPushback is the client that its server pushes back: ten
// untimed drops, then ten loaded successes, must not leave the limit above
// where it started.
func TestAIMDUntimedPushback(t *testing.T) {
	a, err := newAIMD(AIMDConfig{})
	require.NoError(t, err)
	for range 10 {
		a.Update(call(UntimedRTT, 20, Dropped))
	}
	assert.Equal(t, 6, a.Limit()) // 20 × 0.9^10
	for range 10 {
		a.Update(call(UntimedRTT, a.Limit(), Success))
	}
	assert.Less(t, a.Limit(), 20)
}

// TestUntimedDrops checks that every latency-based algorithm backs off on
// a drop without an RTT (a stream's), and ignores an untimed success.
func TestUntimedDrops(t *testing.T) {
	newVegas := func() Algorithm {
		v, err := newVegas(VegasConfig{InitialLimit: 20})
		require.NoError(t, err)
		return v
	}
	newGradient2 := func() Algorithm {
		g, err := newGradient2(Gradient2Config{InitialLimit: 20})
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
		w.add(Sample{RTT: 100 + time.Duration(i), Inflight: 1, Outcome: Success, At: t0.Add(time.Duration(i) * time.Microsecond)}, 10)
	}
	mean, variance, ok := w.close(t0.Add(time.Millisecond)).moments()
	require.True(t, ok)
	cv := math.Sqrt(variance) / mean
	assert.False(t, math.IsNaN(cv))
	assert.Equal(t, minTripSamples, samplesNeeded(cv))
}

// TestConfigNewErrors: a configuration out of range makes no Algorithm,
// not a nil pointer that a nil check would take for one.
func TestConfigNewErrors(t *testing.T) {
	for _, c := range []AlgorithmConfig{
		AIMDConfig{BackoffRatio: 2}, VegasConfig{Alpha: -1}, Gradient2Config{Smoothing: 2}, FixedConfig{Limit: 0},
	} {
		a, err := c.New()
		assert.Error(t, err, "%T", c)
		assert.True(t, a == nil, "%T made a non-nil Algorithm", c)
	}
	for _, c := range []AlgorithmConfig{AIMDConfig{}, VegasConfig{}, Gradient2Config{}, FixedConfig{Limit: 1}} {
		a, err := c.New()
		require.NoError(t, err, "%T", c)
		assert.NotNil(t, a)
	}
}
