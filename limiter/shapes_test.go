package limiter

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
)

var (
	shapes    = flag.Bool("shapes", false, "run TestShapes: the default limit beside a fixed C+8 on every latency shape and load, in virtual time (a few minutes)")
	shapesAlg = flag.String("shapes.alg", "aimd", "TestShapes: the algorithm beside C+8: aimd (the default), vegas or gradient2")
)

// A shapeRun is one load held against one backend and one algorithm.
type shapeRun struct {
	kind   string
	dist   backend.Dist
	load   float64
	refuse int  // every refuse-th call is refused by the "handler"
	cold   bool // the load from the first call, no warm-up
	fixed  int  // a fixed limit; 0 for the default algorithm
	seed   uint64
	// duration of the load, after 3 s at half load (unless cold); 0 is 20 s.
	duration time.Duration
}

// A shapeResult summarizes a run's load after its first 4 s: goodput as a
// share of ideal, p50 and p99 of successes in service times, the shares of
// calls the limiter rejected and the handler refused, and the mean limit
// (over the whole run) in multiples of the capacity.
type shapeResult struct {
	good, p50, p99, rejected, refused, meanLimit float64
}

// runShape drives a Limiter with the run's load and summarizes it. It must
// run inside a synctest bubble.
func runShape(t *testing.T, r shapeRun, c int, s time.Duration) shapeResult {
	be, err := backend.New(r.kind, c, s, r.dist)
	require.NoError(t, err)
	var opts []Option
	switch {
	case r.fixed > 0:
		f, err := newFixed(r.fixed)
		require.NoError(t, err)
		opts = append(opts, WithAlgorithm(f))
	case *shapesAlg == "vegas":
		v, err := newVegas(VegasConfig{})
		require.NoError(t, err)
		opts = append(opts, WithAlgorithm(v))
	case *shapesAlg == "little":
		opts = append(opts, WithAlgorithm(newLittle(AIMDConfig{}, true)))
	case *shapesAlg == "gradient2":
		g, err := newGradient2(Gradient2Config{})
		require.NoError(t, err)
		opts = append(opts, WithAlgorithm(g))
	}
	lim, err := New(opts...)
	require.NoError(t, err)
	rate := float64(c) / s.Seconds()
	warm := 0.5 * rate
	if r.cold {
		warm = r.load * rate
	}
	if r.duration == 0 {
		r.duration = 20 * time.Second
	}
	var n atomic.Int64
	var limitSum, limitN float64
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		Phases: []loadgen.Phase{
			{Name: "warm-up", Duration: 3 * time.Second, Rate: warm},
			{Name: "load", Duration: r.duration, Rate: r.load * rate},
		},
		Deadline: 10 * s,
		Seed:     r.seed,
		Tick: func(loadgen.Window) {
			limitSum += float64(lim.Limit())
			limitN++
		},
		Call: func(ctx context.Context) error {
			if r.refuse > 0 && n.Add(1)%int64(r.refuse) == 0 {
				// The handler's own refusal, before any work.
				tok, err := lim.Acquire(ctx)
				if err != nil {
					return err
				}
				tok.Release(Dropped)
				return errQuota
			}
			return limitedCall(ctx, lim, be)
		},
		Classify: classifyLimited,
	})
	require.NoError(t, err)
	require.Zero(t, lim.Inflight(), "in flight after the run")
	p := rep.Phase(1, 4*time.Second)
	ideal := min(p.Offered, float64(c)/s.Seconds()) * (1 - float64(p.Failed)/float64(p.Calls))
	return shapeResult{
		good:      p.Goodput / ideal,
		p50:       float64(p.P50) / float64(s),
		p99:       float64(p.P99) / float64(s),
		rejected:  float64(p.Rejected) / float64(p.Calls),
		refused:   float64(p.Failed) / float64(p.Calls),
		meanLimit: limitSum / max(limitN, 1) / float64(c),
	}
}

// TestShapes prints, for every latency shape, backend and load, the
// default limit beside a fixed limit told C + 8: the targets of
// docs/design.md ("Every shape of latency") as a table, means over seeds.
// It asserts nothing: TestLimitHolds guards the targets.
func TestShapes(t *testing.T) {
	if !*shapes {
		t.Skip("a measurement, not a check: run with -shapes")
	}
	const c, s, seeds = 16, 20 * time.Millisecond, 2
	type row struct {
		name   string
		load   float64
		refuse int
		cold   bool
	}
	rows := []row{{"0.5x", 0.5, 0, false}, {"0.8x", 0.8, 0, false}, {"quota", 0.7, 33, false},
		{"1x", 1, 0, false}, {"2x", 2, 0, false}, {"5x", 5, 0, false}, {"cold 5x", 5, 0, true}}
	dists := []backend.Dist{backend.Constant, backend.Exponential, backend.Bimodal, backend.Lognormal}
	var mu sync.Mutex
	lines := map[string]string{}
	var order []string
	for _, d := range dists {
		for _, kind := range []string{"fifo", "ps"} {
			for _, rw := range rows {
				key := fmt.Sprintf("%s %v %s", kind, d, rw.name)
				order = append(order, key)
				t.Run(key, func(t *testing.T) {
					t.Parallel()
					var res [2]shapeResult
					for i, fixed := range []int{0, c + 8} {
						for seed := uint64(1); seed <= seeds; seed++ {
							synctest.Test(t, func(t *testing.T) {
								r := runShape(t, shapeRun{kind: kind, dist: d, load: rw.load, refuse: rw.refuse, cold: rw.cold, fixed: fixed, seed: seed}, c, s)
								res[i].good += r.good / seeds
								res[i].p99 += r.p99 / seeds
								res[i].rejected += r.rejected / seeds
								res[i].meanLimit += r.meanLimit / seeds
							})
						}
					}
					mu.Lock()
					lines[key] = fmt.Sprintf("| %s | %.1f %% | %.2f | %.2f %% | %.2f | %.1f %% | %.2f | %.2f %% |",
						key, 100*res[0].good, res[0].p99, 100*res[0].rejected, res[0].meanLimit,
						100*res[1].good, res[1].p99, 100*res[1].rejected)
					mu.Unlock()
				})
			}
		}
	}
	t.Cleanup(func() {
		var out strings.Builder
		fmt.Fprintf(&out, "C = %d, S = %v, means of %d seeds; %s | fixed C+8\n\n", c, s, seeds, *shapesAlg)
		fmt.Fprintln(&out, "| case | good | p99/S | rejected | limit/C | C+8 good | p99/S | rejected |")
		fmt.Fprintln(&out, "|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, k := range order {
			fmt.Fprintln(&out, lines[k])
		}
		t.Log("\n" + out.String())
	})
}
