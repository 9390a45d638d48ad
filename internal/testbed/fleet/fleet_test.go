package fleet

import (
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/limiter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const fleetEnv = "SLUICE_FLEET"

var (
	fleetFlag    = flag.Bool("fleet", false, "run TestFleetComparison (about 80 s); or set "+fleetEnv+"=1")
	fleetInitial = flag.Int("fleet.initial-limit", 0, "start every server's AIMD limiter at this limit instead of the default 20")
)

// fleetConfig is the fleet of the comparison: capacities 16, 8 and 4 at
// S = 20 ms, offered twice the fleet's capacity.
func fleetConfig(sc string, d time.Duration) Config {
	var opts []interceptor.ServerOption
	if *fleetInitial > 0 {
		opts = append(opts, interceptor.WithDefault(interceptor.Limit{
			Algorithm: limiter.AIMDConfig{InitialLimit: *fleetInitial}}))
	}
	return Config{
		Options:       opts,
		Capacities:    []int{16, 8, 4},
		Service:       20 * time.Millisecond,
		Load:          2,
		Duration:      d,
		ServiceConfig: sc,
		Seed:          1,
	}
}

// TestFleetSmoke is the CI version of the comparison: a few seconds of
// weighted_round_robin over sluice's reports, at the fleet's capacity so
// that it stays light. It asserts only that every server's reports reach
// the client and that the balancer's weights respond to them: the shares
// leave round_robin's equal thirds. No performance threshold: the machine
// is shared, and on a busy one the weights may follow its stalls.
func TestFleetSmoke(t *testing.T) {
	cfg := fleetConfig(DefaultWRR.ServiceConfig(), 4*time.Second)
	cfg.Load = 1
	res, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	for i := range cfg.Capacities {
		reports := 0
		for _, s := range res.Seconds {
			reports += s.Reports[i]
		}
		assert.Positive(t, reports, "server %d sent no load report", i+1)
	}
	s := res.Summarize(2, 4, 0)
	t.Logf("shares after the blackout: %.2f", s.Share)
	moved := 0.0
	for _, sh := range s.Share {
		moved = max(moved, math.Abs(sh-1.0/3))
	}
	assert.Greater(t, moved, 0.03, "the shares stayed round_robin's: the weights did not respond")
}

// TestFleetComparison measures round_robin against weighted_round_robin
// fed by sluice's ORCA reports on the same fleet, both with sluice's
// server defaults. Run it with -fleet or SLUICE_FLEET=1: it takes about
// 80 s. -fleet.initial-limit starts the limiters elsewhere than the
// default AIMD's 20, five times the smallest server's 4 workers.
func TestFleetComparison(t *testing.T) {
	if !*fleetFlag && os.Getenv(fleetEnv) == "" {
		t.Skip("run with -fleet or " + fleetEnv + "=1 (about 80 s)")
	}
	const (
		d    = 40 * time.Second
		skip = 10 // seconds of warm-up left out: blackout and convergence
	)
	var b strings.Builder
	var wrr Summary
	for _, run := range []struct {
		name, sc string
	}{
		{"round_robin", RoundRobin},
		{"weighted_round_robin + ORCA", DefaultWRR.ServiceConfig()},
	} {
		cfg := fleetConfig(run.sc, d)
		res, err := Run(t.Context(), cfg)
		require.NoError(t, err)
		all := res.Summarize(skip, int(d/time.Second), 0)
		s := res.Summarize(skip, int(d/time.Second), cfg.Service/2)
		for _, x := range []struct {
			what string
			s    Summary
		}{{"all seconds", all}, {fmt.Sprintf("%d seconds with lag <= S/2", s.Seconds), s}} {
			fmt.Fprintf(&b, "%-28s %-26s %s\n", run.name, x.what, x.s.Line(cfg))
		}
		if strings.HasPrefix(run.name, "weighted") {
			wrr = s
		}
	}
	t.Log("\n" + b.String())
	cfg := fleetConfig("", d)
	require.Positive(t, wrr.Seconds, "every second lagged: the machine is too busy to measure")
	assert.GreaterOrEqual(t, wrr.GoodputRatio(), 0.95, "weighted_round_robin: goodput / ideal")
	for i, want := range cfg.CapacityShares() {
		assert.InDelta(t, want, wrr.Share[i], 0.10, "server %d (%d workers): traffic share vs capacity share", i+1, cfg.Capacities[i])
	}
}

// TestPhaseIdeal checks the ideal of each phase: the offered load when the
// fleet has room, its capacity when it does not.
func TestPhaseIdeal(t *testing.T) {
	cfg := Config{Capacities: []int{16, 8, 4}, Service: 20 * time.Millisecond, Load: 0.9, Phases: []Phase{
		{Name: "0.9x", Duration: 3 * time.Second},
		{Name: "server 2 at half", Duration: 2 * time.Second, Capacities: []int{16, 4, 4}},
		{Name: "back", Duration: time.Second},
	}}
	require.NoError(t, cfg.validate())
	for _, tc := range []struct {
		phase             int
		offered, capacity float64
		want              float64
	}{
		{0, 1260, 1400, 1260}, // 0.9x: room, the ideal is what was offered
		{1, 1260, 1200, 1200}, // 16+4+4 workers: the capacity
		{2, 1260, 1400, 1260},
		{0, 2800, 1400, 1400}, // 2x
	} {
		assert.InDelta(t, tc.capacity, cfg.PhaseCapacity(tc.phase), 1e-9, "phase %d capacity", tc.phase)
		assert.InDelta(t, tc.want, cfg.PhaseIdeal(tc.phase, tc.offered), 1e-9, "phase %d offered %v", tc.phase, tc.offered)
	}
	for sec, want := range []int{0, 0, 0, 1, 1, 2} {
		assert.Equal(t, want, cfg.phaseAt(sec), "second %d", sec)
	}
	assert.Equal(t, 3, cfg.phaseStart(1))
	assert.Equal(t, 6*time.Second, cfg.length())
}

// TestPhaseSummary totals hand-made seconds per phase: the ideal is
// min(offered, capacity) of the phase, lagged seconds are left out on
// request, and the skip drops a phase's first seconds.
func TestPhaseSummary(t *testing.T) {
	cfg := Config{Capacities: []int{2, 1}, Service: 100 * time.Millisecond, Load: 1, Phases: []Phase{
		{Name: "a", Duration: 2 * time.Second},
		{Name: "b", Duration: 2 * time.Second, Capacities: []int{1, 1}},
	}}
	ms := time.Millisecond
	sec := func(t int, sent, good, rej []int, lag time.Duration, lat ...time.Duration) Second {
		return Second{T: t, Sent: sent, Good: good, Rejected: rej, Reports: []int{0, 0}, Lag: lag, Latencies: lat}
	}
	r := &Result{Config: cfg, Seconds: []Second{
		sec(0, []int{10, 10}, []int{0, 0}, []int{0, 10}, 0), // warm-up, skipped
		sec(1, []int{20, 10}, []int{20, 9}, []int{0, 1}, 0, 10*ms, 20*ms),
		sec(2, []int{15, 15}, []int{10, 10}, []int{5, 5}, 0, 30*ms),
		sec(3, []int{15, 15}, []int{5, 5}, []int{10, 10}, time.Second, 40*ms), // lagged
	}}
	a := r.Phase(0, 1, 0)
	assert.Equal(t, 1, a.Seconds)
	assert.InDelta(t, 30, a.Offered, 1e-9)
	assert.InDelta(t, 30, a.Capacity, 1e-9)
	assert.InDelta(t, 30, a.Ideal, 1e-9)
	assert.InDelta(t, 29, a.Goodput, 1e-9)
	assert.InDelta(t, 29.0/30, a.GoodputRatio(), 1e-9)
	assert.InDelta(t, 1.0/30, a.Rejected, 1e-9)
	assert.Equal(t, 20*ms, a.P99)
	assert.InDeltaSlice(t, []float64{2.0 / 3, 1.0 / 3}, a.Share, 1e-9)

	b := r.Phase(1, 0, 0)
	assert.Equal(t, 2, b.Seconds)
	assert.InDelta(t, 30, b.Offered, 1e-9)
	assert.InDelta(t, 20, b.Ideal, 1e-9, "capacity 1+1 workers at 100 ms")
	assert.InDelta(t, 15, b.Goodput, 1e-9)
	assert.InDelta(t, 0.5, b.Rejected, 1e-9)

	clean := r.Phase(1, 0, 500*ms)
	assert.Equal(t, 1, clean.Seconds)
	assert.Equal(t, 1, clean.Lagged)
	assert.InDelta(t, 20, clean.Goodput, 1e-9)
	assert.Equal(t, 30*ms, clean.P99)

	assert.Zero(t, Summary{}.GoodputRatio(), "no seconds, no ratio")
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Capacities: []int{2, 1}, Service: time.Millisecond, Load: 1, Duration: time.Second}
	require.NoError(t, ok.validate())
	for name, mod := range map[string]func(*Config){
		"no capacities":      func(c *Config) { c.Capacities = nil },
		"no length":          func(c *Config) { c.Duration = 0 },
		"fraction of second": func(c *Config) { c.Phases = []Phase{{Duration: 1500 * time.Millisecond}} },
		"wrong server count": func(c *Config) { c.Phases = []Phase{{Duration: time.Second, Capacities: []int{1}}} },
		"zero workers":       func(c *Config) { c.Phases = []Phase{{Duration: time.Second, Capacities: []int{1, 0}}} },
		"zero load":          func(c *Config) { c.Load = 0 },
	} {
		c := ok
		mod(&c)
		assert.Error(t, c.validate(), name)
	}
}
