package bench

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
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

var (
	timeline         = flag.Bool("timeline", false, "run TestTimeline: one row of TestShapes second by second, in virtual time")
	timelineCase     = flag.String("timeline.case", "fifo bimodal 2x", "TestTimeline: the row of make shapes, e.g. 'fifo bimodal 2x', 'ps methods quota' or 'fifo lognormal cold 5x'")
	timelineSize     = flag.String("timeline.size", "16,20ms", "TestTimeline: the downstream, C,S (C workers, mean service time S)")
	timelineSeed     = flag.Uint64("timeline.seed", 1, "TestTimeline: the seed of the arrivals and service times")
	timelineDuration = flag.Duration("timeline.duration", 20*time.Second, "TestTimeline: how long the load lasts after its first 3 s (at half load, unless the row is cold)")
	timelineFixed    = flag.Int("timeline.fixed", 0, "TestTimeline: a fixed limit instead of the default algorithm")
	timelineLag      = flag.Duration("timeline.lag", 0, "TestTimeline: this process's own work per call and call in flight (limitload.Shape.Lag), e.g. 200us: over real gRPC it moves RTTs under load")
	timelineServer   = flag.Bool("timeline.server", false, "TestTimeline: overruns reported as a server interceptor does (one within twice the learned RTT is Ignored), as make starts -starts.server and real gRPC servers do")
)

// A timelineRow is what -timeline.case names: a row of TestShapes.
type timelineRow struct {
	kind string
	dist backend.Dist
	shapeLoad
}

// parseTimelineCase parses a row's name as TestShapes prints it: a
// backend, a latency shape and one of shapeLoads or any multiple of C/S,
// "fifo bimodal 2x", "ps methods quota" or "fifo lognormal cold 5x".
func parseTimelineCase(v string) (timelineRow, error) {
	f := strings.Fields(v)
	bad := func(why string) (timelineRow, error) {
		return timelineRow{}, fmt.Errorf("-timeline.case %q: %s; want a backend, a shape and a load as make shapes names a row, e.g. 'fifo bimodal 2x', 'ps methods quota' or 'fifo lognormal cold 5x'", v, why)
	}
	if len(f) != 3 && (len(f) != 4 || f[2] != "cold") {
		return bad("not a backend, a shape and a load")
	}
	if f[0] != "fifo" && f[0] != "ps" {
		return bad("backend " + f[0] + " is neither fifo nor ps")
	}
	d, err := backend.ParseDist(f[1])
	if err != nil {
		return bad(err.Error())
	}
	row := timelineRow{kind: f[0], dist: d}
	name := strings.Join(f[2:], " ")
	for _, l := range shapeLoads {
		if l.name == name {
			row.shapeLoad = l
			return row, nil
		}
	}
	multiple := f[len(f)-1]
	load, err := strconv.ParseFloat(strings.TrimSuffix(multiple, "x"), 64)
	if err != nil || load <= 0 || !strings.HasSuffix(multiple, "x") {
		return bad("load " + multiple + " is neither quota nor a multiple of C/S such as 0.8x")
	}
	row.shapeLoad = shapeLoad{name: name, load: load, cold: len(f) == 4}
	return row, nil
}

// TestTimeline prints one row of TestShapes second by second: the limit
// and calls in flight at the end of each second, and the calls that
// finished in it; then the row's summary as TestShapes counts it. A tool
// to see why a row reads what it does; it asserts nothing.
func TestTimeline(t *testing.T) {
	if !*timeline {
		t.Skip("a tool, not a check: run with -timeline")
	}
	row, err := parseTimelineCase(*timelineCase)
	require.NoError(t, err)
	sz, err := parseSize("-timeline.size", *timelineSize)
	require.NoError(t, err)
	var alg limiter.AlgorithmConfig
	if *timelineFixed > 0 {
		alg = limiter.FixedConfig{Limit: *timelineFixed}
	}
	var out strings.Builder
	warm := "3 s at half load, then the load"
	if row.cold {
		warm = "the load from the first call"
	}
	if *timelineServer {
		warm += "; overruns as a server reports them"
	}
	if *timelineLag > 0 {
		warm += fmt.Sprintf("; a lag of %v per call in flight", *timelineLag)
	}
	fmt.Fprintf(&out, "%s, C = %d, S = %v, seed %d: %s; s counts from the first call\n\n",
		*timelineCase, sz.c, sz.s, *timelineSeed, warm)
	fmt.Fprintln(&out, "| s | limit | in flight | offered | good | rejected | overran | p99/S |")
	fmt.Fprintln(&out, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	synctest.Test(t, func(t *testing.T) {
		r, err := limitload.RunShape(limitload.Shape{
			Kind: row.kind, Dist: row.dist, Load: row.load, Refuse: row.refuse, Cold: row.cold, Seed: *timelineSeed,
			Duration: *timelineDuration, Algorithm: alg, Server: *timelineServer, Lag: *timelineLag,
			Tick: func(w loadgen.Window, limit, inflight int) {
				fmt.Fprintf(&out, "| %.0f | %d | %d | %d | %d | %d | %d | %.2f |\n", w.End.Seconds(), limit, inflight,
					w.Offered, w.Good, w.Rejected, w.Deadline, float64(w.P99)/float64(sz.s))
			},
		}, sz.c, sz.s)
		require.NoError(t, err)
		fmt.Fprintf(&out, "\nfrom 7 s on, as make shapes counts the row: goodput %.1f %% of ideal, p99 %.2f·S, rejected %.2f %%; mean limit %.2f·C\n",
			100*r.Good, r.P99, 100*r.Rejected, r.MeanLimit)
	})
	t.Log("\n" + out.String())
}

// TestParseTimelineCase: -timeline.case names a row as TestShapes does,
// and a wrong one says what it takes.
func TestParseTimelineCase(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want timelineRow
		err  string
	}{
		{in: "fifo bimodal 2x", want: timelineRow{"fifo", backend.Bimodal, shapeLoad{name: "2x", load: 2}}},
		{in: " ps  methods 0.8x ", want: timelineRow{"ps", backend.TwoMethods, shapeLoad{name: "0.8x", load: 0.8}}},
		{in: "ps lognormal quota", want: timelineRow{"ps", backend.Lognormal, shapeLoad{name: "quota", load: 0.7, refuse: 33}}},
		{in: "fifo constant cold 5x", want: timelineRow{"fifo", backend.Constant, shapeLoad{name: "cold 5x", load: 5, cold: true}}},
		{in: "fifo constant cold 3x", want: timelineRow{"fifo", backend.Constant, shapeLoad{name: "cold 3x", load: 3, cold: true}}},
		{in: "fifo bimodal", err: "not a backend, a shape and a load"},
		{in: "fifo bimodal warm 2x", err: "not a backend, a shape and a load"},
		{in: "fifo bimodal cold quota", err: "neither quota nor"},
		{in: "lifo bimodal 2x", err: "neither fifo nor ps"},
		{in: "fifo weibull 2x", err: "weibull"},
		{in: "fifo constant 2", err: "neither quota nor a multiple"},
		{in: "fifo constant -1x", err: "neither quota nor a multiple"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseTimelineCase(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				assert.ErrorContains(t, err, "want a backend, a shape and a load")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
