package bench

import (
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/limitload"
	"github.com/sluice-go/sluice/limiter"
)

var (
	shapes     = flag.Bool("shapes", false, "run TestShapes: the default limit beside a fixed C+8 on every latency shape and load, in virtual time (a few minutes)")
	shapesAlg  = flag.String("shapes.alg", "aimd", "TestShapes: the algorithm beside C+8: aimd (the default), vegas or gradient2")
	shapesSize = flag.String("shapes.size", "16,20ms", "TestShapes: the downstream, C,S (C workers, mean service time S)")
)

// shapeAlgorithm is the algorithm -shapes.alg names; nil is the default.
func shapeAlgorithm(t *testing.T) limiter.AlgorithmConfig {
	switch *shapesAlg {
	case "aimd":
		return nil
	case "vegas":
		return limiter.VegasConfig{}
	case "gradient2":
		return limiter.Gradient2Config{}
	}
	t.Fatalf("-shapes.alg %q: want aimd, vegas or gradient2", *shapesAlg)
	return nil
}

// TestShapes prints, for every latency shape, backend and load, the
// default limit beside a fixed limit told C + 8: the targets of
// docs/design.md ("Every shape of latency") as a table, means over seeds.
// It asserts nothing: TestLimitHolds guards the targets.
func TestShapes(t *testing.T) {
	if !*shapes {
		t.Skip("a measurement, not a check: run with -shapes")
	}
	sz, err := parseSize("-shapes.size", *shapesSize)
	require.NoError(t, err)
	const seeds = 2
	c, s := sz.c, sz.s
	type row struct {
		name   string
		load   float64
		refuse int
		cold   bool
	}
	rows := []row{{"0.5x", 0.5, 0, false}, {"0.8x", 0.8, 0, false}, {"quota", 0.7, 33, false},
		{"1x", 1, 0, false}, {"2x", 2, 0, false}, {"5x", 5, 0, false}, {"cold 5x", 5, 0, true}}
	dists := []backend.Dist{backend.Constant, backend.Exponential, backend.Bimodal, backend.Lognormal, backend.TwoMethods}
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
					var res [2]limitload.ShapeResult
					for i, alg := range []limiter.AlgorithmConfig{shapeAlgorithm(t), limiter.FixedConfig{Limit: c + 8}} {
						for seed := uint64(1); seed <= seeds; seed++ {
							synctest.Test(t, func(t *testing.T) {
								r, err := limitload.RunShape(limitload.Shape{Kind: kind, Dist: d, Load: rw.load, Refuse: rw.refuse, Cold: rw.cold, Seed: seed, Algorithm: alg}, c, s)
								require.NoError(t, err)
								res[i].Good += r.Good / seeds
								res[i].P99 += r.P99 / seeds
								res[i].Rejected += r.Rejected / seeds
								res[i].MeanLimit += r.MeanLimit / seeds
							})
						}
					}
					mu.Lock()
					lines[key] = fmt.Sprintf("| %s | %.1f %% | %.2f | %.2f %% | %.2f | %.1f %% | %.2f | %.2f %% |",
						key, 100*res[0].Good, res[0].P99, 100*res[0].Rejected, res[0].MeanLimit,
						100*res[1].Good, res[1].P99, 100*res[1].Rejected)
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
