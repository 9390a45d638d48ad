package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// ErrRateLimited is returned by TokenBucket.Wait when ctx's deadline would
// pass before a token could be had: waiting would only hold the caller up
// to fail it later, so it fails now. The caller should reject the request
// and tell its client to come back after RetryAfter.
var ErrRateLimited = errors.New("limiter: rate limit exceeded")

// A Decision is a rate limiter's answer to one request, with what a caller
// needs to tell its client: when to come back, or how much is left.
type Decision struct {
	// Allowed reports whether the request may proceed. The limiter has
	// already counted it.
	Allowed bool

	// RetryAfter is 0 when the request is allowed. Otherwise it is how
	// long, to the nanosecond and by the limiter's clock, until the same
	// request would be allowed as the limiter stands: a client that
	// retries after RetryAfter is admitted, unless others spent the limit
	// meanwhile or the rate was lowered. It is what belongs in a
	// retry-after or grpc-retry-pushback-ms header.
	RetryAfter time.Duration

	// Remaining is how many more requests would be allowed at once, right
	// after this one. 0 when the request is denied.
	Remaining int
}

// epsilonFor returns the part of a token that the bucket may lack and
// still count the token as present. Float rounding may lose a sliver of a
// token when a refill arrives in many pieces; without a tolerance, a
// caller who waits exactly RetryAfter could be refused by that sliver. It
// is what the rate earns in a tenth of a nanosecond, so that RetryAfter
// stays exact to the nanosecond, and never more than 1e-9 of a token.
func epsilonFor(rate float64) float64 { return min(1e-9, rate*1e-10) }

// A TokenBucket limits the rate of requests while allowing bursts. It holds
// up to capacity tokens and gains rate tokens per second; every request
// spends one. A full bucket admits a burst of capacity requests at once,
// after which requests are admitted at the rate: bursts absorb the
// unevenness of real traffic, the rate bounds the sustained load.
//
// Allow and Decide never wait; Wait parks the caller until a token comes.
// Waiters are served first-in first-out, and Allow never overtakes them:
// it admits a request only when tokens remain for every waiter as well. A
// waiter whose context ends leaves the queue without taking a token, and
// whoever is behind it moves up.
//
// The rate and the capacity may change at any time, with SetRate and
// SetCapacity. All methods are safe for concurrent use. Allow takes one
// short lock and allocates nothing.
//
// The default clock is monotonic. A clock given with WithTokenBucketClock
// may step back; the bucket then earns nothing until the clock is back
// where it was, so time already paid out in tokens is never paid twice.
type TokenBucket struct {
	// now and epoch are fixed at construction.
	now   func() time.Time // nil: the monotonic clock, read by time.Since
	epoch time.Time        // origin of the readings, in nanoseconds

	mu       sync.Mutex
	rate     float64 // tokens per second, > 0
	capacity float64 // >= 1
	eps      float64 // epsilonFor(rate)
	tokens   float64 // tokens at time last, in [0, capacity]
	last     int64   // the latest reading, never decreases
	waitq    waitList[tbWaiter, *tbWaiter]
	nwait    int // len(waitq)
}

// A TokenBucketOption configures a TokenBucket built by NewTokenBucket.
type TokenBucketOption func(*tokenBucketConfig)

type tokenBucketConfig struct {
	now func() time.Time
}

// WithTokenBucketClock makes the bucket refill by the time now returns
// instead of the system's monotonic clock, so that tests of Allow, Decide
// and RetryAfter can step time by hand. now must be safe for concurrent
// use. Wait still sleeps on the runtime's timers, which such a clock does
// not drive: test Wait under testing/synctest, with the default clock.
// A nil now selects the default.
func WithTokenBucketClock(now func() time.Time) TokenBucketOption {
	return func(c *tokenBucketConfig) { c.now = now }
}

// NewTokenBucket returns a full bucket of capacity tokens that refills at
// rate tokens per second. The rate must be a finite number > 0, and the
// capacity at least 1, or a *ConfigError (several, joined, if both are
// wrong) says which. A rate below 1 is allowed: 0.1 admits one request
// every ten seconds.
func NewTokenBucket(rate float64, capacity int, opts ...TokenBucketOption) (*TokenBucket, error) {
	if err := errors.Join(checkBucketRate(rate), checkBucketCapacity(capacity)); err != nil {
		return nil, err
	}
	var c tokenBucketConfig
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	b := &TokenBucket{now: c.now, rate: rate, eps: epsilonFor(rate), capacity: float64(capacity), tokens: float64(capacity)}
	if b.now != nil {
		b.epoch = b.now()
	} else {
		b.epoch = time.Now()
	}
	return b, nil
}

func checkBucketRate(rate float64) error {
	if !(rate > 0) || math.IsInf(rate, 1) {
		return &ConfigError{"TokenBucket rate", rate, "a finite number > 0"}
	}
	return nil
}

func checkBucketCapacity(capacity int) error {
	if capacity < 1 {
		return &ConfigError{"TokenBucket capacity", capacity, ">= 1"}
	}
	return nil
}

// nanos reads the clock as nanoseconds since b.epoch.
func (b *TokenBucket) nanos() int64 {
	if b.now == nil {
		return int64(time.Since(b.epoch))
	}
	return offset(b.now(), b.epoch)
}

// advanceLocked adds the tokens earned since b.last. A reading earlier
// than b.last (a clock stepped back) earns nothing and leaves b.last where
// it is: time the bucket has already paid out is not paid again.
func (b *TokenBucket) advanceLocked(now int64) {
	if now <= b.last {
		return
	}
	if b.tokens < b.capacity {
		b.tokens = min(b.capacity, b.tokens+float64(now-b.last)*b.rate/1e9)
	}
	b.last = now
}

// takeLocked spends one token if one is free after the waiters' share and
// reports whether it did.
func (b *TokenBucket) takeLocked() bool {
	need := float64(b.nwait + 1)
	if b.tokens+b.eps < need {
		return false
	}
	b.tokens = max(0, b.tokens-1)
	return true
}

// delayLocked returns how long after the reading now the bucket holds
// need tokens (less the tolerance b.eps), rounded up to the nanosecond so
// that the tokens are there when the delay is over. A clock behind b.last
// must first catch up.
func (b *TokenBucket) delayLocked(now int64, need float64) time.Duration {
	missing := need - b.tokens
	if missing <= b.eps {
		return 0
	}
	d := math.Ceil((missing-b.eps)*1e9/b.rate) + float64(max(0, b.last-now))
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return max(time.Duration(d), 1)
}

// remainingLocked returns how many more requests Allow would admit now.
func (b *TokenBucket) remainingLocked() int {
	return max(0, int(math.Floor(b.tokens+b.eps))-b.nwait)
}

// Allow spends a token and reports true if one is free, or reports false
// at once. It is the call for shedding load: a request refused by Allow
// should be rejected, not retried in a loop. Use Decide to learn when to
// come back.
func (b *TokenBucket) Allow() bool {
	now := b.nanos()
	b.mu.Lock()
	b.advanceLocked(now)
	ok := b.takeLocked()
	b.mu.Unlock()
	return ok
}

// Decide is Allow with the details a rejection must pass on to the client:
// when it may retry (Decision.RetryAfter), or how many requests it may
// still send at once (Decision.Remaining). Reading both under one lock is
// what makes RetryAfter exact; calling Allow then RetryAfter is not.
func (b *TokenBucket) Decide() Decision {
	now := b.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	if b.takeLocked() {
		return Decision{Allowed: true, Remaining: b.remainingLocked()}
	}
	return Decision{RetryAfter: b.delayLocked(now, float64(b.nwait+1))}
}

// Refund puts back a token that Allow, Decide or Wait took, when a later
// check turned the request away after all: a request that was not served
// should not spend the rate. The bucket never holds more than its
// capacity, and a waiter, if any, is told a token came. Refund only what
// was taken, once.
func (b *TokenBucket) Refund() {
	now := b.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	b.tokens = min(b.capacity, b.tokens+1)
	b.nudgeHeadLocked()
}

// RetryAfter returns how long until Allow would admit a request, 0 if it
// would now. Waiters come first: each of them is owed a token before a
// newcomer. The answer holds as long as the rate does not change and
// nobody else spends a token meanwhile.
func (b *TokenBucket) RetryAfter() time.Duration {
	now := b.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	return b.delayLocked(now, float64(b.nwait+1))
}

// Tokens returns the number of tokens in the bucket now, including those
// owed to waiters; a fraction means a token is on its way.
func (b *TokenBucket) Tokens() float64 {
	now := b.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	return b.tokens
}

// Waiters returns the number of callers parked in Wait.
func (b *TokenBucket) Waiters() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nwait
}

// Rate returns the refill rate in tokens per second.
func (b *TokenBucket) Rate() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rate
}

// Capacity returns the most tokens the bucket holds: the largest burst.
func (b *TokenBucket) Capacity() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int(b.capacity)
}

// SetRate changes the refill rate to rate tokens per second from now on.
// Tokens earned until now were earned at the old rate, and a waiter for
// the next token recomputes its wait at the new one. A rate that is not a
// finite number > 0 is refused with a *ConfigError, and the bucket keeps
// its rate.
func (b *TokenBucket) SetRate(rate float64) error {
	if err := checkBucketRate(rate); err != nil {
		return err
	}
	now := b.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	b.rate, b.eps = rate, epsilonFor(rate)
	b.nudgeHeadLocked()
	return nil
}

// SetCapacity changes the largest burst. Lowering it discards the tokens
// above the new capacity; raising it adds no tokens, the room fills at the
// rate. A capacity below 1 is refused with a *ConfigError, and the bucket
// keeps its capacity.
func (b *TokenBucket) SetCapacity(capacity int) error {
	if err := checkBucketCapacity(capacity); err != nil {
		return err
	}
	now := b.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	b.capacity = float64(capacity)
	b.tokens = min(b.tokens, b.capacity)
	b.nudgeHeadLocked()
	return nil
}

// Wait takes a token, waiting for one if none is free: it smooths a burst
// out instead of refusing it. Waiters are served in the order they
// arrived. Wait returns ctx's error if ctx ends first, and ErrRateLimited
// at once, without waiting, if ctx's deadline would come no later than
// its token at the current rate. A caller that Wait fails has taken no
// token, and the callers behind it are not delayed by it.
func (b *TokenBucket) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := b.nanos()
	b.mu.Lock()
	b.advanceLocked(now)
	if b.takeLocked() {
		b.mu.Unlock()
		return nil
	}
	if deadline, ok := ctx.Deadline(); ok && b.delayLocked(now, float64(b.nwait+1)) >= time.Until(deadline) {
		b.mu.Unlock()
		return ErrRateLimited
	}
	w := &tbWaiter{wake: make(chan struct{}, 1)}
	b.waitq.push(w)
	b.nwait++
	return b.park(ctx, w) // unlocks b.mu
}

// park waits in the queue until w, at its head, finds a token. Only the
// head sleeps on a timer, for exactly as long as its token takes; the
// others sleep until the head leaves and wakes them. Called with b.mu
// held; returns with it released.
func (b *TokenBucket) park(ctx context.Context, w *tbWaiter) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		// Checked before the token, so that a caller who is gone never
		// spends one: the token stays for whoever is next.
		if err := ctx.Err(); err != nil {
			b.leaveLocked(w)
			b.mu.Unlock()
			return err
		}
		var tick <-chan time.Time
		if b.waitq.head == w {
			now := b.nanos()
			b.advanceLocked(now)
			if b.tokens+b.eps >= 1 {
				b.tokens = max(0, b.tokens-1)
				b.leaveLocked(w)
				b.mu.Unlock()
				return nil
			}
			d := b.delayLocked(now, 1)
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			tick = timer.C
		}
		b.mu.Unlock()
		select {
		case <-tick: // nil unless w is the head
		case <-w.wake:
		case <-ctx.Done():
		}
		b.mu.Lock()
	}
}

// leaveLocked removes w from the queue and, if w was its head, wakes the
// new head so that it starts timing its own token.
func (b *TokenBucket) leaveLocked(w *tbWaiter) {
	wasHead := b.waitq.head == w
	b.waitq.remove(w)
	b.nwait--
	if wasHead {
		b.nudgeHeadLocked()
	}
}

// nudgeHeadLocked makes the head waiter, if any, look at the bucket again.
func (b *TokenBucket) nudgeHeadLocked() {
	if h := b.waitq.head; h != nil {
		select {
		case h.wake <- struct{}{}:
		default: // already nudged
		}
	}
}

// String describes the bucket's configuration, for logs and errors.
func (b *TokenBucket) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("TokenBucket(rate=%g/s, capacity=%d)", b.rate, int(b.capacity))
}

// tbWaiter is a caller parked in TokenBucket.Wait.
type tbWaiter struct {
	wake chan struct{} // buffered: a nudge is never lost nor blocks
	links[tbWaiter]
}
