package limiter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVegas(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		samples []Sample
		want    []int
	}{
		{"first sample sets the no-load rtt",
			[]Sample{call(10*ms, 20, Success)}, []int{20}},
		{"no queue grows by beta",
			[]Sample{call(10*ms, 20, Success), call(10*ms, 20, Success)}, []int{20, 26}},
		{"a long queue shrinks by log10",
			// queue = ceil(20 × (1 − 10/20)) = 10 > 6
			[]Sample{call(10*ms, 20, Success), call(20*ms, 20, Success)}, []int{20, 19}},
		{"a short queue grows by log10",
			// queue = ceil(20 × (1 − 10/11)) = 2 ... > 1 and < 3
			[]Sample{call(10*ms, 20, Success), call(11*ms, 20, Success)}, []int{20, 21}},
		{"a queue between alpha and beta changes nothing",
			// queue = ceil(20 × (1 − 10/12.5)) = 4
			[]Sample{call(10*ms, 20, Success), call(12500*time.Microsecond, 20, Success)}, []int{20, 20}},
		{"a drop shrinks by log10",
			[]Sample{call(10*ms, 20, Success), call(10*ms, 20, Dropped)}, []int{20, 19}},
		{"idle changes nothing",
			[]Sample{call(10*ms, 20, Success), call(10*ms, 9, Success)}, []int{20, 20}},
		{"a faster call lowers the no-load rtt without a change",
			[]Sample{call(10*ms, 20, Success), call(5*ms, 20, Success), call(10*ms, 20, Success)}, []int{20, 20, 19}},
		{"ignored and zero rtt are skipped",
			[]Sample{call(10*ms, 20, Ignored), call(0, 20, Success)}, []int{20, 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := newVegas(VegasConfig{})
			require.NoError(t, err)
			var got []int
			for _, s := range tt.samples {
				got = append(got, v.Update(s))
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestVegasProbeResetsNoLoad(t *testing.T) {
	v, err := newVegas(VegasConfig{InitialLimit: 10, ProbeMultiplier: 2})
	require.NoError(t, err)
	v.Update(call(10*time.Millisecond, 1, Success))
	// The downstream is now slower; within ProbeMultiplier × limit
	// samples the no-load rtt must follow it up.
	for range 2 * 10 {
		v.Update(call(30*time.Millisecond, 1, Success))
	}
	assert.Equal(t, 30*time.Millisecond, v.noLoad)
}

func TestVegasSmoothing(t *testing.T) {
	v, err := newVegas(VegasConfig{Smoothing: 0.5})
	require.NoError(t, err)
	v.Update(call(10*time.Millisecond, 20, Success))
	assert.Equal(t, 23, v.Update(call(10*time.Millisecond, 20, Success))) // 20 + (26−20)/2
}

func TestGradient2(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		samples []Sample
		want    []int
	}{
		{"steady rtt grows by smoothing × queue size",
			// 20 × 0.8 + (20 + 4) × 0.2 = 20.8, then 21.6
			[]Sample{call(10*ms, 20, Success), call(10*ms, 20, Success)}, []int{20, 21}},
		{"a slower rtt scales the limit by the gradient",
			// The idle first call only seeds the long rtt. Then long =
			// 15 ms and short = 20 ms: gradient 0.75, and
			// 20 × 0.8 + (20 × 0.75 + 4) × 0.2 = 19.8
			[]Sample{call(10*ms, 1, Success), call(20*ms, 20, Success)}, []int{20, 19}},
		{"a drop is the worst gradient",
			// 20 × 0.8 + (20 × 0.5 + 4) × 0.2 = 18.8
			[]Sample{call(10*ms, 20, Dropped)}, []int{18}},
		{"idle changes nothing",
			[]Sample{call(10*ms, 9, Success), call(100*ms, 9, Success)}, []int{20, 20}},
		{"ignored and zero rtt are skipped",
			[]Sample{call(10*ms, 20, Ignored), call(0, 20, Success)}, []int{20, 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := newGradient2(Gradient2Config{})
			require.NoError(t, err)
			var got []int
			for _, s := range tt.samples {
				got = append(got, g.Update(s))
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestGradient2LongRTT(t *testing.T) {
	ms := time.Millisecond
	g, err := newGradient2(Gradient2Config{LongWindow: 3})
	require.NoError(t, err)
	for _, rtt := range []time.Duration{10 * ms, 20 * ms, 30 * ms} {
		g.Update(call(rtt, 1, Success))
	}
	assert.Equal(t, 20*ms, g.longRTTAverage(), "plain mean while warming up")

	// After a long overload the long-term rtt sits far above a recovered
	// short-term one; it decays by 0.9 per sample, not by the slow EWMA.
	g, err = newGradient2(Gradient2Config{})
	require.NoError(t, err)
	for range gradient2Warmup {
		g.Update(call(100*ms, 1, Success))
	}
	g.Update(call(10*ms, 1, Success))
	// EWMA: 100 + (10 − 100) × 2/601, then × 0.9
	assert.InDelta(t, float64(0.9*(100-90*2.0/601)*float64(ms)), float64(g.longRTTAverage()), float64(time.Microsecond))
}

func TestDelayConfigErrors(t *testing.T) {
	_, err := newVegas(VegasConfig{Alpha: 5, Beta: 4, Smoothing: 2, ProbeMultiplier: -1})
	require.Error(t, err)
	for _, w := range []string{
		"VegasConfig.Beta is 4, must be > Alpha (5)",
		"VegasConfig.Smoothing is 2, must be in (0, 1]",
		"VegasConfig.ProbeMultiplier is -1, must be >= 1",
	} {
		assert.ErrorContains(t, err, w)
	}
	_, err = newGradient2(Gradient2Config{QueueSize: -1, Smoothing: -0.1, LongWindow: -5, MinLimit: 300})
	require.Error(t, err)
	for _, w := range []string{
		"Gradient2Config.QueueSize is -1, must be >= 0",
		"Gradient2Config.Smoothing is -0.1, must be in (0, 1]",
		"Gradient2Config.LongWindow is -5, must be >= 1",
		"Gradient2Config.InitialLimit is 20, must be in [MinLimit, MaxLimit] = [300, 200]",
	} {
		assert.ErrorContains(t, err, w)
	}
}

func TestWindowCloses(t *testing.T) {
	ms := time.Millisecond
	var w window
	var got []trip
	add := func(s Sample) {
		if w.add(s, 3) {
			got = append(got, w.close(s.At))
		}
	}

	open := t0
	add(Sample{RTT: 10 * ms, Inflight: 4, Outcome: Success, At: open.Add(10 * ms)})
	add(Sample{RTT: 20 * ms, Inflight: 6, Outcome: Success, At: open.Add(15 * ms)})
	assert.Empty(t, got, "two samples are not enough")
	add(Sample{RTT: 50 * ms, Inflight: 9, Outcome: Dropped, At: open.Add(20 * ms)})
	require.Len(t, got, 1)
	rt := got[0]
	assert.Equal(t, [4]int{3, 1, 9, 19}, [4]int{rt.n, rt.drops, rt.maxIn, rt.sumIn}, "calls, drops, most and sum in flight")
	assert.Equal(t, [3]time.Duration{30 * ms, 50 * ms, 50 * ms}, [3]time.Duration{rt.sumRTT, rt.maxRTT, rt.dropRTT},
		"summed RTTs of successes, longest RTT, summed RTTs of drops")
	mean, variance, ok := rt.moments()
	require.True(t, ok)
	assert.Equal(t, [2]float64{15_000, 50_000_000}, [2]float64{mean, variance}, "mean and unbiased variance of the successes (µs, µs²)")
	assert.True(t, rt.opened.Equal(open), "opened %v", rt.opened)

	// The next window opened at 20 ms; a call that started before then
	// cannot close it however many samples come in.
	for range 5 {
		add(Sample{RTT: 30 * ms, Inflight: 2, Outcome: Success, At: open.Add(40 * ms)})
	}
	assert.Len(t, got, 1)
	add(Sample{RTT: 5 * ms, Inflight: 2, Outcome: Success, At: open.Add(41 * ms)})
	require.Len(t, got, 2)
	assert.Zero(t, got[1].drops)
}
