package bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/limitload"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/limiter"
)

var (
	starts       = flag.Bool("starts", false, "run TestStarts: fresh default limiters at three sizes, every latency shape and load from the first call, beside a fixed C+8, in virtual time (about a minute)")
	startsServer = flag.Bool("starts.server", false, "TestStarts reports overruns as a server interceptor does: one within twice the learned RTT is Ignored")
	startsSeed   = flag.Uint64("starts.seed", 1, "TestStarts runs seeds starts.seed to starts.seed+2")
)

// startSizes are the downstreams TestStarts runs: the overload matrix's
// C = 16, S = 20 ms between a small fast one and a large slow one, which
// the rule was not tuned on.
var startSizes = []struct {
	c int
	s time.Duration
}{{4, 2 * time.Millisecond}, {16, 20 * time.Millisecond}, {64, 100 * time.Millisecond}}

// TestStarts prints, for each size, backend, latency shape and load, what
// a fresh default limiter does from its first call, beside a fixed limit
// told C + 8: below capacity (0.5×, 0.8×) the share of calls it rejected
// in its first 3 s; at 1×, 2× and 5× goodput over ideal and p99 in
// service times over seconds 1 to 6, as the overload matrix counts a row.
// Medians of 3 seeds, the worst in brackets. It asserts nothing.
func TestStarts(t *testing.T) {
	if !*starts {
		t.Skip("a measurement, not a check: run with -starts")
	}
	dists := []backend.Dist{backend.Constant, backend.Exponential, backend.Bimodal, backend.Lognormal, backend.TwoMethods}
	var mu sync.Mutex
	lines := map[string]string{}
	var order []string
	for _, sz := range startSizes {
		for _, kind := range []string{"fifo", "ps"} {
			for _, d := range dists {
				key := fmt.Sprintf("C=%d S=%v %s %v", sz.c, sz.s, kind, d)
				order = append(order, key)
				t.Run(key, func(t *testing.T) {
					t.Parallel()
					cells := []string{key}
					for _, load := range []float64{0.5, 0.8, 1, 2, 5} {
						for _, fixed := range []bool{false, true} {
							cells = append(cells, startCell(t, kind, d, sz.c, sz.s, load, fixed))
						}
					}
					mu.Lock()
					lines[key] = "| " + strings.Join(cells, " | ") + " |"
					mu.Unlock()
				})
			}
		}
	}
	t.Cleanup(func() {
		var out strings.Builder
		fmt.Fprintln(&out, "0.5× and 0.8×: rejected in the first 3 s; 1×, 2×, 5×: goodput / ideal, p99 / S over seconds 1–6; median (worst) of 3 seeds;")
		fmt.Fprintln(&out, "\"overran\": the largest share of a seed's calls over their deadline, when above 1 % (goodput above 1 then counts fast calls while slow ones time out)")
		if *startsServer {
			fmt.Fprintln(&out, "overruns as a server reports them (-starts.server)")
		}
		fmt.Fprintln(&out)
		fmt.Fprintln(&out, "| case | 0.5× | C+8 | 0.8× | C+8 | 1× | C+8 | 2× | C+8 | 5× | C+8 |")
		fmt.Fprintln(&out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, k := range order {
			fmt.Fprintln(&out, lines[k])
		}
		t.Log("\n" + out.String())
	})
}

// startCell runs three seeds of one load from the first call and formats
// their median and worst.
func startCell(t *testing.T, kind string, d backend.Dist, c int, s time.Duration, load float64, fixed bool) string {
	light := load < 1
	var vals, p99s []float64
	overran := 0.0
	for seed := *startsSeed; seed < *startsSeed+3; seed++ {
		synctest.Test(t, func(t *testing.T) {
			be, err := backend.New(kind, c, s, d, seed)
			require.NoError(t, err)
			var opts []limiter.Option
			if fixed {
				alg, err := limiter.FixedConfig{Limit: c + 8}.New()
				require.NoError(t, err)
				opts = append(opts, limiter.WithAlgorithm(alg))
			}
			lim, err := limiter.New(opts...)
			require.NoError(t, err)
			call := func(ctx context.Context) error { return limitload.Call(ctx, lim, be) }
			if *startsServer {
				var v limitload.Server
				call = func(ctx context.Context) error { return v.Call(ctx, lim, be) }
			}
			rate := float64(c) / s.Seconds()
			d := 6 * time.Second
			if light {
				d = 3 * time.Second
			}
			rep, err := loadgen.Run(context.Background(), loadgen.Config{
				Phases:   []loadgen.Phase{{Name: "load", Duration: d, Rate: load * rate}},
				Deadline: 10 * s,
				Seed:     seed,
				Call:     call,
				Classify: limitload.Classify,
			})
			require.NoError(t, err)
			if light {
				p := rep.Phase(0, 0)
				vals = append(vals, float64(p.Rejected)/float64(p.Calls))
				return
			}
			p := rep.Phase(0, time.Second)
			vals = append(vals, p.Goodput/min(p.Offered, rate))
			overran = max(overran, float64(p.Deadline)/float64(max(p.Calls, 1)))
			p99s = append(p99s, float64(p.P99)/float64(s))
		})
	}
	slices.Sort(vals)
	if light {
		return fmt.Sprintf("%.1f %% (%.1f)", 100*vals[1], 100*vals[2])
	}
	slices.Sort(p99s)
	cell := fmt.Sprintf("%.2f (%.2f), %.1f", vals[1], vals[0], p99s[1])
	if overran > 0.01 {
		cell += fmt.Sprintf(", overran %.1f %%", 100*overran)
	}
	return cell
}
