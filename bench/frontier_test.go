package bench

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/limitload"
	"github.com/sluice-go/sluice/limiter"
)

var frontier = flag.Bool("frontier", false, "run TestFrontier: the default limit beside fixed limits at 0.8x and 1x, in virtual time (about a minute)")

// TestFrontier measures where the targets at 0.8× (at most 0.1 % of calls
// rejected) and 1× (p99 ≤ 2·S) meet: the default limit beside fixed
// limits that are told nothing either but never move, over long runs in
// virtual time, so that a change of the algorithm can be placed against
// them. It asserts nothing beyond the runs' own sanity: the numbers are
// the result (bench/RESULTS.md quotes them). Run with -frontier, or
// `make frontier`. (It lives here, beside the peer measurements, rather than
// among package limiter's checks.)
func TestFrontier(t *testing.T) {
	if !*frontier {
		t.Skip("a measurement, not a check: run with -frontier")
	}
	const (
		c     = 16
		s     = 20 * time.Millisecond
		run   = 60 * time.Second
		skip  = 10 * time.Second
		seeds = 4
	)
	scenarios := []struct {
		kind string
		dist backend.Dist
		load float64
	}{
		{"ps", backend.Constant, 0.8},
		{"fifo", backend.Exponential, 0.8},
		{"fifo", backend.Constant, 1},
		{"ps", backend.Constant, 1},
	}
	limits := []int{0, 28, 32, 34, 36, 40} // 0: the default AIMD
	var out strings.Builder
	fmt.Fprintf(&out, "C = %d, S = %v, %v of Poisson arrivals after %v, means over %d seeds\n\n", c, s, run-skip, skip, seeds)
	fmt.Fprintln(&out, "| scenario | limit | good / ideal | p99 / S | rejected | mean limit |")
	fmt.Fprintln(&out, "|---|---|---:|---:|---:|---:|")
	for _, sc := range scenarios {
		for _, fixed := range limits {
			var good, p99, rejected, meanLimit float64
			for seed := uint64(1); seed <= seeds; seed++ {
				synctest.Test(t, func(t *testing.T) {
					r := runFrontier(t, sc.kind, sc.dist, c, s, sc.load, fixed, run, skip, seed)
					good += r.good / seeds
					p99 += r.p99 / seeds
					rejected += r.rejected / seeds
					meanLimit += r.meanLimit / seeds
				})
			}
			name := "default"
			if fixed > 0 {
				name = fmt.Sprintf("fixed %d", fixed)
			}
			fmt.Fprintf(&out, "| %s %v %g× | %s | %.2f %% | %.2f | %.2f %% | %.1f |\n",
				sc.kind, sc.dist, sc.load, name, 100*good, p99, 100*rejected, meanLimit)
		}
	}
	t.Log("\n" + out.String())
}

type frontierResult struct{ good, p99, rejected, meanLimit float64 }

// runFrontier runs one seed of one scenario through a Limiter with the
// default algorithm (fixed 0) or a fixed limit. It must run inside a
// synctest bubble.
func runFrontier(t *testing.T, kind string, dist backend.Dist, c int, s time.Duration, load float64, fixed int, run, skip time.Duration, seed uint64) frontierResult {
	be, err := backend.New(kind, c, s, dist, seed)
	require.NoError(t, err)
	var opts []limiter.Option
	if fixed > 0 {
		f, err := limiter.FixedConfig{Limit: fixed}.New()
		require.NoError(t, err)
		opts = append(opts, limiter.WithAlgorithm(f))
	}
	lim, err := limiter.New(opts...)
	require.NoError(t, err)

	// The limit, sampled every 10 ms from skip on.
	var limitSum, limitN float64
	stop := limitload.SampleEvery(10*time.Millisecond, skip, func() {
		limitSum += float64(lim.Limit())
		limitN++
	})
	defer stop() // also when the run fails
	rate := load * float64(c) / s.Seconds()
	rep, err := limitload.Run(lim, be, s, rate, run, seed)
	require.NoError(t, err)
	stop()
	require.Zero(t, lim.Inflight(), "in flight after the run")

	p := rep.Phase(0, skip)
	require.Positive(t, p.Calls, "calls after the warm-up")
	ideal := min(p.Offered, float64(c)/s.Seconds())
	return frontierResult{
		good:      p.Goodput / ideal,
		p99:       float64(p.P99) / float64(s),
		rejected:  float64(p.Rejected) / float64(p.Calls),
		meanLimit: limitSum / max(limitN, 1),
	}
}
