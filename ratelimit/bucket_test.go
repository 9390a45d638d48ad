package ratelimit

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newStepBucket returns a bucket on a clock the test steps by hand.
func newStepBucket(t *testing.T, rate float64, burst int) (*Bucket, *stepClock) {
	t.Helper()
	clk := newStepClock()
	b, err := newBucket(rate, burst, clk.Time)
	require.NoError(t, err)
	return b, clk
}

// elapse lets d pass. Inside a synctest bubble the time is virtual: it
// passes at once, when every goroutine of the bubble is blocked.
func elapse(d time.Duration) { <-time.After(d) }

func TestBucketConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rate  float64
		burst int
		want  string
	}{
		{"negative rate", -1, 1, "ratelimit: Bucket rate is -1, must be a finite number > 0"},
		{"zero rate", 0, 1, "ratelimit: Bucket rate is 0, must be a finite number > 0"},
		{"NaN rate", math.NaN(), 1, "ratelimit: Bucket rate is NaN, must be a finite number > 0"},
		{"infinite rate", math.Inf(1), 1, "ratelimit: Bucket rate is +Inf, must be a finite number > 0"},
		{"zero burst", 1, 0, "ratelimit: Bucket burst is 0, must be >= 1"},
		{"negative burst", 1, -3, "ratelimit: Bucket burst is -3, must be >= 1"},
		{"both", -2, 0, "ratelimit: Bucket rate is -2, must be a finite number > 0\n" +
			"ratelimit: Bucket burst is 0, must be >= 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBucket(tt.rate, tt.burst)
			assert.Nil(t, b)
			require.EqualError(t, err, tt.want)
		})
	}
}

func TestBucketSettersRefuseBadValues(t *testing.T) {
	b, _ := newStepBucket(t, 5, 2)
	assert.EqualError(t, b.SetRate(-1), "ratelimit: Bucket rate is -1, must be a finite number > 0")
	assert.EqualError(t, b.SetRate(math.Inf(1)), "ratelimit: Bucket rate is +Inf, must be a finite number > 0")
	assert.EqualError(t, b.SetBurst(0), "ratelimit: Bucket burst is 0, must be >= 1")
	assert.Equal(t, 5.0, b.Rate(), "a refused rate leaves the rate alone")
	assert.Equal(t, 2, b.Burst(), "a refused burst leaves the burst alone")
	assert.Equal(t, "Bucket(rate=5/s, burst=2)", b.String())
}

func TestBucketBurstThenRate(t *testing.T) {
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
				require.True(t, b.Allow(), "request %d of the burst", i)
			}
			require.False(t, b.Allow(), "the burst is spent")

			// Asking at every step admits exactly at the rate.
			var got []time.Duration
			for at := tt.step; at <= tt.over; at += tt.step {
				clk.Step(tt.step)
				if b.Allow() {
					got = append(got, at)
				}
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestBucketRetryAfterIsExact checks the promise of Decision.RetryAfter:
// one nanosecond earlier is too early, the moment itself is admitted.
func TestBucketRetryAfterIsExact(t *testing.T) {
	for _, rate := range []float64{0.5, 1, 3, 7, 10, 1000, 12345.678, 1e6, 1e9} {
		for _, burst := range []int{1, 3} {
			b, clk := newStepBucket(t, rate, burst)
			for range burst {
				require.True(t, b.Allow())
			}
			first := true
			for range 20 {
				d := b.Decide()
				require.False(t, d.Allowed)
				if first {
					assert.Equal(t, time.Duration(math.Ceil(1e9/rate)), d.RetryAfter, "rate %v: one token's time", rate)
					first = false
				}
				assert.Equal(t, d.RetryAfter, b.retryAfter(), "rate %v", rate)
				if d.RetryAfter > 1 {
					clk.Step(d.RetryAfter - 1)
					require.Equal(t, time.Duration(1), b.Decide().RetryAfter, "rate %v: 1 ns early", rate)
					clk.Step(1)
				} else {
					clk.Step(d.RetryAfter)
				}
				require.True(t, b.Allow(), "rate %v: admitted after RetryAfter %v", rate, d.RetryAfter)
			}
		}
	}
}

func TestBucketDecide(t *testing.T) {
	b, clk := newStepBucket(t, 1, 3)
	assert.Equal(t, Decision{Allowed: true, Remaining: 2}, b.Decide())
	assert.Equal(t, Decision{Allowed: true, Remaining: 1}, b.Decide())
	assert.Equal(t, Decision{Allowed: true, Remaining: 0}, b.Decide())
	assert.Equal(t, Decision{RetryAfter: time.Second}, b.Decide())
	assert.Equal(t, time.Second, b.retryAfter(), "a denial is not counted")

	clk.Step(250 * time.Millisecond)
	assert.Equal(t, 0.25, b.available())
	assert.Equal(t, Decision{RetryAfter: 750 * time.Millisecond}, b.Decide())

	clk.Step(time.Hour)
	assert.Equal(t, 3.0, b.available(), "the bucket holds no more than its burst")
	assert.Equal(t, time.Duration(0), b.retryAfter())
}

func TestBucketSetRate(t *testing.T) {
	b, clk := newStepBucket(t, 1, 10)
	for range 10 {
		require.True(t, b.Allow())
	}
	clk.Step(500 * time.Millisecond) // half a token, earned at 1/s
	require.NoError(t, b.SetRate(10))
	assert.Equal(t, 10.0, b.Rate())
	assert.Equal(t, 0.5, b.available(), "tokens earned before the change keep the old rate")
	assert.Equal(t, 50*time.Millisecond, b.retryAfter(), "the missing half comes at the new rate")

	clk.Step(50 * time.Millisecond)
	assert.True(t, b.Allow())

	require.NoError(t, b.SetRate(0.25))
	assert.Equal(t, 4*time.Second, b.retryAfter())
}

func TestBucketSetBurst(t *testing.T) {
	b, clk := newStepBucket(t, 1, 10)
	require.NoError(t, b.SetBurst(3))
	assert.Equal(t, 3, b.Burst())
	assert.Equal(t, 3.0, b.available(), "lowering the burst discards the excess")
	for range 3 {
		require.True(t, b.Allow())
	}
	require.False(t, b.Allow())

	require.NoError(t, b.SetBurst(6))
	assert.Equal(t, 0.0, b.available(), "raising the burst adds no tokens")
	clk.Step(time.Minute)
	assert.Equal(t, 6.0, b.available(), "the new room fills at the rate")
}

func TestBucketClockBackwards(t *testing.T) {
	b, clk := newStepBucket(t, 1, 2)
	require.True(t, b.Allow())
	clk.Step(-10 * time.Second)
	assert.True(t, b.Allow(), "tokens in hand can be spent whatever the clock")
	assert.False(t, b.Allow())
	assert.Equal(t, 11*time.Second, b.retryAfter(), "the clock must catch up before the bucket refills")

	clk.Step(10 * time.Second) // back where it was: nothing was earned meanwhile
	assert.Equal(t, 0.0, b.available())
	assert.Equal(t, time.Second, b.retryAfter())
	clk.Step(time.Second)
	assert.True(t, b.Allow())
	assert.False(t, b.Allow())
}

func TestBucketConcurrentAllow(t *testing.T) {
	b, clk := newStepBucket(t, 100, 50)
	// admitted counts the tokens 8 goroutines get from Allow and Decide
	// while the clock stands still: every token goes to exactly one call.
	admitted := func() int {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			total int
		)
		// Setters and readers run alongside; setting the same values
		// changes no count.
		wg.Go(func() {
			for range 100 {
				assert.NoError(t, b.SetRate(100))
				assert.NoError(t, b.SetBurst(50))
				_, _, _ = b.retryAfter(), b.available(), b.waiters()
			}
		})
		for range 8 {
			wg.Go(func() {
				n := 0
				for range 100 {
					if b.Allow() {
						n++
					}
					if b.Decide().Allowed {
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

func TestBucketWaitIsFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := NewBucket(1, 1)
		require.NoError(t, err)
		require.True(t, b.Allow())
		start := time.Now()

		type admission struct {
			who int
			at  time.Duration
		}
		admitted := make(chan admission, 3)
		for i := range 3 {
			go func() {
				assert.NoError(t, b.Wait(context.Background()))
				admitted <- admission{i, time.Since(start)}
			}()
			synctest.Wait() // queued in this order
		}
		assert.Equal(t, 3, b.waiters())
		assert.False(t, b.Allow(), "Allow never overtakes the waiters")
		assert.Equal(t, 4*time.Second, b.retryAfter(), "a newcomer comes after the three waiters")

		for i := range 3 {
			assert.Equal(t, admission{i, time.Duration(i+1) * time.Second}, <-admitted)
		}
		assert.Equal(t, 0, b.waiters())
	})
}

func TestBucketWaitCancellation(t *testing.T) {
	type waiter struct {
		cancel context.CancelFunc
		done   chan time.Duration // when Wait returned nil
		err    chan error
	}
	// start queues a waiter and returns once it is parked.
	start := func(b *Bucket, origin time.Time) waiter {
		ctx, cancel := context.WithCancel(context.Background())
		w := waiter{cancel, make(chan time.Duration, 1), make(chan error, 1)}
		go func() {
			if err := b.Wait(ctx); err != nil {
				w.err <- err
				return
			}
			w.done <- time.Since(origin)
		}()
		synctest.Wait()
		return w
	}

	t.Run("head", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, _ := NewBucket(1, 1)
			require.True(t, b.Allow())
			origin := time.Now()
			w0, w1 := start(b, origin), start(b, origin)
			elapse(500 * time.Millisecond)
			w0.cancel()
			assert.ErrorIs(t, <-w0.err, context.Canceled)
			assert.Equal(t, time.Second, <-w1.done, "the next waiter gets the token the cancelled one would have had")
			w1.cancel()
		})
	})
	t.Run("middle", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, _ := NewBucket(1, 1)
			require.True(t, b.Allow())
			origin := time.Now()
			w0, w1, w2 := start(b, origin), start(b, origin), start(b, origin)
			elapse(500 * time.Millisecond)
			w1.cancel()
			assert.ErrorIs(t, <-w1.err, context.Canceled)
			assert.Equal(t, 2, b.waiters())
			assert.Equal(t, time.Second, <-w0.done)
			assert.Equal(t, 2*time.Second, <-w2.done, "the cancelled waiter holds nobody up")
			w0.cancel()
			w2.cancel()
		})
	})
	t.Run("at the moment of its token", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, _ := NewBucket(1, 1)
			require.True(t, b.Allow())
			origin := time.Now()
			w0, w1 := start(b, origin), start(b, origin)
			go func() {
				elapse(time.Second) // fires with the head's timer
				w0.cancel()
			}()
			select {
			case at := <-w0.done: // the token came first: it was used
				assert.Equal(t, time.Second, at)
				assert.Equal(t, 2*time.Second, <-w1.done)
			case err := <-w0.err: // the cancellation came first: it moved on
				assert.ErrorIs(t, err, context.Canceled)
				assert.Equal(t, time.Second, <-w1.done)
			}
			w1.cancel()
			assert.Equal(t, 0, b.waiters())
			assert.Equal(t, 0.0, b.available(), "no token was lost nor duplicated")
		})
	})
	t.Run("done before", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, _ := NewBucket(1, 1)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			assert.ErrorIs(t, b.Wait(ctx), context.Canceled)
			assert.Equal(t, 1.0, b.available(), "a caller already gone takes nothing")
		})
	})
	t.Run("deadline too soon", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, _ := NewBucket(1, 1)
			require.True(t, b.Allow())
			for _, timeout := range []time.Duration{500 * time.Millisecond, time.Second} {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				origin := time.Now()
				assert.ErrorIs(t, b.Wait(ctx), ErrRateLimited, "timeout %v", timeout)
				assert.Equal(t, time.Duration(0), time.Since(origin), "fails at once, without waiting")
				assert.Equal(t, 0, b.waiters())
				cancel()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			origin := time.Now()
			assert.NoError(t, b.Wait(ctx))
			assert.Equal(t, time.Second, time.Since(origin))
		})
	})
}

func TestBucketSetRateWakesTheHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := NewBucket(0.5, 1)
		require.True(t, b.Allow())
		origin := time.Now()
		done := make(chan time.Duration, 1)
		go func() {
			assert.NoError(t, b.Wait(context.Background()))
			done <- time.Since(origin)
		}()
		elapse(time.Second) // half a token earned at 0.5/s
		require.NoError(t, b.SetRate(2))
		assert.Equal(t, 1250*time.Millisecond, <-done, "the other half came at 2/s")

		// Changing the burst while a waiter is parked nudges it: it
		// looks again, keeps its place and gets its token on time.
		go func() {
			assert.NoError(t, b.Wait(context.Background()))
			done <- time.Since(origin)
		}()
		elapse(100 * time.Millisecond)
		require.NoError(t, b.SetBurst(2))
		assert.Equal(t, 1750*time.Millisecond, <-done)
	})
}

// TestBucketWaitConcurrent starts many waiters at once, some of
// which give up; every other one is served at the rate, none twice.
func TestBucketWaitConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := NewBucket(10, 1)
		origin := time.Now()
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			admitted []time.Duration
			gaveUp   int
		)
		for i := range 30 {
			wg.Go(func() {
				ctx := context.Background()
				if i%3 == 2 {
					c, cancel := context.WithCancel(ctx)
					defer cancel()
					ctx = c
					go func() { elapse(time.Duration(i) * 10 * time.Millisecond); cancel() }()
				}
				err := b.Wait(ctx)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					assert.ErrorIs(t, err, context.Canceled)
					gaveUp++
					return
				}
				admitted = append(admitted, time.Since(origin))
			})
		}
		wg.Wait()
		slices.Sort(admitted)
		want := make([]time.Duration, len(admitted))
		for i := range want {
			want[i] = time.Duration(i) * 100 * time.Millisecond
		}
		assert.Equal(t, want, admitted, "one every 100 ms, from the start, without gaps")
		assert.Equal(t, 30, len(admitted)+gaveUp)
		assert.Positive(t, gaveUp)
		assert.Equal(t, 0, b.waiters())
	})
}

func TestBucketWaitImmediate(t *testing.T) {
	b, _ := newStepBucket(t, 1, 2)
	assert.NoError(t, b.Wait(context.Background()), "a free token is taken without queueing")
	assert.NoError(t, b.Wait(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	assert.True(t, errors.Is(b.Wait(ctx), ErrRateLimited), "1 s away, beyond the deadline")
}
