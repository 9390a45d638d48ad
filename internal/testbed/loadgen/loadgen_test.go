package loadgen

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var started atomic.Int32
		var ticks []Window
		rep, err := Run(context.Background(), Config{
			Phases: []Phase{
				{Name: "warm", Duration: 2 * time.Second, Rate: 100, Start: func() { started.Add(1) }},
				{Name: "idle", Duration: time.Second, Rate: 0, Start: func() { started.Add(1) }},
			},
			Deadline: 50 * time.Millisecond,
			Seed:     7,
			Call: func(ctx context.Context) error {
				select {
				case <-time.After(10 * time.Millisecond):
				case <-ctx.Done():
				}
				return nil
			},
			Tick: func(w Window) { ticks = append(ticks, w) },
		})
		require.NoError(t, err)
		assert.Equal(t, int32(2), started.Load())
		assert.Equal(t, 3*time.Second, rep.Duration.Truncate(10*time.Millisecond))
		assert.InDelta(t, 200, len(rep.Calls), 40, "Poisson arrivals at 100/s for 2 s")
		for _, c := range rep.Calls {
			assert.Equal(t, 10*time.Millisecond, c.Latency)
			assert.True(t, c.Good(50*time.Millisecond))
			assert.Equal(t, 0, c.Phase)
		}
		s := rep.Phase(0, 0)
		assert.Equal(t, len(rep.Calls), s.Good)
		assert.InDelta(t, 100, s.Goodput, 20)
		assert.Equal(t, 10*time.Millisecond, s.P99)
		assert.Zero(t, rep.Phase(1, 0).Calls)

		require.Len(t, ticks, 3, "one tick per second")
		assert.Equal(t, len(rep.Calls), ticks[0].Offered+ticks[1].Offered)
		assert.Zero(t, ticks[2].Offered)
		secs := rep.Seconds()
		require.Len(t, secs, 3)
		assert.Equal(t, len(rep.Calls), secs[0].Good+secs[1].Good+secs[2].Good)
	})
}

func TestClassification(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errShed := errors.New("shed")
		// Calls run on their own goroutines: count them atomically.
		var n atomic.Int64
		rep, err := Run(context.Background(), Config{
			Phases:   []Phase{{Duration: time.Second, Rate: 50}},
			Deadline: 20 * time.Millisecond,
			Seed:     1,
			Call: func(ctx context.Context) error {
				switch n.Add(1) % 4 {
				case 0:
					return errShed
				case 1:
					<-ctx.Done()
					return ctx.Err()
				case 2:
					return errors.New("boom")
				}
				return nil
			},
			Classify: func(err error) Result {
				if errors.Is(err, errShed) {
					return Rejected
				}
				return defaultClassify(err)
			},
		})
		require.NoError(t, err)
		s := rep.Phase(0, 0)
		assert.Equal(t, s.Calls, s.Good+s.Rejected+s.Deadline+s.Failed)
		assert.NotZero(t, s.Good)
		assert.NotZero(t, s.Rejected)
		assert.NotZero(t, s.Deadline)
		assert.NotZero(t, s.Failed)
	})
}

func TestRunErrors(t *testing.T) {
	_, err := Run(context.Background(), Config{Deadline: time.Second})
	assert.EqualError(t, err, "loadgen: Config.Call is nil")
	call := func(context.Context) error { return nil }
	_, err = Run(context.Background(), Config{Call: call})
	assert.EqualError(t, err, "loadgen: Config.Deadline is 0s, must be positive")
	_, err = Run(context.Background(), Config{Call: call, Deadline: time.Second, Phases: []Phase{{Name: "x", Rate: -1, Duration: time.Second}}})
	assert.EqualError(t, err, `loadgen: phase 0 ("x") needs a positive duration and a rate >= 0, got 1s and -1`)
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{5, 1, 4, 2, 3}
	assert.Equal(t, time.Duration(3), Percentile(d, 0.5))
	assert.Equal(t, time.Duration(5), Percentile(d, 0.99))
	assert.Equal(t, time.Duration(1), Percentile(d, 0.01))
	assert.Zero(t, Percentile(nil, 0.99))
}

func TestCancelStopsArrivals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(500*time.Millisecond, cancel)
		rep, err := Run(ctx, Config{
			Phases:   []Phase{{Duration: 10 * time.Second, Rate: 100}},
			Deadline: time.Second,
			Call:     func(context.Context) error { return nil },
		})
		require.NoError(t, err)
		assert.Equal(t, 500*time.Millisecond, rep.Duration)
	})
}
