package limiter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fixedLimiter(t *testing.T, n int, opts ...Option) *Limiter {
	t.Helper()
	f, err := newFixed(n)
	require.NoError(t, err)
	l, err := New(append([]Option{WithAlgorithm(f)}, opts...)...)
	require.NoError(t, err)
	return l
}

// acquireN takes n permits or fails the test.
func acquireN(t *testing.T, l *Limiter, n int) []Token {
	t.Helper()
	toks := make([]Token, n)
	for i := range toks {
		var ok bool
		toks[i], ok = l.TryAcquire()
		require.True(t, ok, "permit %d of %d", i+1, n)
	}
	return toks
}

// assertSettled checks the invariant users rely on: with no call in
// flight, the permits free equal the limit and nobody waits.
func assertSettled(t *testing.T, l *Limiter) {
	t.Helper()
	s := state(l.state.Load())
	assert.Equal(t, 0, l.Inflight(), "in flight")
	assert.Equal(t, l.Limit(), s.avail(), "free permits")
	assert.Equal(t, 0, s.waiters(), "waiters")
}

func TestTryAcquireUpToTheLimit(t *testing.T) {
	l := fixedLimiter(t, 3)
	toks := acquireN(t, l, 3)
	assert.Equal(t, 3, l.Inflight())
	_, ok := l.TryAcquire()
	assert.False(t, ok, "the fourth permit")

	toks[0].Release(Success)
	assert.False(t, toks[0].Held())
	assert.Equal(t, 2, l.Inflight())
	tok, ok := l.TryAcquire()
	require.True(t, ok)
	assert.True(t, tok.Held())

	tok.Release(Success)
	toks[1].Release(Dropped)
	toks[2].Release(Ignored)
	assertSettled(t, l)
}

func TestReleaseIsIdempotent(t *testing.T) {
	l := fixedLimiter(t, 2)
	tok, ok := l.TryAcquire()
	require.True(t, ok)
	tok.Release(Success)
	tok.Release(Success) // must not free a second permit
	assertSettled(t, l)
	assert.Equal(t, 2, state(l.state.Load()).avail())

	var zero Token
	zero.Release(Success) // the zero Token holds nothing
	assertSettled(t, l)
}

// TestTokenGranted: Granted is the instant of the grant, the start of the
// RTT that Release measures, on the monotonic clock; the zero Token and a
// released one have none.
func TestTokenGranted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fixedLimiter(t, 1)
		var zero Token
		assert.True(t, zero.Granted().IsZero(), "zero Token")

		time.Sleep(time.Second) // the grant is not at l's creation
		want := time.Now()
		tok, ok := l.TryAcquire()
		require.True(t, ok)
		time.Sleep(3 * time.Second)
		assert.True(t, tok.Granted().Equal(want), "Granted %v, want %v", tok.Granted(), want)
		assert.Equal(t, 3*time.Second, time.Since(tok.Granted()))
		assert.Equal(t, 3*time.Second, tok.Release(Success), "the RTT Release measures starts at Granted")
		assert.True(t, tok.Granted().IsZero(), "released Token")
	})
}

// TestDebt ports the scenarios of seed 000: a lower limit never revokes a
// permit; releases pay the debt until in-flight fits the new limit.
func TestDebt(t *testing.T) {
	t.Run("shrink below in-flight", func(t *testing.T) {
		l := fixedLimiter(t, 5)
		toks := acquireN(t, l, 3)
		require.NoError(t, l.Pin(1))
		assert.Equal(t, 1, l.Limit())
		assert.Equal(t, 3, l.Inflight(), "nobody is revoked")
		assert.Equal(t, -2, state(l.state.Load()).avail(), "a debt of 2")

		toks[0].Release(Success)
		_, ok := l.TryAcquire()
		assert.False(t, ok, "the release paid debt")
		toks[1].Release(Success)
		_, ok = l.TryAcquire()
		assert.False(t, ok, "one in flight, limit 1")
		toks[2].Release(Success)
		assertSettled(t, l)
		tok, ok := l.TryAcquire()
		assert.True(t, ok, "the new limit is available once the debt is paid")
		tok.Release(Success)
	})
	t.Run("pin zero while held", func(t *testing.T) {
		l := fixedLimiter(t, 3)
		toks := acquireN(t, l, 3)
		require.NoError(t, l.Pin(0))
		for i := range toks {
			toks[i].Release(Success)
		}
		assertSettled(t, l)
		_, ok := l.TryAcquire()
		assert.False(t, ok, "limit 0 admits nothing")
	})
	t.Run("grow while in debt", func(t *testing.T) {
		l := fixedLimiter(t, 5)
		toks := acquireN(t, l, 3)
		require.NoError(t, l.Pin(1))
		require.NoError(t, l.Pin(5))
		more := acquireN(t, l, 2) // 5 in flight, the new limit
		_, ok := l.TryAcquire()
		assert.False(t, ok)
		for _, ts := range [][]Token{toks, more} {
			for i := range ts {
				ts[i].Release(Success)
			}
		}
		assertSettled(t, l)
		assert.Equal(t, 5, l.Limit())
	})
}

func TestPin(t *testing.T) {
	alg := &scripted{limit: 4}
	var changes [][2]int
	l, err := New(WithAlgorithm(alg))
	require.NoError(t, err)
	l.onChange = func(old, new int) { changes = append(changes, [2]int{old, new}) }

	require.NoError(t, l.Pin(9))
	assert.True(t, l.isPinned())
	alg.limit = 6
	tok, _ := l.TryAcquire()
	tok.Release(Success)
	assert.Equal(t, 9, l.Limit(), "pinned: the algorithm's 6 is not applied")

	l.Unpin()
	assert.False(t, l.isPinned())
	assert.Equal(t, 6, l.Limit())
	assert.Equal(t, [][2]int{{4, 9}, {9, 6}}, changes)

	for _, bad := range []int{-1, MaxLimit + 1} {
		err := l.Pin(bad)
		assert.ErrorContains(t, err, "limiter: pinned limit is")
		assert.ErrorContains(t, err, "must be in [0, 1048576]")
	}
	assertSettled(t, l)
}

func TestFollowsTheAlgorithm(t *testing.T) {
	alg := &scripted{limit: 2}
	l, err := New(WithAlgorithm(alg))
	require.NoError(t, err)
	toks := acquireN(t, l, 2)

	alg.limit = 1 // the next release reports overload
	toks[0].Release(Dropped)
	assert.Equal(t, 1, l.Limit())
	assert.Equal(t, Sample{RTT: alg.got[0].RTT, Inflight: 1, Outcome: Dropped, At: alg.got[0].At}, alg.got[0],
		"the first token saw 1 in flight when granted")
	assert.Equal(t, 2, alg.got[0].Inflight+1, "and the second token 2")
	_, ok := l.TryAcquire()
	assert.False(t, ok)

	alg.limit = 0 // an algorithm below 1 is clamped
	toks[1].Release(Success)
	assert.Equal(t, 1, l.Limit())
	assertSettled(t, l)
}

// scripted is an Algorithm whose limit the test sets.
type scripted struct {
	mu    sync.Mutex
	limit int
	got   []Sample
}

func (s *scripted) Update(x Sample) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, x)
	return s.limit
}

func (s *scripted) Limit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

func TestNewErrors(t *testing.T) {
	for _, tt := range []struct {
		q    Queue
		want string
	}{
		{Queue{Size: -1}, "limiter: Queue.Size is -1, must be in [0, 1048576]"},
		{Queue{Size: MaxLimit + 1}, "limiter: Queue.Size is 1048577, must be in [0, 1048576]"},
		{Queue{Target: -time.Second}, "limiter: Queue.Target is -1s, must be >= 0"},
		{Queue{Size: 4, Target: time.Second}, "limiter: Queue.Target is 1s, must be 0 when Queue.Size is set (4): set one bound"},
	} {
		_, err := New(WithQueue(tt.q))
		assert.EqualError(t, err, tt.want)
	}

	l, err := New(nil) // a nil Option is ignored
	require.NoError(t, err)
	assert.Equal(t, defaultAIMDMaxLimit, l.Limit(), "the default admits every call until the first returns")
}

func TestAcquireWithoutQueue(t *testing.T) {
	l := fixedLimiter(t, 1)
	tok, err := l.Acquire(context.Background())
	require.NoError(t, err)
	_, err = l.Acquire(context.Background())
	assert.ErrorIs(t, err, ErrLimitExceeded)
	tok.Release(Success)
	assertSettled(t, l)
}

func TestWaitersAreServedInOrder(t *testing.T) {
	for _, tt := range []struct {
		name string
		lifo bool
		want []int
	}{
		{"fifo", false, []int{0, 1, 2}},
		{"lifo", true, []int{2, 1, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := fixedLimiter(t, 1, WithQueue(Queue{Size: 3, LIFO: tt.lifo}))
				held, _ := l.TryAcquire()
				var (
					mu    sync.Mutex
					order []int
				)
				for i := range 3 {
					go func() {
						tok, err := l.Acquire(context.Background())
						if !assert.NoError(t, err) {
							return
						}
						mu.Lock()
						order = append(order, i)
						mu.Unlock()
						tok.Release(Success) // hands the permit on
					}()
					synctest.Wait() // queued in this order
				}
				assert.Equal(t, 3, l.QueueLen())

				_, err := l.Acquire(context.Background())
				assert.ErrorIs(t, err, ErrLimitExceeded, "the queue is full: rejected at once")
				_, ok := l.TryAcquire()
				assert.False(t, ok, "TryAcquire never overtakes the queue")

				held.Release(Success)
				synctest.Wait()
				assert.Equal(t, tt.want, order)
				assertSettled(t, l)
			})
		})
	}
}

func TestWaiterCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fixedLimiter(t, 1, WithQueue(Queue{Size: 2}))
		held, _ := l.TryAcquire()

		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := l.Acquire(ctx)
			errc <- err
		}()
		synctest.Wait()
		require.Equal(t, 1, l.QueueLen())
		cancel()
		assert.ErrorIs(t, <-errc, context.Canceled)
		assert.Equal(t, 0, l.QueueLen(), "a cancelled waiter leaves the queue")

		// A deadline ends the wait the same way.
		dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
		defer dcancel()
		start := time.Now()
		_, err := l.Acquire(dctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))

		// A context that is already done never queues.
		_, err = l.Acquire(ctx)
		assert.ErrorIs(t, err, context.Canceled)

		held.Release(Success)
		assertSettled(t, l)
	})
}

// TestPermitReachingACancelledWaiter covers the race in which a permit is
// handed to a waiter whose context ends at the same moment: the permit
// must go to the next waiter, not vanish.
func TestPermitReachingACancelledWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fixedLimiter(t, 1, WithQueue(Queue{Size: 2}))
		held, _ := l.TryAcquire()

		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() {
			tok, err := l.Acquire(ctx)
			tok.Release(Success)
			first <- err
		}()
		synctest.Wait()
		second := make(chan Token, 1)
		go func() {
			tok, err := l.Acquire(context.Background())
			assert.NoError(t, err)
			second <- tok
		}()
		synctest.Wait()

		// Both happen before the first waiter runs again: it finds its
		// context done and a permit in hand.
		cancel()
		held.Release(Success)
		err := <-first
		tok := <-second // the permit moved on
		if err == nil {
			// The waiter saw its permit before its context: it used it and
			// released it, which is just as good.
			t.Log("the waiter won the race")
		} else {
			assert.ErrorIs(t, err, context.Canceled)
		}
		tok.Release(Success)
		assertSettled(t, l)
	})
}

func TestGrowthServesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fixedLimiter(t, 1, WithQueue(Queue{Size: 5}))
		held, _ := l.TryAcquire()
		type result struct {
			tok Token
			err error
		}
		got := make(chan result, 3)
		for range 3 {
			go func() {
				tok, err := l.Acquire(context.Background())
				got <- result{tok, err}
			}()
		}
		synctest.Wait()
		require.NoError(t, l.Pin(3)) // two more permits: two waiters in
		synctest.Wait()
		require.Len(t, got, 2)
		assert.Equal(t, 1, l.QueueLen())

		require.NoError(t, l.Pin(0)) // disabled: the last waiter is rejected
		synctest.Wait()
		assert.Equal(t, 0, l.QueueLen())
		held.Release(Success)
		var rejected int
		for range 3 {
			r := <-got
			if r.err != nil {
				assert.ErrorIs(t, r.err, ErrLimitExceeded)
				rejected++
			}
			r.tok.Release(Success)
		}
		assert.Equal(t, 1, rejected)
		assertSettled(t, l)
		_, err := l.Acquire(context.Background())
		assert.ErrorIs(t, err, ErrLimitExceeded, "limit 0 queues nobody")
	})
}

func TestLittleQueueBound(t *testing.T) {
	b := queueBound{q: Queue{Target: 30 * time.Millisecond}}
	assert.Equal(t, 1, b.max(10), "1 until a latency at capacity is known")
	b.observe(20 * time.Millisecond)
	assert.Equal(t, 5, b.max(10), "10 × (30/20 − 1)")
	b.observe(10 * time.Millisecond) // 20 + 0.1 × (10 − 20) = 19 ms
	assert.Equal(t, 5, b.max(10), "10 × (30/19 − 1) = 5.8")
	for range 100 {
		b.observe(60 * time.Millisecond)
	}
	assert.Equal(t, 1, b.max(10), "slower than the target: at least 1")

	assert.Equal(t, 7, (&queueBound{q: Queue{Size: 7}}).max(1000))
	assert.Equal(t, 0, (&queueBound{q: Queue{}}).max(1000))
}

func TestLittleQueueLearnsAtCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fixedLimiter(t, 2, WithQueue(Queue{Target: 30 * time.Millisecond}))
		toks := acquireN(t, l, 2)
		time.Sleep(10 * time.Millisecond) // the calls take 10 ms, virtually
		toks[0].Release(Success)          // ran at capacity: 2 of 2
		toks[1].Release(Success)
		assert.Equal(t, 4, l.queue.max(2), "2 × (30/10 − 1)")
		assertSettled(t, l)
	})
}

// TestStress acquires, waits, cancels and releases from many goroutines
// while another goroutine moves the limit at random. Afterwards nothing may
// be held, owed or queued, and the pool must equal the final limit.
func TestStress(t *testing.T) {
	l := fixedLimiter(t, 16, WithQueue(Queue{Size: 8}))
	var (
		held     atomic.Int64
		maxLimit atomic.Int64
		workers  sync.WaitGroup
	)
	maxLimit.Store(16)
	iterations := 3000
	if raceEnabled {
		iterations = 1000
	}
	for w := range 8 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range iterations {
				var (
					tok Token
					ok  bool
				)
				if rng.IntN(2) == 0 {
					tok, ok = l.TryAcquire()
				} else {
					ctx, cancel := context.WithCancel(context.Background())
					if rng.IntN(4) == 0 {
						go cancel() // cancel while possibly queued
					}
					var err error
					tok, err = l.Acquire(ctx)
					ok = err == nil
					cancel()
				}
				if !ok {
					continue
				}
				if h := held.Add(1); h > maxLimit.Load() {
					t.Errorf("%d permits held, above every limit set (%d)", h, maxLimit.Load())
				}
				if rng.IntN(3) == 0 {
					time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
				}
				held.Add(-1)
				tok.Release(Outcome(rng.IntN(3)))
			}
		}()
	}

	stop := make(chan struct{})
	resized := make(chan struct{})
	go func() {
		defer close(resized)
		rng := rand.New(rand.NewPCG(99, 1))
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := 1 + rng.IntN(24)
			if int64(n) > maxLimit.Load() {
				maxLimit.Store(int64(n))
			}
			assert.NoError(t, l.Pin(n))
			time.Sleep(time.Duration(rng.IntN(20)) * time.Microsecond)
		}
	}()

	workers.Wait()
	close(stop)
	<-resized
	require.NoError(t, l.Pin(15))
	assertSettled(t, l)
	assert.Equal(t, 15, state(l.state.Load()).avail())
}

// markingAlgorithm is a fixed limit that counts grants as grantCounter
// does, answering cohort and full for every grant, and keeps the samples.
type markingAlgorithm struct {
	cohort, full bool
	mu           sync.Mutex
	samples      []Sample
}

func (a *markingAlgorithm) granted(int) (cohort, full bool) { return a.cohort, a.full }
func (a *markingAlgorithm) Limit() int                      { return 100 }
func (a *markingAlgorithm) Update(s Sample) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.samples = append(a.samples, s)
	return 100
}

// TestGrantMarks: what an algorithm answers at a call's grant comes back
// in that call's Sample, beside the calls in flight at the grant and the
// caller it counts to, whatever else the Token packs.
func TestGrantMarks(t *testing.T) {
	for _, tt := range []struct{ cohort, full bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("cohort=%v,full=%v", tt.cohort, tt.full), func(t *testing.T) {
			alg := &markingAlgorithm{cohort: tt.cohort, full: tt.full}
			l, err := New(WithAlgorithm(alg))
			require.NoError(t, err)
			first, ok := l.TryAcquire()
			require.True(t, ok)
			second, err := l.TryAcquireFor("alice", 0)
			require.NoError(t, err)
			second.Release(Success)
			first.Release(Dropped)
			require.Len(t, alg.samples, 2)
			for i, s := range alg.samples {
				assert.Equal(t, tt.cohort, s.cohort, "sample %d: cohort", i)
				assert.Equal(t, tt.full, s.full, "sample %d: full", i)
				assert.Equal(t, 2-i, s.Inflight, "sample %d: in flight at the grant", i)
			}
			assert.Equal(t, Success, alg.samples[0].Outcome)
			assert.Equal(t, Dropped, alg.samples[1].Outcome)
		})
	}
}
