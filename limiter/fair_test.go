package limiter

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// take asks for one permit for caller and appends it to held.
func take(t *testing.T, l *Limiter, caller string, leave int, held *[]Token) error {
	t.Helper()
	tok, err := l.TryAcquireFor(caller, leave)
	if err == nil {
		*held = append(*held, tok)
	}
	return err
}

func releaseAll(toks []Token) {
	for i := range toks {
		toks[i].Release(Success)
	}
}

func TestTryAcquireForLeave(t *testing.T) {
	l := fixedLimiter(t, 4)
	var held []Token
	for range 2 {
		require.NoError(t, take(t, l, "", 2, &held))
	}
	assert.ErrorIs(t, take(t, l, "", 2, &held), ErrLimitExceeded, "2 free permits are left for higher priorities")
	require.NoError(t, take(t, l, "", 0, &held), "the permits left are for priority 0")
	require.NoError(t, take(t, l, "", -5, &held), "a negative leave is none")
	assert.ErrorIs(t, take(t, l, "", 0, &held), ErrLimitExceeded)
	releaseAll(held)
	assertSettled(t, l)
}

// TestFairShare walks the rule: with a limit of 16, what a caller holding
// some permits may take while others hold theirs.
func TestFairShare(t *testing.T) {
	tests := []struct {
		name   string
		before map[string]int // permits held by each caller first
		caller string
		want   int   // further permits the caller gets, one at a time
		err    error // what refuses the next one
	}{
		{"a lone caller takes the whole limit", nil, "heavy", 16, ErrLimitExceeded},
		// Two callers: band = min(2-1, 16/4) = 1.
		{"within its share, a caller goes a band past the limit", map[string]int{"heavy": 12}, "light", 5, ErrLimitExceeded},
		{"over its share, a caller leaves a band free", map[string]int{"light": 1}, "heavy", 14, ErrOverShare},
		// Five callers: the heavy one leaves min(4, 16/4) = 4 free.
		{"a heavy caller among light ones", map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}, "heavy", 8, ErrOverShare},
		{"the empty caller has no share", map[string]int{"light": 1}, "", 15, ErrLimitExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := fixedLimiter(t, 16)
			var held []Token
			defer func() { releaseAll(held); assertSettled(t, l) }()
			for caller, n := range tt.before {
				for range n {
					require.NoError(t, take(t, l, caller, 0, &held))
				}
			}
			got := 0
			var err error
			for got < 100 {
				if err = take(t, l, tt.caller, 0, &held); err != nil {
					break
				}
				got++
			}
			assert.Equal(t, tt.want, got, "permits taken")
			assert.ErrorIs(t, err, tt.err)
		})
	}
}

func TestFairShareCountsReleases(t *testing.T) {
	l := fixedLimiter(t, 8)
	var heavy, light []Token
	for range 7 {
		require.NoError(t, take(t, l, "heavy", 0, &heavy))
	}
	require.NoError(t, take(t, l, "light", 0, &light))
	assert.ErrorIs(t, take(t, l, "heavy", 0, &heavy), ErrOverShare, "the limit is full, and heavy is over its share")
	require.NoError(t, take(t, l, "light", 0, &light), "light goes a band (1) past the limit")
	assert.Equal(t, 9, l.Inflight())
	assert.ErrorIs(t, take(t, l, "light", 0, &light), ErrLimitExceeded, "and no further")
	releaseAll(light)
	// light holds nothing but counts for a second: heavy, with 7 of the 9
	// grants, must leave 1 free.
	assert.ErrorIs(t, take(t, l, "heavy", 0, &heavy), ErrOverShare)
	releaseAll(heavy)
	l.callers.mu.Lock()
	assert.Equal(t, map[uint32]int32{l.callers.hash("heavy"): 0, l.callers.hash("light"): 0}, heldOf(l))
	l.callers.mu.Unlock()
	assertSettled(t, l)
}

// heldOf returns the permits each remembered caller holds.
func heldOf(l *Limiter) map[uint32]int32 {
	out := map[uint32]int32{}
	for h, st := range l.callers.seats {
		out[h] = st.held
	}
	return out
}

// TestFairShareForgets: a caller that took nothing for a second is
// forgotten.
func TestFairShareForgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fixedLimiter(t, 8)
		var held []Token
		for range 7 {
			require.NoError(t, take(t, l, "heavy", 0, &held))
		}
		var light []Token
		require.NoError(t, take(t, l, "light", 0, &light))
		releaseAll(light)
		assert.ErrorIs(t, take(t, l, "heavy", 0, &held), ErrOverShare, "light counts while recent")
		time.Sleep(1500 * time.Millisecond) // virtual time: the bubble is idle
		require.NoError(t, take(t, l, "heavy", 0, &held), "alone again after a second: the whole limit")
		releaseAll(held)
		assertSettled(t, l)
	})
}

// TestAttackFairShareNameFlood: a caller that makes up a new name for
// every call grows no table past its bound, and the callers holding
// permits are never forgotten.
func TestAttackFairShareNameFlood(t *testing.T) {
	l := fixedLimiter(t, 8)
	var held []Token
	require.NoError(t, take(t, l, "victim", 0, &held))
	for i := range 3 * fairSeats {
		var one []Token
		require.NoError(t, take(t, l, fmt.Sprintf("made-up-%d", i), 0, &one))
		releaseAll(one)
	}
	l.callers.mu.Lock()
	n := len(l.callers.seats)
	victim := l.callers.seats[l.callers.hash("victim")].held
	l.callers.mu.Unlock()
	assert.LessOrEqual(t, n, fairSeats, "callers remembered")
	assert.Equal(t, int32(1), victim, "a caller holding a permit is kept")
	releaseAll(held)
	assertSettled(t, l)
}

// TestAcquireForQueues: a caller within its share waits in the queue and
// its permit counts to it; a caller over its share is not queued.
func TestAcquireForQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := fixedLimiter(t, 4, WithQueue(Queue{Size: 4}))
		var heavy []Token
		for range 3 {
			tok, err := l.AcquireFor(context.Background(), "heavy")
			require.NoError(t, err)
			heavy = append(heavy, tok)
		}
		var light []Token
		require.NoError(t, take(t, l, "light", 0, &light))
		_, err := l.AcquireFor(context.Background(), "heavy")
		assert.ErrorIs(t, err, ErrOverShare, "over its share: not queued")
		require.NoError(t, take(t, l, "light", 0, &light), "a band (1) past the limit")

		var wg sync.WaitGroup
		var queued Token
		wg.Go(func() {
			var err error
			queued, err = l.AcquireFor(context.Background(), "light")
			assert.NoError(t, err)
		})
		synctest.Wait()
		assert.Equal(t, 1, l.QueueLen())
		heavy[0].Release(Success) // pays the debt
		heavy[1].Release(Success) // goes to the queued call
		wg.Wait()
		l.callers.mu.Lock()
		assert.Equal(t, int32(3), l.callers.seats[l.callers.hash("light")].held, "the queued permit counts to light")
		l.callers.mu.Unlock()
		queued.Release(Success)
		releaseAll(heavy[2:])
		releaseAll(light)
		assertSettled(t, l)
	})
}

// TestFairShareConcurrent: callers taking and releasing from many
// goroutines never exceed the limit, and every count returns to zero.
func TestFairShareConcurrent(t *testing.T) {
	l := fixedLimiter(t, 8)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				tok, err := l.TryAcquireFor(fmt.Sprintf("c%d", (g+i)%5), 0)
				if err != nil {
					continue
				}
				assert.LessOrEqual(t, l.Inflight(), 8+8/4, "at most a band past the limit")
				tok.Release(Success)
			}
		})
	}
	wg.Wait()
	l.callers.mu.Lock()
	for h, st := range l.callers.seats {
		assert.Zero(t, st.held, "caller %x", h)
	}
	l.callers.mu.Unlock()
	assertSettled(t, l)
}

// TestFairShareWithinPriority: a caller of lower priority leaves what its
// priority must leave, even within its share, and never goes past the
// limit.
func TestFairShareWithinPriority(t *testing.T) {
	l := fixedLimiter(t, 8)
	var held []Token
	for range 5 {
		require.NoError(t, take(t, l, "heavy", 0, &held))
	}
	require.NoError(t, take(t, l, "light", 2, &held))
	assert.ErrorIs(t, take(t, l, "light", 2, &held), ErrLimitExceeded, "2 permits are left for higher priorities")
	require.NoError(t, take(t, l, "other", 0, &held), "priority 0 takes them")
	require.NoError(t, take(t, l, "other", 0, &held))
	assert.Equal(t, 8, l.Inflight())
	assert.ErrorIs(t, take(t, l, "light", 2, &held), ErrLimitExceeded, "with a priority's leave, never past the limit")
	require.NoError(t, take(t, l, "light", 0, &held), "at priority 0, a band past it")
	releaseAll(held)
	assertSettled(t, l)
}
