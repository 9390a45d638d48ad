package limitload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/limiter"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want loadgen.Result
	}{
		{nil, loadgen.OK},
		{limiter.ErrLimitExceeded, loadgen.Rejected},
		{context.DeadlineExceeded, loadgen.DeadlineExceeded},
		{ErrRefused, loadgen.Failed},
	} {
		assert.Equal(t, tt.want, Classify(tt.err), "%v", tt.err)
	}
}

// TestRunShape: a fixed limit of twice the capacity under half load
// admits everything, and one of half the capacity under twice the load
// holds its limit and turns the rest away; the handler refuses every
// tenth call that gets a permit.
func TestRunShape(t *testing.T) {
	const c, s = 8, 10 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		r, err := RunShape(Shape{Kind: "fifo", Load: 0.5, Seed: 1, Duration: 5 * time.Second,
			Algorithm: limiter.FixedConfig{Limit: 2 * c}}, c, s)
		require.NoError(t, err)
		assert.Zero(t, r.Rejected)
		assert.InDelta(t, 1, r.Good, 0.05)
		assert.InDelta(t, 2, r.MeanLimit, 1e-9, "the limit in multiples of C")

		r, err = RunShape(Shape{Kind: "fifo", Load: 2, Refuse: 10, Seed: 1, Duration: 5 * time.Second,
			Algorithm: limiter.FixedConfig{Limit: c / 2}}, c, s)
		require.NoError(t, err)
		assert.InDelta(t, 0.5, r.Good, 0.05, "half the capacity")
		assert.Positive(t, r.Refused, "refused by the handler")
		assert.Less(t, r.Refused, 0.1, "a tenth of the calls that got a permit")
		assert.Greater(t, r.Rejected, 0.5)
	})
}

// TestRunShapeLag: a lag holds every permit longer, in proportion to the
// calls in flight, so the RTT grows; a negative one is an error.
func TestRunShapeLag(t *testing.T) {
	const c, s = 8, 10 * time.Millisecond
	tests := []struct {
		lag            time.Duration
		minP50, maxP50 float64 // in service times
	}{
		{0, 1, 1},
		// Half load: 4 calls in flight without lag. A call's lag is 0.5 ms
		// × n on average, and n = 400/s × (10 ms + 0.5 ms × n) is 5: RTTs
		// of 12.5 ms on average.
		{500 * time.Microsecond, 1.05, 1.5},
	}
	for _, tt := range tests {
		t.Run(tt.lag.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, err := RunShape(Shape{Kind: "fifo", Load: 0.5, Seed: 1, Duration: 5 * time.Second, Lag: tt.lag,
					Algorithm: limiter.FixedConfig{Limit: 4 * c}}, c, s)
				require.NoError(t, err)
				assert.Zero(t, r.Rejected)
				assert.GreaterOrEqual(t, r.P50, tt.minP50)
				assert.LessOrEqual(t, r.P50, tt.maxP50)
			})
		})
	}
	synctest.Test(t, func(t *testing.T) {
		_, err := RunShape(Shape{Kind: "fifo", Load: 0.5, Seed: 1, Lag: -time.Millisecond}, c, s)
		require.ErrorContains(t, err, "want 0 or more")
	})
}

// TestRunShapeScale: Scale stretches the warm-up and the default load
// alike, so a run of 3 s + 20 s ticks 23 times, and half as many at 0.5.
func TestRunShapeScale(t *testing.T) {
	for _, tt := range []struct {
		scale     float64
		wantTicks int
	}{{0, 23}, {1, 23}, {0.5, 11}} {
		t.Run(fmt.Sprint(tt.scale), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ticks := 0
				_, err := RunShape(Shape{Kind: "fifo", Load: 0.5, Seed: 1, Scale: tt.scale,
					Algorithm: limiter.FixedConfig{Limit: 16},
					Tick:      func(loadgen.Window, int, int) { ticks++ }}, 8, 10*time.Millisecond)
				require.NoError(t, err)
				assert.InDelta(t, tt.wantTicks, ticks, 1)
			})
		})
	}
}

func TestRunShapeRejectsABadAlgorithm(t *testing.T) {
	_, err := RunShape(Shape{Kind: "fifo", Load: 1, Algorithm: limiter.FixedConfig{}}, 8, time.Millisecond)
	require.Error(t, err)
	_, err = RunShape(Shape{Kind: "lifo", Load: 1}, 8, time.Millisecond)
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrRefused))
}

// TestServerOutcome: an overrun is a drop before any success and when the
// call was held longer than twice the learned RTT, else Ignored.
func TestServerOutcome(t *testing.T) {
	tests := []struct {
		name    string
		learned time.Duration
		err     error
		held    time.Duration
		want    limiter.Outcome
	}{
		{"success", 10 * time.Millisecond, nil, time.Second, limiter.Success},
		{"overrun before any success", 0, context.DeadlineExceeded, time.Millisecond, limiter.Dropped},
		{"short overrun: the caller's deadline", 10 * time.Millisecond, context.DeadlineExceeded, 20 * time.Millisecond, limiter.Ignored},
		{"long overrun: the server's queue", 10 * time.Millisecond, context.DeadlineExceeded, 21 * time.Millisecond, limiter.Dropped},
		{"another error is the handler's", 10 * time.Millisecond, errors.New("refused"), time.Second, limiter.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v Server
			if tt.learned > 0 {
				v.rtt.Observe(tt.learned)
			}
			assert.Equal(t, tt.want, v.outcome(tt.err, tt.held))
		})
	}
}

// outcomes is a fixed limit that counts the outcomes it is told; the
// Limiter calls Update from every releasing goroutine.
type outcomes struct {
	limit   int
	mu      sync.Mutex
	counted map[limiter.Outcome]int
}

func (o *outcomes) New() (limiter.Algorithm, error) { return o, nil }
func (o *outcomes) Limit() int                      { return o.limit }
func (o *outcomes) Update(s limiter.Sample) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counted[s.Outcome]++
	return o.limit
}

// TestRunShapeServer: with Server, an overrun of a call held for less than
// twice the learned RTT is Ignored, as a server interceptor reports it;
// without, every overrun is a drop. At 8 × C with processor sharing and
// exponential service times calls take 8·S on average: most succeed and
// teach that RTT, and the slow ones pass the 10·S deadline.
func TestRunShapeServer(t *testing.T) {
	const c, s = 4, 10 * time.Millisecond
	for _, server := range []bool{false, true} {
		t.Run(fmt.Sprint(server), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := &outcomes{limit: 8 * c, counted: map[limiter.Outcome]int{}}
				_, err := RunShape(Shape{Kind: "ps", Dist: backend.Exponential, Load: 20, Seed: 1, Duration: 5 * time.Second,
					Algorithm: o, Server: server}, c, s)
				require.NoError(t, err)
				require.Positive(t, o.counted[limiter.Success])
				if server {
					assert.Positive(t, o.counted[limiter.Ignored], "overruns within twice the learned RTT")
				} else {
					assert.Zero(t, o.counted[limiter.Ignored])
					assert.Positive(t, o.counted[limiter.Dropped])
				}
			})
		})
	}
}
