package backend

import (
	"context"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// finishTimes starts n calls at once and returns when each ended, relative
// to the start.
func finishTimes(t *testing.T, b Backend, n int, ctx context.Context) []time.Duration {
	t.Helper()
	start := time.Now()
	out := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = b.Do(ctx)
			out[i] = time.Since(start)
		}()
		synctest.Wait() // arrive in order
	}
	wg.Wait()
	return out
}

func TestFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := NewFIFO(2, 10*time.Millisecond)
		require.NoError(t, err)
		ms := time.Millisecond
		assert.Equal(t, []time.Duration{10 * ms, 10 * ms, 20 * ms, 20 * ms, 30 * ms},
			finishTimes(t, b, 5, context.Background()), "two workers, FIFO")

		// A queued call whose context ends leaves the queue; a call in
		// service keeps its worker for the full service time.
		ctx, cancel := context.WithTimeout(context.Background(), 5*ms)
		defer cancel()
		assert.Equal(t, []time.Duration{10 * ms, 10 * ms, 5 * ms},
			finishTimes(t, b, 3, ctx))
		assert.Equal(t, []time.Duration{10 * ms}, finishTimes(t, b, 1, context.Background()),
			"the queue left no trace")

		require.NoError(t, b.SetCapacity(1))
		assert.Equal(t, 1, b.Capacity())
		assert.Equal(t, []time.Duration{10 * ms, 20 * ms}, finishTimes(t, b, 2, context.Background()))
	})
}

func TestProcessorSharing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := NewProcessorSharing(2, 10*time.Millisecond)
		require.NoError(t, err)
		ms := time.Millisecond
		assert.Equal(t, []time.Duration{10 * ms, 10 * ms}, finishTimes(t, b, 2, context.Background()),
			"within capacity: full speed")
		assert.Equal(t, []time.Duration{20 * ms, 20 * ms, 20 * ms, 20 * ms}, finishTimes(t, b, 4, context.Background()),
			"twice the capacity: half speed for everyone")

		require.NoError(t, b.SetCapacity(4))
		assert.Equal(t, 4, b.Capacity())
		assert.Equal(t, []time.Duration{10 * ms, 10 * ms, 10 * ms, 10 * ms}, finishTimes(t, b, 4, context.Background()))

		ctx, cancel := context.WithTimeout(context.Background(), 5*ms)
		defer cancel()
		for _, d := range finishTimes(t, b, 8, ctx) {
			assert.Equal(t, 5*ms, d, "abandoned at the deadline")
		}
		assert.Equal(t, []time.Duration{10 * ms}, finishTimes(t, b, 1, context.Background()),
			"abandoned calls free their share")
	})
}

// DoFor serves calls of different costs from one pool: a fast call queues
// behind a slow one in FIFO and shares the processor with it in PS.
func TestDoFor(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		kind string
		want []time.Duration // slow (40 ms), then fast (5 ms), one worker
	}{
		{"fifo", []time.Duration{40 * ms, 45 * ms}},
		{"ps", []time.Duration{45 * ms, 10 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, err := New(tt.kind, 1, 10*ms, Constant, 1)
				require.NoError(t, err)
				start := time.Now()
				got := make([]time.Duration, 2)
				var wg sync.WaitGroup
				for i, d := range []time.Duration{40 * ms, 5 * ms} {
					wg.Go(func() {
						assert.NoError(t, b.DoFor(context.Background(), d))
						got[i] = time.Since(start)
					})
					synctest.Wait() // arrive in order
				}
				wg.Wait()
				assert.Equal(t, tt.want, got)
				assert.EqualError(t, b.DoFor(context.Background(), 0),
					"backend: a call's service time is 0s, must be positive")
			})
		})
	}
}

func TestDistributions(t *testing.T) {
	cvs := map[Dist]float64{Constant: 0, Uniform: 0.29, Exponential: 1, Bimodal: 2, Lognormal: 1.8, TwoMethods: 1.5}
	for _, d := range []Dist{Constant, Uniform, Exponential, Bimodal, Lognormal, TwoMethods, Pareto} {
		s := newSampler(10*time.Millisecond, d, 1)
		var sum time.Duration
		var sumSq float64
		n := 100000
		for range n {
			x := s.next()
			sumSq += x.Seconds() * x.Seconds()
			require.GreaterOrEqual(t, x, time.Duration(0))
			switch d {
			case Uniform:
				require.GreaterOrEqual(t, x, 5*time.Millisecond)
				require.Less(t, x, 15*time.Millisecond)
			case Pareto:
				require.GreaterOrEqual(t, x, 10*time.Millisecond/3)
			}
			sum += x
		}
		mean := sum.Seconds() / float64(n)
		if d == Pareto {
			// Without a variance the sample mean converges as n^(-1/3):
			// about 2 % at this n.
			assert.InDelta(t, 0.010, mean, 0.0005, d.String())
		} else {
			assert.InDelta(t, 0.010, mean, 0.0003, d.String())
			assert.InDelta(t, cvs[d], math.Sqrt(max(sumSq/float64(n)-mean*mean, 0))/mean, 0.15, d.String())
		}
		parsed, err := ParseDist(d.String())
		require.NoError(t, err)
		assert.Equal(t, d, parsed)
	}
	_, err := ParseDist("gamma")
	assert.EqualError(t, err, `backend: distribution must be "constant", "uniform", "exponential", "bimodal", "lognormal", "methods" or "pareto", got "gamma"`)
}

func TestBadConfig(t *testing.T) {
	_, err := New("fifo", 0, time.Millisecond, Constant, 1)
	assert.EqualError(t, err, "backend: capacity is 0, must be at least 1")
	_, err = New("ps", 1, 0, Constant, 1)
	assert.EqualError(t, err, "backend: service time is 0s, must be positive")
	_, err = New("lifo", 1, time.Millisecond, Constant, 1)
	assert.ErrorIs(t, err, ErrUnknownKind)
	b, err := New("fifo", 1, time.Millisecond, Constant, 1)
	require.NoError(t, err)
	assert.Error(t, b.SetCapacity(-1))
	assert.Equal(t, 1, b.Capacity())
}

// A late timer must not cost the backend capacity: on a loaded machine
// timers fire a fraction of a millisecond late, and a backend that counted
// that lateness as work would serve less than C/S, so no protection could
// reach the "ideal" goodput the benchmarks divide by.
func TestLateTimersKeepCapacity(t *testing.T) {
	const late = time.Millisecond
	ms := time.Millisecond
	t.Run("fifo", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, err := NewFIFO(1, 10*ms)
			require.NoError(t, err)
			b.late = late
			got := finishTimes(t, b, 10, context.Background())
			// Each call starts when the one before was due to end, so ten
			// calls take ten service times and the last timer's lateness,
			// not ten latenesses.
			assert.Equal(t, 100*ms+late, got[9])
			assert.Equal(t, 10*ms+late, got[0])

			// A call that arrives after the worker was due to be free, but
			// before its late timer fired, queues for a moment; it is not
			// served before it arrived.
			start := time.Now()
			var wg sync.WaitGroup
			var second time.Duration
			wg.Go(func() { _ = b.Do(context.Background()) })
			time.Sleep(10*ms + late/2)
			wg.Go(func() {
				_ = b.Do(context.Background())
				second = time.Since(start)
			})
			wg.Wait()
			assert.Equal(t, 20*ms+late/2+late, second)
		})
	})
	t.Run("ps", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, err := NewProcessorSharing(1, 10*ms)
			require.NoError(t, err)
			b.late = late
			start := time.Now()
			var wg sync.WaitGroup
			ends := make([]time.Duration, 2)
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = b.Do(context.Background())
					ends[i] = time.Since(start)
				}()
				time.Sleep(5 * ms)
			}
			wg.Wait()
			// Exact: the first call runs alone for 5 ms, shares until it
			// ends at 15 ms; the second then runs alone and ends at 20 ms.
			// The timers fire late, but the work done is counted as of
			// when each call was due to finish.
			assert.Equal(t, 15*ms+late, ends[0])
			assert.Equal(t, 20*ms+late, ends[1])
		})
	})
}

// TestSeedDrawsServiceTimes: runs of different seeds differ in their
// service times, not only in their arrivals; the same seed repeats them.
func TestSeedDrawsServiceTimes(t *testing.T) {
	draw := func(seed uint64) []time.Duration {
		s := newSampler(10*time.Millisecond, Exponential, seed)
		out := make([]time.Duration, 8)
		for i := range out {
			out[i] = s.next()
		}
		return out
	}
	tests := []struct {
		name string
		a, b uint64
		same bool
	}{
		{"same seed", 1, 1, true},
		{"seeds 1 and 2", 1, 2, false},
		{"seeds 2 and 3", 2, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.same {
				assert.Equal(t, draw(tt.a), draw(tt.b))
			} else {
				assert.NotEqual(t, draw(tt.a), draw(tt.b))
			}
		})
	}
}
