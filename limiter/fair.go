package limiter

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"time"
)

// ErrOverShare is returned by TryAcquireFor and AcquireFor to a caller
// that holds more than its fair share of the limit, when taking another
// permit would leave too little room for the others. The call should be
// rejected as for ErrLimitExceeded; the error says whom the rejection fell
// on.
var ErrOverShare = errors.New("limiter: caller over its fair share of the concurrency limit")

// TryAcquireFor is TryAcquire for a call of caller, sharing the limit
// fairly among callers when it is full. It never waits.
//
// A caller's share is the limit divided by n, the number of callers that
// hold permits or held some within the last second (caller included). A
// caller within its share takes any free permit. A caller over it must
// leave free a part of n permits (at most a quarter of the limit) that
// grows with how far over it is: a light caller arriving finds room that a
// heavy one could not fill, and the heavy one is refused with
// ErrOverShare. A lone caller may use the whole limit.
//
// leave is how many permits to leave free for callers of higher priority
// (who pass 0): a caller of lower priority takes a permit only if more
// than leave are free, in one atomic step with the taking, so callers of
// every priority together never exceed the limit. Every caller respects
// it; below 0 counts as 0. The empty caller is nobody in
// particular: it has no share, and is refused only with ErrLimitExceeded.
//
// Callers are remembered by a keyed hash of their name, a few dozen bytes
// each, and only while they hold permits or for a second after, at most a
// few thousand idle ones: the memory is bounded whatever the callers.
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
	held := int(c.seats[h].held)
	n := len(c.seats)
	if _, known := c.seats[h]; !known {
		n++
	}
	limit := l.Limit()
	excess := held*n - limit // > 0: held is over limit/n
	if excess > 0 {
		r := min(n, limit/4)
		leave = max(leave, min(r, (r*excess+limit-1)/limit))
	}
	tok, ok := l.tryAcquire(leave)
	switch {
	case ok:
		c.takeLocked(h, &tok)
		return tok, nil
	case excess > 0:
		return Token{}, ErrOverShare
	}
	return Token{}, ErrLimitExceeded
}

// AcquireFor is Acquire for a call of caller: TryAcquireFor, then, for a
// caller within its share that found the limit full, a place in the
// queue. A caller over its share is not queued: it gets ErrOverShare.
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

// callers is the table of TryAcquireFor: the permits each caller holds,
// and the callers that held some lately, since a light caller between two
// calls is still a caller a heavy one must leave room for. Keys are 64-bit
// hashes under a secret seed, so a caller cannot pick names that collide
// with another's.
type callers struct {
	mu        sync.Mutex
	seed      maphash.Seed
	seats     map[uint64]seat
	lastSweep int64 // Limiter.now at the last sweep
}

// A seat is one caller's entry: the permits it holds, and when it last
// gave one back.
type seat struct {
	held int32
	last int64
}

const (
	// fairRecent is how long a caller that holds nothing still counts.
	fairRecent = int64(time.Second)
	// fairSeats bounds the table: past it, every caller that holds
	// nothing is forgotten at once, so a flood of made-up names costs a
	// bounded table, never a refusal.
	fairSeats = 4096
)

// hash returns caller's key in the table; 0 is kept for no caller.
func (c *callers) hash(caller string) uint64 {
	return max(maphash.String(c.seed, caller), 1)
}

// takeLocked counts tok's permit to the caller of hash h.
func (c *callers) takeLocked(h uint64, tok *Token) {
	if c.seats == nil {
		c.seats = make(map[uint64]seat)
	}
	st, known := c.seats[h]
	if !known && len(c.seats) >= fairSeats {
		c.sweepLocked(tok.start, true)
	}
	st.held++
	c.seats[h] = st
	tok.caller = h
}

// leave gives back a permit of the caller of hash h at now.
func (c *callers) leave(h uint64, now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.seats[h]; ok {
		c.seats[h] = seat{held: st.held - 1, last: now}
	}
}

// sweepLocked forgets the callers that hold nothing and have held nothing
// for fairRecent, at most every fairRecent/4; with all, every caller that
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
