package limiter

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/fielderr"

	"github.com/sluice-go/sluice/internal/waitlist"
)

// MaxLimit is the largest concurrency limit a Limiter accepts. It keeps
// the permit counters inside their 32-bit halves of one atomic word.
const MaxLimit = 1 << 20

// A Limiter admits at most Limit() calls at a time. The limit is set by an
// Algorithm from the outcomes and round-trip times of finished calls, and
// callers that find every permit taken may wait for one in a bounded queue.
//
// Each successful TryAcquire or Acquire returns a Token that must be
// released exactly once, with the call's Outcome, when the call ends.
//
// The limit can change at any time, also while permits are out. Lowering it
// below the permits in flight revokes nobody: it records a debt, and the
// next releases pay the debt instead of freeing their permits, so the
// number in flight converges to the new limit. A limit of 0 admits nothing.
//
// All methods are safe for concurrent use. TryAcquire and Release take no
// lock and allocate nothing when no caller is waiting.
type Limiter struct {
	state atomic.Uint64 // a state: avail and waiters, see state.go
	limit atomic.Int64  // the limit state.avail is measured against

	alg      Algorithm
	counter  grantCounter // alg, if it counts grants
	queue    queueBound
	lifo     bool
	onChange func(old, new int)
	epoch    time.Time // origin of the monotonic readings in Tokens

	mu     sync.Mutex // serializes limit changes and guards the fields below
	waitq  waitlist.List[waiter, *waiter]
	pinned bool // the limit is held by Pin, not by the Algorithm

	callers callers // the permits each caller holds, for TryAcquireFor
}

// New returns a Limiter configured by opts. Without WithAlgorithm it uses
// an AIMD with the defaults of AIMDConfig; without WithQueue, callers of
// Acquire do not wait.
func New(opts ...Option) (*Limiter, error) {
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if err := c.queue.validate(); err != nil {
		return nil, err
	}
	if c.alg == nil {
		aimd, err := newAIMD(AIMDConfig{})
		if err != nil {
			return nil, err
		}
		c.alg = aimd
	}
	l := &Limiter{
		alg:   c.alg,
		queue: queueBound{q: c.queue},
		lifo:  c.queue.LIFO,
		epoch: time.Now(),
	}
	l.callers.seed = maphash.MakeSeed()
	if g, ok := c.alg.(grantCounter); ok {
		l.counter = g
	}
	n := clampLimit(c.alg.Limit())
	l.limit.Store(int64(n))
	l.state.Store(uint64(makeState(n, 0)))
	return l, nil
}

// Limit returns the current concurrency limit.
func (l *Limiter) Limit() int { return int(l.limit.Load()) }

// Inflight returns the number of permits currently held. While the limit
// is being changed concurrently the value may be off by the size of the
// change for an instant.
func (l *Limiter) Inflight() int {
	return l.Limit() - state(l.state.Load()).avail()
}

// QueueLen returns the number of callers waiting in Acquire.
func (l *Limiter) QueueLen() int { return state(l.state.Load()).waiters() }

// TryAcquire takes a permit if one is free, without waiting. It fails when
// the limit is reached or when callers are already queued, so it never
// overtakes them. TryAcquireFor shares the permits fairly among callers,
// or keeps some for callers of higher priority.
func (l *Limiter) TryAcquire() (Token, bool) { return l.tryAcquire(0) }

func (l *Limiter) tryAcquire(reserve int) (Token, bool) {
	for {
		s := state(l.state.Load())
		// A negative reserve goes into debt, but never past a waiter.
		if s.avail() <= reserve || (reserve < 0 && s.waiters() > 0) {
			return Token{}, false
		}
		if l.state.CompareAndSwap(uint64(s), uint64(s.withAvail(-1))) {
			return l.grant(s.avail() - 1), true
		}
	}
}

// Acquire takes a permit, waiting in the queue if none is free. It returns
// ErrLimitExceeded at once when the queue is full or disabled, and ctx's
// error if ctx is done first. Waiters are served first-in first-out, or
// last-in first-out with Queue.LIFO.
func (l *Limiter) Acquire(ctx context.Context) (Token, error) {
	if t, ok := l.tryAcquire(0); ok {
		return t, nil
	}
	return l.wait(ctx)
}

func (l *Limiter) wait(ctx context.Context) (Token, error) {
	if err := ctx.Err(); err != nil {
		return Token{}, err
	}
	l.mu.Lock()
	for {
		s := state(l.state.Load())
		if s.avail() > 0 { // freed since the fast path looked
			if l.state.CompareAndSwap(uint64(s), uint64(s.withAvail(-1))) {
				l.mu.Unlock()
				return l.grant(s.avail() - 1), nil
			}
			continue
		}
		limit := l.Limit()
		if limit == 0 || s.waiters() >= l.queue.max(limit) {
			l.mu.Unlock()
			return Token{}, ErrLimitExceeded
		}
		if l.state.CompareAndSwap(uint64(s), uint64(s+oneWaiter)) {
			break
		}
	}
	w := &waiter{ready: make(chan struct{})}
	l.waitq.Push(w)
	l.mu.Unlock()

	select {
	case <-w.ready:
		if w.err != nil {
			return Token{}, w.err
		}
		return l.grant(state(l.state.Load()).avail()), nil
	case <-ctx.Done():
		l.mu.Lock()
		if w.woken {
			// A permit (or a rejection) reached us while ctx ended. The
			// caller is gone, so a permit is passed on, never kept.
			l.mu.Unlock()
			if w.err == nil {
				l.release()
			}
		} else {
			l.waitq.Remove(w)
			l.addWaitersLocked(-1)
			l.mu.Unlock()
		}
		return Token{}, ctx.Err()
	}
}

// grant builds the Token for a permit just taken; availAfter is the avail
// count the taking left behind. It reads the clock for the call's RTT.
func (l *Limiter) grant(availAfter int) Token {
	start, inflight := l.now(), l.Limit()-availAfter
	meta := uint64(min(inflight, inflightMax))
	if l.counter != nil {
		cohort, full := l.counter.granted(inflight)
		if cohort {
			meta |= cohortBit
		}
		if full {
			meta |= fullBit
		}
	}
	return Token{l: l, start: start, meta: meta}
}

// A grantCounter is an Algorithm that counts the permits granted: one that
// measures a cohort of calls must know which calls are in it and when all
// of them have returned. granted reports whether the call joins the
// cohort, and whether it found the limit full as the algorithm counts it
// at that moment; its Sample then carries cohort and full set.
type grantCounter interface {
	granted(inflight int) (cohort, full bool)
}

// now reads the monotonic clock as nanoseconds since l.epoch. time.Since
// on a monotonic origin costs one clock read, half of time.Now.
func (l *Limiter) now() int64 { return int64(time.Since(l.epoch)) }

// release returns one permit: to a waiter if there is one, else to the
// pool, unless a debt is outstanding, which the permit then pays.
func (l *Limiter) release() {
	for {
		s := state(l.state.Load())
		if s.waiters() > 0 && s.avail() >= 0 {
			l.handOff()
			return
		}
		if l.state.CompareAndSwap(uint64(s), uint64(s.withAvail(1))) {
			return
		}
	}
}

// handOff gives a released permit directly to the next waiter, so that
// avail stays at 0 and no newcomer can take it first.
func (l *Limiter) handOff() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		s := state(l.state.Load())
		if s.waiters() > 0 && s.avail() >= 0 {
			if l.state.CompareAndSwap(uint64(s), uint64(s-oneWaiter)) {
				l.wakeLocked(l.waitq.Pop(l.lifo), nil)
				return
			}
			continue
		}
		// The waiters left, or a debt appeared, while we took the lock.
		if l.state.CompareAndSwap(uint64(s), uint64(s.withAvail(1))) {
			return
		}
	}
}

// serveWaitersLocked moves free permits to waiters after the limit grew.
func (l *Limiter) serveWaitersLocked() {
	for {
		s := state(l.state.Load())
		if s.waiters() == 0 || s.avail() <= 0 {
			return
		}
		if l.state.CompareAndSwap(uint64(s), uint64((s - oneWaiter).withAvail(-1))) {
			l.wakeLocked(l.waitq.Pop(l.lifo), nil)
		}
	}
}

// rejectWaitersLocked fails every queued caller with err.
func (l *Limiter) rejectWaitersLocked(err error) {
	for w := l.waitq.Pop(false); w != nil; w = l.waitq.Pop(false) {
		l.addWaitersLocked(-1)
		l.wakeLocked(w, err)
	}
}

func (l *Limiter) addWaitersLocked(delta int) {
	for {
		s := state(l.state.Load())
		if l.state.CompareAndSwap(uint64(s), uint64(makeState(s.avail(), s.waiters()+delta))) {
			return
		}
	}
}

func (l *Limiter) wakeLocked(w *waiter, err error) {
	w.woken = true
	w.err = err
	close(w.ready)
}

// setLimitLocked moves the limit to n, adjusting avail by the difference.
// Lowering it may drive avail negative: that is the debt.
func (l *Limiter) setLimitLocked(n int) {
	old := l.Limit()
	if n == old {
		return
	}
	l.limit.Store(int64(n))
	for {
		s := state(l.state.Load())
		if l.state.CompareAndSwap(uint64(s), uint64(s.withAvail(n-old))) {
			break
		}
	}
	if n == 0 {
		l.rejectWaitersLocked(ErrLimitExceeded)
	} else {
		l.serveWaitersLocked()
	}
	if l.onChange != nil {
		l.onChange(old, n)
	}
}

// follow applies the algorithm's current limit unless the limit is pinned.
// It reads Limit under the lock rather than trusting the value one Update
// returned, so concurrent updates cannot apply their results out of order:
// whoever takes the lock last applies the newest limit.
func (l *Limiter) follow() {
	l.mu.Lock()
	if !l.pinned {
		l.setLimitLocked(clampLimit(l.alg.Limit()))
	}
	l.mu.Unlock()
}

// Pin holds the limit at n, in [0, MaxLimit], until Unpin. The algorithm
// keeps learning from samples meanwhile. Pinning to 0 disables the limiter:
// nothing is admitted and queued callers get ErrLimitExceeded.
func (l *Limiter) Pin(n int) error {
	if n < 0 || n > MaxLimit {
		return fielderr.New("pinned limit", n, fmt.Sprintf("in [0, %d]", MaxLimit))
	}
	l.mu.Lock()
	l.pinned = true
	l.setLimitLocked(n)
	l.mu.Unlock()
	return nil
}

// Unpin hands the limit back to the algorithm.
func (l *Limiter) Unpin() {
	l.mu.Lock()
	l.pinned = false
	l.mu.Unlock()
	l.follow()
}

// isPinned reports whether the limit is held by Pin.
func (l *Limiter) isPinned() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pinned
}

func clampLimit(n int) int {
	return min(max(n, 1), MaxLimit)
}

// A Token is one permit. The zero Token holds nothing and releasing it does
// nothing.
//
// Release a Token exactly once, from any goroutine, when the call it
// admitted ends. Releasing clears the Token, so a second Release of the
// same variable does nothing; copies of a Token share no such memory, so do
// not copy a Token you intend to release.
type Token struct {
	l     *Limiter
	start int64 // l.now() when granted
	// meta packs, low bits first: the permits held right after this one
	// was granted (30 bits), whether the grant found the limit full and
	// whether the algorithm counted it into a cohort (1 bit each, see
	// grantCounter), and the caller it counts to (TryAcquireFor;
	// 32 bits, 0 for none). Three words go back in registers on every
	// call's path; a fourth field spilled the Token to the stack.
	meta uint64
}

const (
	cohortBit   = 1 << 31
	fullBit     = 1 << 30
	inflightMax = fullBit - 1
)

func (t *Token) inflight() int  { return int(t.meta & inflightMax) }
func (t *Token) cohort() bool   { return t.meta&cohortBit != 0 }
func (t *Token) full() bool     { return t.meta&fullBit != 0 }
func (t *Token) caller() uint32 { return uint32(t.meta >> 32) }

// Release returns the permit and reports the call's outcome and round-trip
// time to the algorithm, which may change the limit. It returns the RTT it
// measured: the time from the grant to the release, or 0 if t was already
// released.
func (t *Token) Release(o Outcome) time.Duration { return t.release(o, true) }

// ReleaseUntimed is Release for a call whose duration is not a latency
// measurement, such as a stream that lives as long as its client wants.
// The algorithm sees the outcome with a negative RTT: drops still lower the
// limit and successes may still raise it, but the duration cannot make the
// call look slow. It returns how long the permit was held, or 0 as
// Release does.
func (t *Token) ReleaseUntimed(o Outcome) time.Duration { return t.release(o, false) }

func (t *Token) release(o Outcome, timed bool) time.Duration {
	tok := *t
	l := tok.l
	if l == nil {
		return 0
	}
	*t = Token{}
	end := l.now()
	held := time.Duration(end - tok.start)
	s := Sample{
		RTT:      UntimedRTT,
		Inflight: tok.inflight(),
		Outcome:  o,
		At:       l.epoch.Add(time.Duration(end)),
		cohort:   tok.cohort(),
		full:     tok.full(),
	}
	if timed {
		s.RTT = held
		if o == Success && s.Inflight >= l.Limit() {
			l.queue.observe(s.RTT)
		}
	}
	limit := l.alg.Update(s)
	if limit != l.Limit() {
		l.follow()
	}
	if h := tok.caller(); h != 0 {
		l.callers.leave(h)
	}
	l.release()
	return held
}

// Granted returns when t's permit was granted, from the clock reading the
// grant took for the RTT, so it costs no clock read of its own; the zero
// Time if t holds nothing. A caller
// that admits calls without waiting can use it as the call's arrival time.
func (t *Token) Granted() time.Time {
	if t.l == nil {
		return time.Time{}
	}
	return t.l.epoch.Add(time.Duration(t.start))
}

// Held reports whether t holds a permit that has not been released.
func (t *Token) Held() bool { return t.l != nil }

// waiter is a caller parked in Acquire.
type waiter struct {
	ready chan struct{} // closed when woken
	woken bool          // guarded by Limiter.mu
	err   error         // nil with a permit, else the rejection
	waitlist.Links[waiter]
}
