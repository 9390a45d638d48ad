package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/waitlist"
)

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

// A Bucket limits the rate of requests while allowing bursts. It holds
// up to burst tokens and gains rate tokens per second; every request
// spends one. A full bucket admits that many requests at once, after
// which requests are admitted at the rate: bursts absorb the unevenness
// of real traffic, the rate bounds the sustained load.
//
// Allow and Decide never wait; Wait parks the caller until a token comes.
// Waiters are served first-in first-out, and Allow never overtakes them:
// it admits a request only when tokens remain for every waiter as well. A
// waiter whose context ends leaves the queue without taking a token, and
// whoever is behind it moves up.
//
// The rate and the burst may change at any time, with SetRate and
// SetBurst. All methods are safe for concurrent use. Allow takes one
// short lock and allocates nothing.
//
// The bucket reads the monotonic clock. Should its clock ever step back,
// the bucket earns nothing until the clock is back where it was, so time
// already paid out in tokens is never paid twice.
type Bucket struct {
	// now and epoch are fixed at construction.
	now   func() time.Time // nil: the monotonic clock, read by time.Since
	epoch time.Time        // origin of the readings, in nanoseconds

	mu     sync.Mutex
	rate   float64 // tokens per second, > 0
	burst  float64 // >= 1
	eps    float64 // epsilonFor(rate)
	tokens float64 // tokens at time last, in [0, burst]
	last   int64   // the latest reading, never decreases
	waitq  waitlist.List[tbWaiter, *tbWaiter]
	nwait  int // len(waitq)
}

// NewBucket returns a full bucket of burst tokens that refills at rate
// tokens per second. The rate must be a finite number > 0 and the burst
// at least 1; otherwise the error (one line per wrong argument) says which
// and what is allowed. A rate below 1 is allowed: 0.1 admits one request
// every ten seconds.
func NewBucket(rate float64, burst int) (*Bucket, error) {
	return newBucket(rate, burst, nil)
}

// newBucket is NewBucket on the clock now, which tests step by hand to
// check Allow, Decide and retryAfter to the nanosecond; nil selects the
// monotonic clock. now must be safe for concurrent use. Wait still sleeps
// on the runtime's timers, which such a clock does not drive: Wait is
// tested under testing/synctest, on the monotonic clock.
func newBucket(rate float64, burst int, now func() time.Time) (*Bucket, error) {
	if err := errors.Join(checkBucketRate(rate), checkBucketBurst(burst)); err != nil {
		return nil, err
	}
	b := &Bucket{now: now, rate: rate, eps: epsilonFor(rate), burst: float64(burst), tokens: float64(burst)}
	if b.now != nil {
		b.epoch = b.now()
	} else {
		b.epoch = time.Now()
	}
	return b, nil
}

func checkBucketRate(rate float64) error {
	if !(rate > 0) || math.IsInf(rate, 1) {
		return badArg("Bucket rate", rate, "a finite number > 0")
	}
	return nil
}

func checkBucketBurst(burst int) error {
	if burst < 1 {
		return badArg("Bucket burst", burst, ">= 1")
	}
	return nil
}

// nanos reads the clock as nanoseconds since b.epoch.
func (b *Bucket) nanos() int64 {
	if b.now == nil {
		return int64(time.Since(b.epoch))
	}
	return offset(b.now(), b.epoch)
}

// advanceLocked adds the tokens earned since b.last. A reading earlier
// than b.last (a clock stepped back) earns nothing and leaves b.last where
// it is: time the bucket has already paid out is not paid again.
func (b *Bucket) advanceLocked(now int64) {
	if now <= b.last {
		return
	}
	if b.tokens < b.burst {
		b.tokens = min(b.burst, b.tokens+float64(now-b.last)*b.rate/1e9)
	}
	b.last = now
}

// takeLocked spends one token if one is free after the waiters' share and
// reports whether it did.
func (b *Bucket) takeLocked() bool {
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
func (b *Bucket) delayLocked(now int64, need float64) time.Duration {
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
func (b *Bucket) remainingLocked() int {
	return max(0, int(math.Floor(b.tokens+b.eps))-b.nwait)
}

// Allow spends a token and reports true if one is free, or reports false
// at once. It is the call for shedding load: a request refused by Allow
// should be rejected, not retried in a loop. Use Decide to learn when to
// come back.
func (b *Bucket) Allow() bool {
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
// what makes RetryAfter exact.
func (b *Bucket) Decide() Decision {
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
// burst, and a waiter, if any, is told a token came. Refund only what
// was taken, once.
func (b *Bucket) Refund() {
	now := b.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	b.tokens = min(b.burst, b.tokens+1)
	b.nudgeHeadLocked()
}

// retryAfter returns how long until Allow would admit a request, 0 if it
// would now. Waiters come first: each of them is owed a token before a
// newcomer. The answer holds as long as the rate does not change and
// nobody else spends a token meanwhile.
func (b *Bucket) retryAfter() time.Duration {
	now := b.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	return b.delayLocked(now, float64(b.nwait+1))
}

// available returns the number of tokens in the bucket now, including those
// owed to waiters; a fraction means a token is on its way.
func (b *Bucket) available() float64 {
	now := b.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	return b.tokens
}

// waiters returns the number of callers parked in Wait.
func (b *Bucket) waiters() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nwait
}

// Rate returns the refill rate in tokens per second.
func (b *Bucket) Rate() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rate
}

// Burst returns the most tokens the bucket holds: the largest burst.
func (b *Bucket) Burst() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int(b.burst)
}

// SetRate changes the refill rate to rate tokens per second from now on.
// Tokens earned until now were earned at the old rate, and a waiter for
// the next token recomputes its wait at the new one. A rate that is not a
// finite number > 0 is refused with an error saying what is allowed, and the bucket keeps
// its rate.
func (b *Bucket) SetRate(rate float64) error {
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

// SetBurst changes the largest burst. Lowering it discards the tokens
// above the new burst; raising it adds no tokens, the room fills at the
// rate. A burst below 1 is refused with an error saying what is allowed, and the bucket
// keeps its burst.
func (b *Bucket) SetBurst(burst int) error {
	if err := checkBucketBurst(burst); err != nil {
		return err
	}
	now := b.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	b.burst = float64(burst)
	b.tokens = min(b.tokens, b.burst)
	b.nudgeHeadLocked()
	return nil
}

// Wait takes a token, waiting for one if none is free: it smooths a burst
// out instead of refusing it. Waiters are served in the order they
// arrived. Wait returns ctx's error if ctx ends first, and ErrRateLimited
// at once, without waiting, if ctx's deadline would come no later than
// its token at the current rate. A caller that Wait fails has taken no
// token, and the callers behind it are not delayed by it.
func (b *Bucket) Wait(ctx context.Context) error {
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
	b.waitq.Push(w)
	b.nwait++
	return b.park(ctx, w) // unlocks b.mu
}

// park waits in the queue until w, at its head, finds a token. Only the
// head sleeps on a timer, for exactly as long as its token takes; the
// others sleep until the head leaves and wakes them. Called with b.mu
// held; returns with it released.
func (b *Bucket) park(ctx context.Context, w *tbWaiter) error {
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
		if b.waitq.Front() == w {
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
func (b *Bucket) leaveLocked(w *tbWaiter) {
	wasHead := b.waitq.Front() == w
	b.waitq.Remove(w)
	b.nwait--
	if wasHead {
		b.nudgeHeadLocked()
	}
}

// nudgeHeadLocked makes the head waiter, if any, look at the bucket again.
func (b *Bucket) nudgeHeadLocked() {
	if h := b.waitq.Front(); h != nil {
		select {
		case h.wake <- struct{}{}:
		default: // already nudged
		}
	}
}

// String describes the bucket's configuration, for logs and errors.
func (b *Bucket) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("Bucket(rate=%g/s, burst=%d)", b.rate, int(b.burst))
}

// tbWaiter is a caller parked in Bucket.Wait.
type tbWaiter struct {
	wake chan struct{} // buffered: a nudge is never lost nor blocks
	waitlist.Links[tbWaiter]
}
