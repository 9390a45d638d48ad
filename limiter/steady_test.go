package limiter_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/limitload"
	"github.com/sluice-go/sluice/limiter"
)

// TestSteadyStateKeepsWorkersBusy: under sustained overload the limit
// settles a little above the downstream's capacity, so that its workers
// never wait for a call. With processor sharing every call in flight is
// served, and the backend idles a share of its capacity exactly while
// fewer calls than workers are in flight. Backing off by a full 10 % at
// every late round trip dipped the limit to 18 for C = 16, and calls
// arriving in bursts left fewer than 16 in flight 1.1–2.6 % of the time
// at 5× (seeds 1–4); backing off to the threshold, 0.2–0.6 %.
func TestSteadyStateKeepsWorkersBusy(t *testing.T) {
	if testing.Short() || limiter.RaceEnabled {
		t.Skip("make test runs it without -race")
	}
	const c, s = 16, 20 * time.Millisecond
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("ps/5x/seed%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim, be := newLimitedBackend(t, "ps", c, s, backend.Constant, seed)

				// Count the milliseconds from 4 s on (after the cold
				// start and the probes that bring b down from what the
				// start measured) with fewer calls in flight than workers.
				var ticks, starved int
				stop := limitload.SampleEvery(time.Millisecond, 4*time.Second, func() {
					ticks++
					if lim.Inflight() < c {
						starved++
					}
				})
				defer stop() // also when runLoad fails
				runLoad(t, lim, be, s, 5*float64(c)/s.Seconds(), 8*time.Second, seed)
				stop()
				require.Positive(t, ticks)
				share := float64(starved) / float64(ticks)
				t.Logf("fewer calls in flight than workers %.2f%% of the time", 100*share)
				assert.LessOrEqual(t, share, 0.01, "share of the time with idle workers")
			})
		})
	}
}
