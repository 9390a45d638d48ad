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
	var opts []interceptor.Option
	if *fleetInitial > 0 {
		opts = append(opts, interceptor.WithDefault(interceptor.Limit{
			Algorithm: interceptor.AIMD(limiter.AIMDConfig{InitialLimit: *fleetInitial})}))
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
