package limiter_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/limitload"
	"github.com/sluice-go/sluice/limiter"
)

// TestFairShareUnderOverload: one caller offering 2.5× the capacity and
// four offering 0.1× each, on one default Limiter from its first call.
// Sharing the limit alike, the light callers lose as large a share of
// their calls as the heavy one (measured: 33–36 % answered); shared
// fairly, nearly all of theirs are answered, at no cost to the total.
func TestFairShareUnderOverload(t *testing.T) {
	const c, s = 16, 20 * time.Millisecond
	loads := []float64{2.5, 0.1, 0.1, 0.1, 0.1}
	for _, kind := range []string{"fifo", "ps"} {
		t.Run(kind, func(t *testing.T) {
			if testing.Short() || limiter.RaceEnabled {
				t.Skip("make test runs it without -race")
			}
			var ok [2]float64
			var good [2]float64
			for i, fair := range []bool{false, true} {
				synctest.Test(t, func(t *testing.T) {
					sums, err := limitload.RunTenants(kind, backend.Constant, c, s, loads, fair, 10*time.Second, 1)
					require.NoError(t, err)
					var lightGood, lightCalls int
					var p99 time.Duration
					for _, p := range sums[1:] {
						lightGood += p.Good
						lightCalls += p.Calls
						p99 = max(p99, p.P99)
						good[i] += p.Goodput
					}
					good[i] += sums[0].Goodput
					ok[i] = float64(lightGood) / float64(lightCalls)
					t.Logf("fair %v: light callers %.2f %% answered, p99 %.2f S; heavy %.1f %%; goodput %.3f of C/S",
						fair, 100*ok[i], float64(p99)/float64(s), 100*float64(sums[0].Good)/float64(sums[0].Calls), good[i]/(c/s.Seconds()))
					if fair {
						assert.LessOrEqual(t, float64(p99)/float64(s), 2.0, "light callers' p99 in service times")
					}
				})
			}
			assert.Less(t, ok[0], 0.5, "without fair share")
			assert.GreaterOrEqual(t, ok[1], 0.98, "with fair share")
			assert.InDelta(t, good[0], good[1], 0.01*c/s.Seconds(), "total goodput")
		})
	}
}
