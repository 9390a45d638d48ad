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
	timelineCase     = flag.String("timeline.case", "fifo bimodal 2x", "TestTimeline: the backend (fifo or ps), latency shape and load (a multiple of C/S, e.g. 0.8x)")
	timelineSize     = flag.String("timeline.size", "16,20ms", "TestTimeline: the downstream, C,S (C workers, mean service time S)")
	timelineSeed     = flag.Uint64("timeline.seed", 1, "TestTimeline: the seed of the arrivals and service times")
	timelineDuration = flag.Duration("timeline.duration", 20*time.Second, "TestTimeline: how long the load lasts, after 3 s at half load unless -timeline.cold")
	timelineCold     = flag.Bool("timeline.cold", false, "TestTimeline: the load from the first call, no warm-up at half load")
	timelineFixed    = flag.Int("timeline.fixed", 0, "TestTimeline: a fixed limit instead of the default algorithm")
)

// A timelineRow is what -timeline.case names: a backend, a latency shape and a
// load.
type timelineRow struct {
	kind string
	dist backend.Dist
	load float64
}

// parseTimelineCase parses "fifo bimodal 2x" (a row of TestShapes' table).
func parseTimelineCase(v string) (timelineRow, error) {
	f := strings.Fields(v)
	bad := func(why string) (timelineRow, error) {
		return timelineRow{}, fmt.Errorf("-timeline.case %q: %s; want backend, shape and load, e.g. 'fifo bimodal 2x'", v, why)
	}
	if len(f) != 3 {
		return bad("not three words")
	}
	if f[0] != "fifo" && f[0] != "ps" {
		return bad("backend " + f[0] + " is neither fifo nor ps")
	}
	d, err := backend.ParseDist(f[1])
	if err != nil {
		return bad(err.Error())
	}
	load, err := strconv.ParseFloat(strings.TrimSuffix(f[2], "x"), 64)
	if err != nil || load <= 0 || !strings.HasSuffix(f[2], "x") {
		return bad("load " + f[2] + " is not a multiple of C/S such as 0.8x")
	}
	return timelineRow{f[0], d, load}, nil
}

// TestTimeline prints one row of TestShapes second by second: the limit and
// calls in flight at the end of each second, and the calls that finished
// in it; then the row's summary as TestShapes counts it. A tool to see
// why a row reads what it does; it asserts nothing.
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
	fmt.Fprintf(&out, "%s, C = %d, S = %v, seed %d; s counts from the first call, the load from %d s\n\n",
		*timelineCase, sz.c, sz.s, *timelineSeed, map[bool]int{false: 3, true: 0}[*timelineCold])
	fmt.Fprintln(&out, "| s | limit | in flight | offered | good | rejected | overran | p99/S |")
	fmt.Fprintln(&out, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	synctest.Test(t, func(t *testing.T) {
		r, err := limitload.RunShape(limitload.Shape{
			Kind: row.kind, Dist: row.dist, Load: row.load, Cold: *timelineCold, Seed: *timelineSeed,
			Duration: *timelineDuration, Algorithm: alg,
			Tick: func(w loadgen.Window, limit, inflight int) {
				fmt.Fprintf(&out, "| %.0f | %d | %d | %d | %d | %d | %d | %.2f |\n", w.End.Seconds(), limit, inflight,
					w.Offered, w.Good, w.Rejected, w.Deadline, float64(w.P99)/float64(sz.s))
			},
		}, sz.c, sz.s)
		require.NoError(t, err)
		fmt.Fprintf(&out, "\nafter the load's first 4 s: goodput %.1f %% of ideal, p99 %.2f·S, rejected %.2f %%, mean limit %.2f·C\n",
			100*r.Good, r.P99, 100*r.Rejected, r.MeanLimit)
	})
	t.Log("\n" + out.String())
}

// TestParseTimelineCase: -timeline.case names a row as TestShapes does, and a
// wrong one says what it takes.
func TestParseTimelineCase(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want timelineRow
		err  string
	}{
		{in: "fifo bimodal 2x", want: timelineRow{"fifo", backend.Bimodal, 2}},
		{in: " ps  methods 0.8x ", want: timelineRow{"ps", backend.TwoMethods, 0.8}},
		{in: "fifo bimodal", err: "not three words"},
		{in: "lifo bimodal 2x", err: "neither fifo nor ps"},
		{in: "fifo weibull 2x", err: "weibull"},
		{in: "fifo constant 2", err: "not a multiple"},
		{in: "fifo constant -1x", err: "not a multiple"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseTimelineCase(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				assert.ErrorContains(t, err, "want backend, shape and load")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
