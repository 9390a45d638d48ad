package limiter

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/backend"
	"github.com/sluice-go/sluice/internal/loadgen"
)

// TestFirstProbeCost: a limiter that starts under 2× overload with a long
// service time (100 ms) pays for its first probe within the first seconds,
// which make bench-overload's 5 s windows count whole. A probe measures
// about one RTT's worth of calls at its lowered limit; measuring a whole
// round trip's samples (10 at least) at a quarter of the limit took 2.5
// RTTs and cost 2–3.5 % of the first 5 s.
func TestFirstProbeCost(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("make test runs it without -race")
	}
	const c, s = 16, 100 * time.Millisecond
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				be, err := backend.New("fifo", c, s, backend.Constant)
				require.NoError(t, err)
				lim, err := New()
				require.NoError(t, err)
				rate := float64(c) / s.Seconds()
				rep, err := loadgen.Run(context.Background(), loadgen.Config{
					Phases:   []loadgen.Phase{{Name: "2x from the start", Duration: 5 * time.Second, Rate: 2 * rate}},
					Deadline: 10 * s,
					Seed:     seed,
					Call:     func(ctx context.Context) error { return limitedCall(ctx, lim, be) },
					Classify: classifyLimited,
				})
				require.NoError(t, err)
				p := rep.Phase(0, 0)
				goodput := p.Goodput / min(p.Offered, rate)
				t.Logf("goodput %5.1f%% of ideal, p99 %.2f S", 100*goodput, float64(p.P99)/float64(s))
				assert.GreaterOrEqual(t, goodput, 0.975, "goodput / ideal over the first 5 s")
			})
		})
	}
}
