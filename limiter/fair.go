package limiter

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// ErrOverShare is returned by TryAcquireFor and AcquireFor to a caller
// that has had more than its fair share of the limit lately, when taking
// another permit would leave too little room for the others. The call should be
// rejected as for ErrLimitExceeded; the error says whom the rejection fell
// on.
var ErrOverShare = errors.New("limiter: caller over its fair share of the concurrency limit")

// TryAcquireFor is TryAcquire for a call of caller, sharing the limit
// fairly among callers when it is full. It never waits.
//
// A caller's share is 1/n of the permits granted lately, n being the
// callers that hold permits or took one within the last second (caller
// included); "lately" weighs each grant by half every quarter second. Let
// band be min(n-1, limit/4): a permit per other caller, at most a quarter
// of the limit.
//
//   - A caller over its share must leave band permits free, and is
//     refused with ErrOverShare when it would not.
//   - A caller within its share takes any free permit, and when there is
//     none goes up to band permits past the limit: a debt the next
//     releases pay, never taken ahead of a queued caller. A light caller
//     thus finds room a heavy one could not fill, even just after the
//     limit was lowered.
//   - A lone caller's band is 0: it may use the whole limit, and no more.
//
// leave is how many permits to leave free for callers of higher priority
// (who pass 0): a caller of lower priority takes a permit only if more
// than leave are free, in one atomic step with the taking, so callers of
// every priority together never exceed the limit. Every caller respects
// it; below 0 counts as 0. The empty caller is nobody in particular: it
// has no share, and is refused only with ErrLimitExceeded.
//
// Callers are remembered by a keyed hash of their name, a few dozen bytes
// each, only while they hold permits or took one within the last second,
// and at most a few thousand idle ones: the memory is bounded whatever
// the callers.
func (l *Limiter) TryAcquireFor(caller string, leave int) (Token, error) {
	leave = max(leave, 0)
	if caller == "" {
		if tok, ok := l.tryAcquire(leave); ok {
			return tok, nil
		}
		return Token{}, ErrLimitExceeded
	}
	c := &l.callers
	h := c.hash(caller)
	now := l.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweepLocked(now, false)
	st, known := c.seats[h]
	n := len(c.seats)
	if !known {
		n++
	}
	// Over 1/n of the usage, beyond rounding: a lone caller's usage is
	// the total.
	over := st.usageAt(now)*float64(n) > c.totalAt(now)*(1+1e-9)
	band := min(n-1, l.Limit()/4)
	switch {
	case over:
		leave = max(leave, band)
	case leave == 0:
		leave = -band // into debt: at most band beyond the limit
	}
	tok, ok := l.tryAcquire(leave)
	switch {
	case ok:
		c.takeLocked(h, &tok)
		return tok, nil
	case over:
		return Token{}, ErrOverShare
	}
	return Token{}, ErrLimitExceeded
}

// AcquireFor is Acquire for a call of caller: TryAcquireFor, then, for a
// caller within its share that found no room, a place in the queue. A
// caller over its share is not queued: it gets ErrOverShare.
func (l *Limiter) AcquireFor(ctx context.Context, caller string) (Token, error) {
	tok, err := l.TryAcquireFor(caller, 0)
	if !errors.Is(err, ErrLimitExceeded) {
		return tok, err
	}
	if tok, err = l.wait(ctx); err != nil || caller == "" {
		return tok, err
	}
	c := &l.callers
	c.mu.Lock()
	c.takeLocked(c.hash(caller), &tok)
	c.mu.Unlock()
	return tok, nil
}

// callers is the table of TryAcquireFor: for each caller, the permits it
// holds and its usage, the permits granted to it lately with a weight
// that halves every fairHalfLife; a caller is kept while it holds permits
// or took one within fairRecent, since a light caller between two calls is
// still a caller a heavy one must leave room for. Keys are 32-bit hashes
// under a secret seed, so a caller cannot pick names that collide with
// another's.
type callers struct {
	mu        sync.Mutex
	seed      maphash.Seed
	seats     map[uint32]seat
	total     float64 // the usage of all callers, at stamp
	stamp     int64
	lastSweep int64 // Limiter.now at the last sweep
}

// A seat is one caller's entry.
type seat struct {
	held  int32
	usage float64 // at last
	last  int64   // Limiter.now when it last took a permit
}

const (
	// fairRecent is how long a caller that holds nothing still counts.
	fairRecent = int64(time.Second)
	// fairHalfLife is how fast usage is forgotten.
	fairHalfLife = fairRecent / 4
	// fairSeats bounds the table: past it, every caller that holds
	// nothing is forgotten at once, so a flood of made-up names costs a
	// bounded table, never a refusal.
	fairSeats = 4096
)

// decay returns usage u of time from as of time to.
func decay(u float64, from, to int64) float64 {
	if to <= from {
		return u
	}
	return u * math.Exp2(-float64(to-from)/float64(fairHalfLife))
}

func (st seat) usageAt(now int64) float64 { return decay(st.usage, st.last, now) }

func (c *callers) totalAt(now int64) float64 { return decay(c.total, c.stamp, now) }

// hash returns caller's key in the table: 32 bits of a keyed hash, so
// that a Token keeps it in the word it already had. Among 4,096 callers
// two share a key in about one table of 500, and then count as one
// caller; 0 is kept for no caller.
func (c *callers) hash(caller string) uint32 {
	return max(uint32(maphash.String(c.seed, caller)), 1)
}

// takeLocked counts tok's permit to the caller of hash h.
func (c *callers) takeLocked(h uint32, tok *Token) {
	if c.seats == nil {
		c.seats = make(map[uint32]seat)
	}
	now := tok.start
	st, known := c.seats[h]
	if !known && len(c.seats) >= fairSeats {
		c.sweepLocked(now, true)
	}
	c.total, c.stamp = c.totalAt(now)+1, max(now, c.stamp)
	c.seats[h] = seat{held: st.held + 1, usage: st.usageAt(now) + 1, last: max(now, st.last)}
	tok.meta |= uint64(h) << 32
}

// leave gives back a permit of the caller of hash h.
func (c *callers) leave(h uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.seats[h]; ok {
		st.held--
		c.seats[h] = st
	}
}

// sweepLocked forgets the callers that hold nothing and took nothing for
// fairRecent, at most every fairRecent/4; with all, every caller that
// holds nothing.
func (c *callers) sweepLocked(now int64, all bool) {
	if !all && now-c.lastSweep < fairRecent/4 {
		return
	}
	c.lastSweep = now
	for h, st := range c.seats {
		if st.held == 0 && (all || now-st.last > fairRecent) {
			delete(c.seats, h)
		}
	}
}
