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

// A steadyCase is one load held for a while against a default Limiter: the
// regression tests of the limit's three known failure modes (a runaway at
// exactly full load, a trickle of refusals read as overload, noisy service
// times read as queueing).
type steadyCase struct {
	name     string
	kind     string
	dist     backend.Dist
	load     float64 // offered load, a multiple of C/S
	refuse   int     // every refuse-th call is refused at once by the "handler"; 0 none
	duration time.Duration

	minGoodput  float64 // share of ideal
	maxP99      float64 // in service times; 0 unchecked
	maxRejected float64 // share of calls the limiter rejected; 1 unchecked
	maxLimit    float64 // mean limit as a multiple of C; 0 unchecked
	cold        bool    // no warm-up at half load: the load from the first call
}

func TestLimitHolds(t *testing.T) {
	const c, s = 16, 20 * time.Millisecond
	cases := []steadyCase{
		// Gap 1: at exactly full load the limit must not run away.
		{name: "1x", kind: "fifo", load: 1, duration: 30 * time.Second,
			minGoodput: 0.94, maxP99: 2, maxRejected: 1, maxLimit: 2},
		{name: "1x", kind: "ps", load: 1, duration: 30 * time.Second,
			minGoodput: 0.94, maxP99: 2, maxRejected: 1, maxLimit: 2},
		{name: "0.8x", kind: "fifo", load: 0.8, duration: 20 * time.Second,
			minGoodput: 0.99, maxRejected: 0.001},
		// Gap 3: a trickle of refusals that are not overload (3 % of
		// calls, every 33rd), with steady and with noisy service times.
		{name: "quota", kind: "fifo", load: 0.7, refuse: 33, duration: 30 * time.Second,
			minGoodput: 0.95, maxRejected: 0.005},
		{name: "quota", kind: "fifo", dist: backend.Exponential, load: 0.7, refuse: 33, duration: 30 * time.Second,
			minGoodput: 0.95, maxRejected: 0.005},
		// A server that starts under overload learns its baseline from
		// queued calls: the limit must still come down to the capacity.
		{name: "cold 5x", kind: "fifo", load: 5, duration: 20 * time.Second, cold: true,
			minGoodput: 0.98, maxP99: 2, maxRejected: 1, maxLimit: 1.5},
		{name: "cold 5x", kind: "ps", load: 5, duration: 20 * time.Second, cold: true,
			minGoodput: 0.98, maxP99: 2, maxRejected: 1, maxLimit: 1.5},
		// Noisy service times at overload: the service time alone has a
		// p99 of 4.6 S.
		{name: "noisy 2x", kind: "fifo", dist: backend.Exponential, load: 2, duration: 20 * time.Second,
			minGoodput: 0.96, maxP99: 5.5, maxRejected: 1},
		// Cache-like service times (S/3 for 90 % of calls, 7·S for the
		// rest): the shape on which a minimum-based baseline collapsed,
		// rejecting 70 % of calls at half load.
		{name: "cache 0.5x", kind: "fifo", dist: backend.Bimodal, load: 0.5, duration: 20 * time.Second,
			minGoodput: 0.99, maxRejected: 0.001},
		{name: "cache 2x", kind: "ps", dist: backend.Bimodal, load: 2, duration: 20 * time.Second,
			minGoodput: 0.95, maxP99: 10, maxRejected: 1},
		{name: "cache 2x", kind: "fifo", dist: backend.Bimodal, load: 2, duration: 20 * time.Second,
			minGoodput: 0.96, maxP99: 8.5, maxRejected: 1},
		// Two methods behind one limiter, S/4 for 80 % of calls and 4·S
		// for the rest: with processor sharing p99 follows the limit,
		// which must not climb past (1+t)·c on the round trips' noise, nor
		// on round trips that hold the fast calls only (6.9–7.2 S before
		// the sign test decided alone; 1.1 × C+8's is 6.5 S and 5.4 S).
		{name: "methods 2x", kind: "ps", dist: backend.TwoMethods, load: 2, duration: 20 * time.Second,
			minGoodput: 0.97, maxP99: 6.75, maxRejected: 1},
		{name: "methods 5x", kind: "ps", dist: backend.TwoMethods, load: 5, duration: 20 * time.Second,
			minGoodput: 0.97, maxP99: 6.75, maxRejected: 1},
		{name: "methods 2x", kind: "fifo", dist: backend.TwoMethods, load: 2, duration: 20 * time.Second,
			minGoodput: 0.97, maxP99: 5.25, maxRejected: 1},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s/%v", tc.name, tc.kind, tc.dist), func(t *testing.T) {
			if (testing.Short() || limiter.RaceEnabled) && tc.name != "1x" {
				t.Skip("make test runs the rest without -race")
			}
			synctest.Test(t, func(t *testing.T) { runSteady(t, tc, c, s) })
		})
	}
}

// TestLimitHoldsLargerAndSlower: the limit holds at C = 64, S = 100 ms,
// a size the rule was not tuned on. A downstream's own rare overruns are
// not overload: lognormal times (σ = 1.2) overrun a deadline of 10 S in one
// call of 160, so nearly every round trip of 256 calls holds one; read as
// late, they held the limit at 0.3 C at C = 64, S = 100 ms, rejecting 25 %
// of calls at half load (this seed) and 61 % at 2× (76 % of ideal).
func TestLimitHoldsLargerAndSlower(t *testing.T) {
	const c, s = 64, 100 * time.Millisecond
	cases := []steadyCase{
		{name: "0.5x", kind: "fifo", dist: backend.Lognormal, load: 0.5, duration: 20 * time.Second,
			minGoodput: 0.99, maxRejected: 0.001},
		{name: "2x", kind: "fifo", dist: backend.Lognormal, load: 2, duration: 20 * time.Second,
			minGoodput: 0.85, maxP99: 8.5, maxRejected: 1},
		// Two methods with processor sharing: a round trip holds the fast
		// calls first, so while the limit rose its mean read on time with
		// every call queued; the limit swung from 0.05 C to 7 C, p99 9.5 S.
		{name: "methods 2x", kind: "ps", dist: backend.TwoMethods, load: 2, duration: 20 * time.Second,
			minGoodput: 0.97, maxP99: 6.5, maxRejected: 1, maxLimit: 1.5},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s/%v", tc.name, tc.kind, tc.dist), func(t *testing.T) {
			if testing.Short() || limiter.RaceEnabled {
				t.Skip("make test runs it without -race")
			}
			synctest.Test(t, func(t *testing.T) { runSteady(t, tc, c, s) })
		})
	}
}

func runSteady(t *testing.T, tc steadyCase, c int, s time.Duration) {
	// Warmed up at half load, so the limit starts from what light load
	// taught it, unless cold.
	r, err := limitload.RunShape(limitload.Shape{Kind: tc.kind, Dist: tc.dist, Load: tc.load, Refuse: tc.refuse,
		Cold: tc.cold, Seed: 1, Duration: tc.duration}, c, s)
	require.NoError(t, err)
	t.Logf("goodput %5.1f%% of ideal, p99 %.2f S, p50 %.2f S, rejected %.2f%%, refused %.2f%%, mean limit %.2f C",
		100*r.Good, r.P99, r.P50, 100*r.Rejected, 100*r.Refused, r.MeanLimit)
	assert.GreaterOrEqual(t, r.Good, tc.minGoodput, "goodput / ideal")
	if tc.maxP99 > 0 {
		assert.LessOrEqual(t, r.P99, tc.maxP99, "p99 in service times")
	}
	assert.LessOrEqual(t, r.Rejected, tc.maxRejected, "share of calls rejected by the limiter")
	if tc.maxLimit > 0 {
		assert.LessOrEqual(t, r.MeanLimit, tc.maxLimit, "mean limit in multiples of C")
	}
}
