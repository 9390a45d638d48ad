package bucket

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// stepClock is a clock a test moves by hand, forward or back.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newStepBucket(t *testing.T, rate float64, burst int) (*Bucket, *stepClock) {
	t.Helper()
	clk := &stepClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b, err := newOnClock(rate, burst, clk.Now)
	require.NoError(t, err)
	return b, clk
}

func allow(b *Bucket) bool {
	_, ok := b.Take()
	return ok
}

func TestNewErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rate  float64
		burst int
		want  string
	}{
		{"negative rate", -1, 1, "rate of -1 a second, must be a finite number > 0"},
		{"zero rate", 0, 1, "rate of 0 a second, must be a finite number > 0"},
		{"NaN rate", math.NaN(), 1, "rate of NaN a second, must be a finite number > 0"},
		{"infinite rate", math.Inf(1), 1, "rate of +Inf a second, must be a finite number > 0"},
		{"zero burst", 1, 0, "burst of 0, must be >= 1"},
		{"both", -2, -3, "rate of -2 a second, must be a finite number > 0\nburst of -3, must be >= 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.rate, tt.burst)
			assert.Nil(t, b)
			require.EqualError(t, err, tt.want)
		})
	}
}

func TestBurstThenRate(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rate  float64
		burst int
		step  time.Duration
		over  time.Duration
		want  []time.Duration // admission times after the burst
	}{
		{"10/s", 10, 5, time.Millisecond, 500 * time.Millisecond,
			[]time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond}},
		{"0.5/s", 0.5, 2, 100 * time.Millisecond, 7 * time.Second,
			[]time.Duration{2 * time.Second, 4 * time.Second, 6 * time.Second}},
		{"4/s burst 1", 4, 1, 50 * time.Millisecond, time.Second,
			[]time.Duration{250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, time.Second}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, clk := newStepBucket(t, tt.rate, tt.burst)
			for i := range tt.burst {
				require.True(t, allow(b), "call %d of the burst", i)
			}
			require.False(t, allow(b), "the burst is spent")

			var got []time.Duration
			for at := tt.step; at <= tt.over; at += tt.step {
				clk.Step(tt.step)
				if allow(b) {
					got = append(got, at)
				}
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestRetryAfterIsExact checks Take's promise: one nanosecond before
// retryAfter is too early, the moment itself is admitted.
func TestRetryAfterIsExact(t *testing.T) {
	for _, rate := range []float64{0.5, 1, 3, 7, 10, 1000, 12345.678, 1e6, 1e9} {
		for _, burst := range []int{1, 3} {
			b, clk := newStepBucket(t, rate, burst)
			for range burst {
				require.True(t, allow(b))
			}
			for i := range 20 {
				after, ok := b.Take()
				require.False(t, ok)
				if i == 0 {
					assert.Equal(t, time.Duration(math.Ceil(1e9/rate)), after, "rate %v: one token's time", rate)
				}
				if after > 1 {
					clk.Step(after - 1)
					early, ok := b.Take()
					require.False(t, ok)
					require.Equal(t, time.Duration(1), early, "rate %v: 1 ns early", rate)
					clk.Step(1)
				} else {
					clk.Step(after)
				}
				require.True(t, allow(b), "rate %v: admitted after %v", rate, after)
			}
		}
	}
}

func TestRefund(t *testing.T) {
	b, clk := newStepBucket(t, 1, 2)
	require.True(t, allow(b))
	require.True(t, allow(b))
	after, ok := b.Take()
	require.False(t, ok)
	assert.Equal(t, time.Second, after, "a refusal is not counted")

	b.Refund()
	require.True(t, allow(b), "a refunded token is spent again")
	b.Refund()
	b.Refund()
	b.Refund()
	clk.Step(time.Hour)
	require.True(t, allow(b))
	require.True(t, allow(b))
	require.False(t, allow(b), "refunds never fill the bucket past its burst")
}

func TestClockBackwards(t *testing.T) {
	b, clk := newStepBucket(t, 1, 2)
	require.True(t, allow(b))
	clk.Step(-10 * time.Second)
	assert.True(t, allow(b), "tokens in hand can be spent whatever the clock")
	after, ok := b.Take()
	assert.False(t, ok)
	assert.Equal(t, 11*time.Second, after, "the clock must catch up before the bucket refills")

	clk.Step(10 * time.Second) // back where it was: nothing was earned meanwhile
	after, _ = b.Take()
	assert.Equal(t, time.Second, after)
	clk.Step(time.Second)
	assert.True(t, allow(b))
	assert.False(t, allow(b))
}

func TestConcurrentTake(t *testing.T) {
	b, clk := newStepBucket(t, 100, 50)
	// admitted counts the tokens 8 goroutines get while the clock stands
	// still: every token goes to exactly one call.
	admitted := func() int {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			total int
		)
		for range 8 {
			wg.Go(func() {
				n := 0
				for range 100 {
					if allow(b) {
						n++
					}
				}
				mu.Lock()
				total += n
				mu.Unlock()
			})
		}
		wg.Wait()
		return total
	}
	assert.Equal(t, 50, admitted(), "a full bucket pays out its burst, once")
	clk.Step(200 * time.Millisecond)
	assert.Equal(t, 20, admitted(), "then the rate")
}

// BenchmarkTake measures the admitting path: the rate is so high that
// every call finds a token.
func BenchmarkTake(b *testing.B) {
	tb, err := New(1e12, 1<<30)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if !allow(tb) {
			b.Fatal("denied at a rate of 1e12/s")
		}
	}
}
