package limiter

// The Limiter keeps its permit accounting in one atomic 64-bit word so that
// acquiring, releasing and resizing each linearize on a single
// compare-and-swap:
//
//	bits 0-31   avail: limit minus permits held, as a signed int32. A
//	            negative value is a debt: the limit was lowered below the
//	            permits in flight, and the next releases pay it back
//	            instead of freeing permits.
//	bits 32-63  waiters: callers parked in the wait queue.
//
// Invariant: waiters > 0 implies avail <= 0. A release with waiters hands its
// permit straight to one of them, and raising the limit serves waiters
// before freeing permits, so a caller arriving later can never overtake the
// queue.
type state uint64

const oneWaiter state = 1 << 32

func makeState(avail, waiters int) state {
	return state(uint64(waiters)<<32 | uint64(uint32(int32(avail))))
}

func (s state) avail() int   { return int(int32(uint32(s))) }
func (s state) waiters() int { return int(s >> 32) }

// withAvail returns s with avail moved by delta, leaving waiters alone.
func (s state) withAvail(delta int) state {
	return makeState(s.avail()+delta, s.waiters())
}
