package limiter

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/fielderr"
)

// A Queue lets callers of Acquire wait for a permit when all are taken,
// within a bound. Callers beyond the bound are rejected at once with
// ErrLimitExceeded, so a full queue costs nothing to the callers already
// in it. The zero Queue lets no one wait: Acquire then fails at once, as
// TryAcquire does.
type Queue struct {
	// Size lets at most Size callers wait.
	Size int
	// Target, instead of Size, bounds the queue by Little's law so that a
	// caller who joins a full queue still completes within about Target
	// on average:
	//
	//	queue = limit × (Target / latency − 1), at least 1
	//
	// where latency is an exponentially weighted moving average of the
	// RTT of calls that ran while the limiter was at capacity (the service
	// time under load); until such calls are seen the bound is 1. Waiting
	// never eats the budget the work itself needs.
	Target time.Duration
	// LIFO serves waiters newest-first. Under sustained overload LIFO
	// gives fresh callers, whose deadlines are furthest away, the freed
	// permits, at the price of fairness; FIFO, the default, is fair.
	LIFO bool
}

func (q Queue) validate() error {
	var errs []error
	if q.Size < 0 || q.Size > MaxLimit {
		errs = append(errs, fielderr.New("Queue.Size", q.Size, fmt.Sprintf("in [0, %d]", MaxLimit)))
	}
	if q.Target < 0 {
		errs = append(errs, fielderr.New("Queue.Target", q.Target, ">= 0"))
	}
	if q.Size != 0 && q.Target != 0 {
		errs = append(errs, fielderr.New("Queue.Target", q.Target, fmt.Sprintf("0 when Queue.Size is set (%d): set one bound", q.Size)))
	}
	return errors.Join(errs...)
}

// ewmaWeight is the weight of a new sample in the at-capacity latency
// average behind Queue.Target. 0.1 forgets a level shift within a few dozen
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
	if b.q.Target == 0 {
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
	if b.q.Target == 0 {
		return b.q.Size
	}
	avg := math.Float64frombits(b.latency.Load())
	if avg <= 0 {
		return 1
	}
	n := float64(limit) * (b.q.Target.Seconds()/avg - 1)
	if n < 1 {
		return 1
	}
	if n > MaxLimit {
		return MaxLimit
	}
	return int(n)
}
