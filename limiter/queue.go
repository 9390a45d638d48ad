package limiter

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// A Queue decides how many callers may wait in Acquire for a permit when
// all permits are taken. Callers beyond the bound are rejected at once with
// ErrLimitExceeded, so a full queue costs nothing to the callers already in
// it. Use NoQueue, FixedQueue or LittleQueue.
type Queue struct {
	size   int           // fixed bound; used when target == 0
	target time.Duration // Little's-law target latency; 0 for a fixed bound
}

// NoQueue disables waiting: Acquire fails at once when no permit is free,
// exactly like TryAcquire.
var NoQueue = Queue{}

// FixedQueue lets at most n callers wait for a permit.
func FixedQueue(n int) Queue { return Queue{size: n} }

// LittleQueue bounds the queue by Little's law so that a caller who joins a
// full queue still completes within about target on average:
//
//	queue = limit × (target / latency − 1), at least 1
//
// where latency is an exponentially weighted moving average of the RTT of
// calls that ran while the limiter was at capacity (an estimate of the
// service time under load). Until such calls are seen the bound is 1. The
// queue grows when calls are fast relative to target and shrinks when they
// slow down, so waiting never eats the budget the work itself needs.
func LittleQueue(target time.Duration) Queue { return Queue{target: target} }

func (q Queue) String() string {
	switch {
	case q.target > 0:
		return "LittleQueue(" + q.target.String() + ")"
	case q.size > 0:
		return fmt.Sprintf("FixedQueue(%d)", q.size)
	}
	return "NoQueue"
}

func (q Queue) validate() error {
	if q.size < 0 || q.size > MaxLimit {
		return &FieldError{"FixedQueue size", q.size, fmt.Sprintf("in [0, %d]", MaxLimit)}
	}
	if q.target < 0 {
		return &FieldError{"LittleQueue target", q.target, "> 0"}
	}
	return nil
}

// ewmaWeight is the weight of a new sample in the at-capacity latency
// average behind LittleQueue. 0.1 forgets a level shift within a few dozen
// calls without jumping on a single outlier.
const ewmaWeight = 0.1

// queueBound holds the live state of a Queue.
type queueBound struct {
	q Queue
	// latency is the EWMA of at-capacity RTT in seconds, as float64 bits;
	// 0 until the first sample.
	latency atomic.Uint64
}

// observe folds the sample of a call that ran at capacity into the latency
// average. It is lock-free: concurrent releases retry their CAS.
func (b *queueBound) observe(rtt time.Duration) {
	if b.q.target == 0 {
		return
	}
	x := rtt.Seconds()
	for {
		old := b.latency.Load()
		avg := math.Float64frombits(old)
		next := x
		if avg > 0 {
			next = avg + ewmaWeight*(x-avg)
		}
		if b.latency.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

// max returns how many callers may wait when the limit is limit.
func (b *queueBound) max(limit int) int {
	if b.q.target == 0 {
		return b.q.size
	}
	avg := math.Float64frombits(b.latency.Load())
	if avg <= 0 {
		return 1
	}
	n := float64(limit) * (b.q.target.Seconds()/avg - 1)
	if n < 1 {
		return 1
	}
	if n > MaxLimit {
		return MaxLimit
	}
	return int(n)
}
