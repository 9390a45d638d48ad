// Package bucket is the token bucket behind a Limit's Rate: one bucket per
// method or service, shared by all its callers. A full bucket admits its
// burst at once, then the rate: bursts absorb the unevenness of real
// traffic, the rate bounds the sustained load.
//
// Take never waits: a call over the rate is rejected with the exact time
// until a token comes, which the rejection passes on as its pushback.
package bucket

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// A Bucket holds up to burst tokens and gains rate tokens per second;
// every admitted call spends one. It is safe for concurrent use; Take
// takes one short lock and allocates nothing.
//
// The bucket reads the monotonic clock. Should its clock ever step back,
// the bucket earns nothing until the clock is back where it was, so time
// already paid out in tokens is never paid twice.
type Bucket struct {
	now   func() time.Time // nil: the monotonic clock, read by time.Since
	epoch time.Time        // origin of the readings

	mu     sync.Mutex
	rate   float64 // tokens per second, > 0
	burst  float64 // >= 1
	eps    float64 // epsilonFor(rate)
	tokens float64 // tokens at time last, in [0, burst]
	last   int64   // the latest reading, in ns since epoch; never decreases
}

// New returns a full bucket of burst tokens that refills at rate tokens
// per second. The rate must be a finite number > 0 (0.1 admits one call
// every ten seconds) and the burst at least 1; otherwise the error, one
// line per wrong argument, says which and what is allowed.
func New(rate float64, burst int) (*Bucket, error) {
	return newOnClock(rate, burst, nil)
}

// newOnClock is New on the clock now, which tests step by hand; nil
// selects the monotonic clock.
func newOnClock(rate float64, burst int, now func() time.Time) (*Bucket, error) {
	var errs []error
	if !(rate > 0) || math.IsInf(rate, 1) {
		errs = append(errs, fmt.Errorf("rate of %v a second, must be a finite number > 0", rate))
	}
	if burst < 1 {
		errs = append(errs, fmt.Errorf("burst of %d, must be >= 1", burst))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	b := &Bucket{now: now, rate: rate, eps: epsilonFor(rate), burst: float64(burst), tokens: float64(burst)}
	if now != nil {
		b.epoch = now()
	} else {
		b.epoch = time.Now()
	}
	return b, nil
}

// epsilonFor returns the part of a token the bucket may lack and still
// count the token as present: float rounding loses slivers when a refill
// arrives in many pieces, and a caller who waited exactly its retry-after
// must not be refused by one. It is what the rate earns in a tenth of a
// nanosecond, at most 1e-9 of a token, so retry-after stays exact.
func epsilonFor(rate float64) float64 { return min(1e-9, rate*1e-10) }

// Take spends a token and reports true if one is free. Otherwise it
// reports false and how long, to the nanosecond, until one will be, as
// the bucket stands (others may spend it first).
func (b *Bucket) Take() (retryAfter time.Duration, ok bool) {
	now := b.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	if b.tokens+b.eps >= 1 {
		b.tokens = max(0, b.tokens-1)
		return 0, true
	}
	d := math.Ceil((1-b.tokens-b.eps)*1e9/b.rate) + float64(max(0, b.last-now))
	if d >= math.MaxInt64 {
		return math.MaxInt64, false
	}
	return max(time.Duration(d), 1), false
}

// Refund puts back a token Take took, when a later check turned the call
// away after all: a call that was not served should not spend the rate.
// The bucket never holds more than its burst. Refund only what was taken,
// once.
func (b *Bucket) Refund() {
	now := b.nanos()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(now)
	b.tokens = min(b.burst, b.tokens+1)
}

// nanos reads the clock as nanoseconds since b.epoch.
func (b *Bucket) nanos() int64 {
	if b.now == nil {
		return int64(time.Since(b.epoch))
	}
	return int64(b.now().Sub(b.epoch))
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
