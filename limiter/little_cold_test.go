package limiter_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/limitload"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/limiter"
)

// TestFirstProbe: a limiter that starts under 2× overload admits every
// call until the first returns (so that a fresh process in front of a
// healthy downstream refuses nothing), slow-starts from what was then in
// flight, and its first probe drains the queue that start made. The start
// costs the calls admitted in its first round trip: with processor
// sharing at S = 100 ms they share the backend with 3–4 C others, which
// the p99 over the first 6 s shows, and the probes that bring b down from
// what the start measured, or confirm it at half the depth, cost goodput:
// with FIFO at S = 100 ms the start's b is right, and the confirming probe
// costs 1.5–4 % of the first 6 s (none before the start's b needed one).
// bench/RESULTS.md has the numbers against the previous start from a
// limit of 20.
func TestFirstProbe(t *testing.T) {
	if testing.Short() || limiter.RaceEnabled {
		t.Skip("make test runs it without -race")
	}
	const c = 16
	cases := []struct {
		kind       string
		s          time.Duration
		skip       time.Duration // goodput counts the calls that arrive after it
		minGoodput float64       // share of ideal
		from, to   time.Duration // the window whose p99 is measured
		maxP99     float64       // in service times
	}{
		{"fifo", 100 * time.Millisecond, 0, 0.955, 0, 6 * time.Second, 2.75},
		{"fifo", 100 * time.Millisecond, time.Second, 0.96, 0, 6 * time.Second, 2.75},
		{"ps", 100 * time.Millisecond, time.Second, 0.90, 0, 6 * time.Second, 4},
		{"ps", 20 * time.Millisecond, 0, 0.98, time.Second, 3 * time.Second, 2.5},
	}
	for _, tc := range cases {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/%v/after%v/seed%d", tc.kind, tc.s, tc.skip, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					rep, _ := runColdStart(t, tc.kind, c, tc.s, backend.Constant, seed)
					rate := float64(c) / tc.s.Seconds()
					p := rep.Phase(0, tc.skip)
					goodput := p.Goodput / min(p.Offered, rate)
					p99 := float64(loadgen.Summarize(rep.Calls, 10*tc.s, tc.from, tc.to).P99) / float64(tc.s)
					t.Logf("goodput %5.1f%% of ideal, p99 %.2f S", 100*goodput, p99)
					assert.GreaterOrEqual(t, goodput, tc.minGoodput, "goodput / ideal")
					assert.LessOrEqual(t, p99, tc.maxP99, "p99 in service times")
				})
			})
		}
	}
}

// TestColdNoisyStart: a limiter that starts under 2× overload in front of
// exponentially distributed service times (coefficient of variation 1)
// learns its baseline from a first probe of a few dozen noisy calls. Taken
// as it was, that probe's mean ran 0.6–0.87·S in some runs, every round
// trip after was late, and the limit fell to its floor: 65.8 % of ideal in
// one of these seeds before the first probe came early, 29–77 % in five
// of them with the early probe alone (and over real gRPC, 2 of 8 runs
// kept 46–55 % before, 2 of 3 kept 25–48 % with the early probe alone).
// A noisy probe's mean is now raised by two standard errors before it
// replaces the baseline.
//
// With processor sharing a queue slows every call alike, so noisy RTTs
// stay noisy under load and the first probe cannot tell the queue from
// the noise: the limit must not be far above the capacity when it comes.
// Slow start once took it to 109 before the first baseline (C = 16), and
// round trips whose slow calls came with deadline overruns were never
// late: the limit stayed at 78 and p99 at 9.7·S, near the deadline.
// When the first probe was not adopted the warm-up went on after it and
// moved the baseline up with the queue: p99 7.0–7.9·S. (Late round trips
// that back off only to the threshold hold the limit a little higher, and
// with it this p99: 6.6–7.1·S, where a full 10 % back-off gave 6.5–6.8·S.)
// The bar is the seeds' median p99, with a looser one for any seed: one
// seed's moves by tenths of S with any change to the start.
func TestColdNoisyStart(t *testing.T) {
	if testing.Short() || limiter.RaceEnabled {
		t.Skip("make test runs it without -race")
	}
	const c, s, seeds = 16, 20 * time.Millisecond, 8
	cases := []struct {
		kind      string
		medianP99 float64 // over the seeds, in service times, arrivals from 3 s to 6 s
		maxP99    float64 // of any seed
		maxLimit  int     // at the end, one sample of a noisy limit; the runaways above held 78 and 109
	}{
		{kind: "fifo", medianP99: 5.5, maxP99: 6, maxLimit: 9 * c / 4},
		{kind: "ps", medianP99: 7, maxP99: 8, maxLimit: 9 * c / 4},
	}
	for _, tc := range cases {
		var p99s []float64
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", tc.kind, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					rep, lim := runColdStart(t, tc.kind, c, s, backend.Exponential, seed)
					rate := float64(c) / s.Seconds()
					goodput := rep.Phase(0, time.Second).Goodput / rate
					p99 := float64(loadgen.Summarize(rep.Calls, 10*s, 3*time.Second, 6*time.Second).P99) / float64(s)
					t.Logf("goodput %5.1f%% of ideal, p99 %.2f S, limit %d", 100*goodput, p99, lim.Limit())
					p99s = append(p99s, p99)
					assert.GreaterOrEqual(t, goodput, 0.9, "goodput / ideal")
					assert.LessOrEqual(t, p99, tc.maxP99, "p99 in service times")
					assert.LessOrEqual(t, lim.Limit(), tc.maxLimit, "limit at the end")
					assert.Zero(t, lim.Inflight(), "in flight after the run")
				})
			})
		}
		if len(p99s) == seeds {
			// One seed's p99 moves by a few tenths of S with any change
			// to the start; the seeds' median is the protection.
			slices.Sort(p99s)
			median := (p99s[seeds/2-1] + p99s[seeds/2]) / 2
			assert.LessOrEqual(t, median, tc.medianP99, "%s: median p99 of %d seeds, in service times", tc.kind, seeds)
		}
	}
}

// TestColdOverload: a fresh limiter under 2× and 5× overload from the
// first call, on every latency shape and both backends, keeps 85 % of the
// ideal goodput over its first 3 s (the calls that arrive after
// 0.5 s, as the overload matrix counts them), the median of three seeds.
// The start admits every call until the first returns, so with processor
// sharing its calls meet a queue of unknown depth; probes at halving
// depths take b down to what the downstream does without one.
func TestColdOverload(t *testing.T) {
	if testing.Short() || limiter.RaceEnabled {
		t.Skip("make test runs it without -race")
	}
	const c, s = 16, 20 * time.Millisecond
	for _, kind := range []string{"fifo", "ps"} {
		for _, d := range []backend.Dist{backend.Constant, backend.Exponential, backend.Bimodal} {
			for _, load := range []float64{2, 5} {
				t.Run(fmt.Sprintf("%s/%v/%gx", kind, d, load), func(t *testing.T) {
					var goods []float64
					for seed := uint64(1); seed <= 3; seed++ {
						synctest.Test(t, func(t *testing.T) {
							lim, be := newLimitedBackend(t, kind, c, s, d, seed)
							rate := float64(c) / s.Seconds()
							rep := runLoad(t, lim, be, s, load*rate, 3*time.Second, seed)
							p := rep.Phase(0, 500*time.Millisecond)
							goods = append(goods, p.Goodput/rate)
						})
					}
					slices.Sort(goods)
					t.Logf("goodput / ideal %.3f", goods)
					assert.GreaterOrEqual(t, goods[1], 0.85, "median goodput / ideal")
				})
			}
		}
	}
}

// TestColdFlood: with processor sharing at 5× from the first call, C = 64
// and S = 100 ms, nothing returns until the start has admitted MaxLimit
// calls, and each then shares the backend with a thousand others and
// overruns its 1 s deadline. The round trips that follow are mostly drops
// granted while the flood rose, so their mean in flight is half the
// limit: they must still count as full, and end without waiting a
// deadline for a call of their own. The median of three seeds keeps 70 %
// of the ideal goodput from the first second to the sixth.
func TestColdFlood(t *testing.T) {
	if testing.Short() || limiter.RaceEnabled {
		t.Skip("make test runs it without -race")
	}
	const c, s = 64, 100 * time.Millisecond
	var goods []float64
	for seed := uint64(1); seed <= 3; seed++ {
		synctest.Test(t, func(t *testing.T) {
			lim, be := newLimitedBackend(t, "ps", c, s, backend.Constant, seed)
			rate := float64(c) / s.Seconds()
			rep := runLoad(t, lim, be, s, 5*rate, 6*time.Second, seed)
			goods = append(goods, rep.Phase(0, time.Second).Goodput/rate)
		})
	}
	slices.Sort(goods)
	t.Logf("goodput / ideal %.3f", goods)
	assert.GreaterOrEqual(t, goods[1], 0.7, "median goodput / ideal")
}

// TestColdProbeAtStartDepth: with processor sharing at 3× from the first
// call the start's b holds a queue, and c = m·b/r, by Little's law, is
// about the depth the start's calls met: the first probe, at 0.9·c, meets
// the same queue and agrees with b. Taken as confirmation it held the limit
// at 2.5–5.5·C for good in four of these six seeds (p99 as many S). An
// unconfirmed b is confirmed only by a shallower probe.
func TestColdProbeAtStartDepth(t *testing.T) {
	if testing.Short() || limiter.RaceEnabled {
		t.Skip("make test runs it without -race")
	}
	const c, s = 16, 20 * time.Millisecond
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim, be := newLimitedBackend(t, "ps", c, s, backend.Constant, seed)
				runLoad(t, lim, be, s, 3*float64(c)/s.Seconds(), 3*time.Second, seed)
				assert.LessOrEqual(t, lim.Limit(), 2*c, "limit at the end")
			})
		})
	}
}

// runColdStart runs 6 s of Poisson arrivals at 2× the capacity of a
// backend of c workers with service time s, from the first call, through a
// default limiter.Limiter. It must run inside a synctest bubble.
func runColdStart(t *testing.T, kind string, c int, s time.Duration, dist backend.Dist, seed uint64) (*loadgen.Report, *limiter.Limiter) {
	t.Helper()
	lim, be := newLimitedBackend(t, kind, c, s, dist, seed)
	return runLoad(t, lim, be, s, 2*float64(c)/s.Seconds(), 6*time.Second, seed), lim
}

// newLimitedBackend returns a default limiter.Limiter and, for it to protect, a
// backend of c workers with service times of mean s drawn by seed.
func newLimitedBackend(t *testing.T, kind string, c int, s time.Duration, dist backend.Dist, seed uint64) (*limiter.Limiter, backend.Backend) {
	t.Helper()
	be, err := backend.New(kind, c, s, dist, seed)
	require.NoError(t, err)
	lim, err := limiter.New()
	require.NoError(t, err)
	return lim, be
}

// TestProbeWithoutBaseline: with noisy RTTs slow start ends before any
// round trip has had the samples to set a baseline (see blindLocked), so
// the first probe may come first. Its reading is then the baseline. Taken
// for nothing, it left the baseline unset, and a limiter without one
// probed again at the end of every full round trip, turning calls away at
// half load: 5 and 10 probes in the first 2 s of seeds 1 and 2.
func TestProbeWithoutBaseline(t *testing.T) {
	const c, s = 64, 10 * time.Millisecond
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim, be := newLimitedBackend(t, "fifo", c, s, backend.Exponential, seed)
				runLoad(t, lim, be, s, 0.5*float64(c)/s.Seconds(), 2*time.Second, seed)
				probes, baseline := limiter.ProbeState(lim)
				assert.Equal(t, 1, probes, "probes in 2 s")
				// 16 exponential times: the mean is known within 3
				// standard errors, 0.75·S.
				assert.InDelta(t, 1, float64(baseline)/float64(s), 0.75, "no-load RTT in service times")
			})
		})
	}
}

// TestColdStartLongTail: a fresh limiter in front of a healthy downstream
// of 64 workers and S = 100 ms at half load. The start's probe waits for
// its slowest call, seconds on a long tail; its limit held what the first
// return found, about 20, meanwhile, and refused 27-41 % of the calls in
// the first 3 s (median of three seeds). It keeps growing now; what it
// still refuses (1-6 %) are bursts above the limit before the first round
// trip of 256 calls, about 0.9 s at this rate, raises it.
func TestColdStartLongTail(t *testing.T) {
	if testing.Short() || limiter.RaceEnabled {
		t.Skip("make test runs it without -race")
	}
	const c, s = 64, 100 * time.Millisecond
	for _, d := range []backend.Dist{backend.Bimodal, backend.Lognormal, backend.TwoMethods} {
		t.Run(d.String(), func(t *testing.T) {
			assert.LessOrEqual(t, medianColdRejected(t, c, s, d, 0.5), 0.08, "median share of calls rejected")
		})
	}
}

// medianColdRejected is the median over three seeds of the share of calls
// a fresh limiter rejects in its first 3 s, in front of a FIFO downstream
// of c workers and service time s at load × its capacity.
func medianColdRejected(t *testing.T, c int, s time.Duration, d backend.Dist, load float64) float64 {
	t.Helper()
	var rejected []float64
	for seed := uint64(1); seed <= 3; seed++ {
		synctest.Test(t, func(t *testing.T) {
			lim, be := newLimitedBackend(t, "fifo", c, s, d, seed)
			rep := runLoad(t, lim, be, s, load*float64(c)/s.Seconds(), 3*time.Second, seed)
			p := rep.Phase(0, 0)
			rejected = append(rejected, float64(p.Rejected)/float64(p.Calls))
		})
	}
	slices.Sort(rejected)
	t.Logf("rejected %.4f", rejected)
	return rejected[1]
}

// TestColdStartRamp: a fresh limiter in front of a healthy downstream of
// 64 workers and S = 100 ms, while its load ramps up to 0.5× or 0.8×. On
// exponential times and with two methods the first call returns within
// milliseconds, with a few calls in flight: the start's limit is then
// about 20, and the load must outgrow it. Grown by one per success whose
// grant found it 90 % full, it grew only once calls were about to be
// refused: 1.3–5.4 % of the first 3 s (median of three seeds). From half
// full it keeps ahead of the ramp.
func TestColdStartRamp(t *testing.T) {
	if testing.Short() || limiter.RaceEnabled {
		t.Skip("make test runs it without -race")
	}
	const c, s = 64, 100 * time.Millisecond
	tests := []struct {
		dist        backend.Dist
		load        float64
		maxRejected float64 // median of three seeds
	}{
		{backend.Exponential, 0.5, 0.005},
		{backend.Exponential, 0.8, 0.02},
		{backend.TwoMethods, 0.5, 0.01},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%.1fx", tt.dist, tt.load), func(t *testing.T) {
			assert.LessOrEqual(t, medianColdRejected(t, c, s, tt.dist, tt.load), tt.maxRejected, "median share of calls rejected")
		})
	}
}

// TestColdStartRefusesNothing: a fresh default limiter.Limiter in front of a
// healthy downstream (room for every call) admits what arrives, however
// much arrives at once. Started at a limit of 20, it refused 180 of a
// burst of 200 and then a tenth of looping callers' calls.
func TestColdStartRefusesNothing(t *testing.T) {
	const s = 20 * time.Millisecond
	tests := []struct {
		name    string
		dist    backend.Dist
		callers int
		loops   time.Duration // how long each caller keeps calling; 0 calls once
	}{
		{"a burst of 200", backend.Constant, 200, 0},
		{"200 callers for 2 s", backend.Constant, 200, 2 * time.Second},
		{"200 callers for 2 s, cache-like times", backend.Bimodal, 200, 2 * time.Second},
		{"500 callers for 2 s, noisy times", backend.Exponential, 500, 2 * time.Second},
		{"30 callers for 2 s", backend.Constant, 30, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				be, err := backend.New("fifo", 10*tt.callers, s, tt.dist, 1)
				require.NoError(t, err)
				lim, err := limiter.New()
				require.NoError(t, err)
				var calls, rejected atomic.Int64
				var wg sync.WaitGroup
				end := time.Now().Add(tt.loops)
				for range tt.callers {
					wg.Go(func() {
						for first := true; first || time.Now().Before(end); first = false {
							calls.Add(1)
							if err := limitload.Call(t.Context(), lim, be); errors.Is(err, limiter.ErrLimitExceeded) {
								rejected.Add(1)
								time.Sleep(s) // a caller turned away comes back later
							}
						}
					})
				}
				wg.Wait()
				assert.Zero(t, rejected.Load(), "rejected of %d calls", calls.Load())
			})
		})
	}
}
