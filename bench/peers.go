package bench

import (
	"context"
	"errors"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/go-kratos/aegis/ratelimit"
	"github.com/go-kratos/aegis/ratelimit/bbr"
	"github.com/zeromicro/go-zero/core/load"
	"golang.org/x/sync/semaphore"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/limiter"
)

// Each adapter below is a struct holding the library's own object in an
// exported field, so that a benchmark can build a peer exactly as Peers
// does and then call the library directly, and a test can wrap a peer
// configured otherwise. A zero adapter holds nothing and must not be used.

// SluiceMinLimit is the floor of the sluice peer's AIMD limit.
const SluiceMinLimit = 64

// Sluice is the Guard of a sluice limiter.
type Sluice struct {
	Limiter *limiter.Limiter
}

// NewSluice returns a Sluice whose Limiter runs
// AIMDConfig{MinLimit: SluiceMinLimit}: the initial limit follows the floor
// to 64, and every other setting (MaxLimit 1000, the adaptive latency
// threshold, no queue) is the default.
//
// The floor is the one departure from sluice's defaults. A call in these
// benchmarks lasts nanoseconds, so a goroutine preempted while it holds a
// permit makes its call look thousands of times slower than the others.
// AIMD reads that as queueing and backs off by 10%, and it can do so every
// few dozen calls; from the default floor of 1, a handful of preemptions
// would take the limit below the number of goroutines of a parallel
// benchmark, which would then time rejections instead of admissions. The
// limiter package's own benchmarks use the same floor.
func NewSluice() *Sluice {
	a, err := limiter.AIMDConfig{MinLimit: SluiceMinLimit}.New()
	if err != nil {
		panic(err) // the configuration is a constant
	}
	l, err := limiter.New(limiter.WithAlgorithm(a))
	if err != nil {
		panic(err)
	}
	return &Sluice{Limiter: l}
}

var errSluiceRejected = rejectedBy(limiter.ErrLimitExceeded)

// Admit takes a permit with TryAcquire, as sluice's interceptors do when
// no queue is configured. finish releases it with the outcome
// interceptor.DefaultClassifier gives the error: Dropped for overload and
// deadlines (or any call that ends after its deadline), Ignored for
// cancellation, Success otherwise.
func (s *Sluice) Admit(ctx context.Context) (func(error), error) {
	tok, ok := s.Limiter.TryAcquire()
	if !ok {
		return nil, errSluiceRejected
	}
	return func(err error) {
		late := errors.Is(ctx.Err(), context.DeadlineExceeded)
		tok.Release(interceptor.DefaultClassifier(interceptor.Result{Err: err, Late: late}))
	}, nil
}

// Failsafe is the Guard of a failsafe-go adaptive limiter.
type Failsafe struct {
	Limiter adaptivelimiter.AdaptiveLimiter[any]
}

// NewFailsafe returns a Failsafe with adaptivelimiter.NewWithDefaults: limits
// 1 to 200 starting at 20, at most 5 times the calls in flight, no
// queueing.
func NewFailsafe() *Failsafe {
	return &Failsafe{Limiter: adaptivelimiter.NewWithDefaults[any]()}
}

var errFailsafeRejected = rejectedBy(adaptivelimiter.ErrExceeded)

// Admit takes a permit with TryAcquirePermit, which is what failsafe's
// executor does without queueing (it waits at most its max wait time, 0 by
// default). Like that executor, finish records the call's duration unless
// the call was cancelled or timed out, in which case it drops the permit
// without a sample; the call's error itself plays no part.
func (f *Failsafe) Admit(ctx context.Context) (func(error), error) {
	p, ok := f.Limiter.TryAcquirePermit()
	if !ok {
		return nil, errFailsafeRejected
	}
	return func(error) {
		if ctx.Err() != nil {
			p.Drop()
			return
		}
		p.Record()
	}, nil
}

// GoZero is the Guard of a go-zero adaptive shedder.
type GoZero struct {
	Shedder load.Shedder
}

// NewGoZero returns a GoZero with load.NewAdaptiveShedder(): a 5 s window
// of 50 buckets and a CPU threshold of 90%. The shedder rejects only while
// CPU use (its cgroup's, sampled every 250 ms into a moving average) is
// above the threshold, or was within the last second, and more calls are
// in flight than its estimate of capacity.
func NewGoZero() *GoZero {
	return &GoZero{Shedder: load.NewAdaptiveShedder()}
}

var errGoZeroRejected = rejectedBy(load.ErrServiceOverloaded)

// Admit calls Allow. As go-zero's gRPC shedding interceptor does, finish
// reports a call that failed with context.DeadlineExceeded as Fail and
// every other call as Pass.
func (g *GoZero) Admit(context.Context) (func(error), error) {
	p, err := g.Shedder.Allow()
	if err != nil {
		return nil, errGoZeroRejected
	}
	return func(err error) {
		if errors.Is(err, context.DeadlineExceeded) {
			p.Fail()
			return
		}
		p.Pass()
	}, nil
}

// Kratos is the Guard of a Kratos (aegis) BBR limiter.
type Kratos struct {
	Limiter *bbr.BBR
}

// NewKratos returns a Kratos with bbr.NewLimiter(): a 10 s window of 100
// buckets and a CPU threshold of 80%. Like go-zero's, it rejects only while
// CPU use (its cgroup's, sampled every 500 ms into a moving average) is
// above the threshold, or was within the last second, and more than one
// call, and more than its estimate of capacity, is in flight.
func NewKratos() *Kratos {
	return &Kratos{Limiter: bbr.NewLimiter()}
}

var errKratosRejected = rejectedBy(ratelimit.ErrLimitExceed)

// Admit calls Allow; finish passes the call's error to the returned done
// function, as Kratos's ratelimit middleware does. BBR ignores it.
func (k *Kratos) Admit(context.Context) (func(error), error) {
	done, err := k.Limiter.Allow()
	if err != nil {
		return nil, errKratosRejected
	}
	return func(err error) { done(ratelimit.DoneInfo{Err: err}) }, nil
}

// XSemaphore is the Guard of a golang.org/x/sync weighted semaphore, each
// call weighing 1.
type XSemaphore struct {
	Sem *semaphore.Weighted
}

// NewXSemaphore returns an XSemaphore admitting n calls at a time.
func NewXSemaphore(n int64) *XSemaphore {
	return &XSemaphore{Sem: semaphore.NewWeighted(n)}
}

// Admit calls TryAcquire(1); finish calls Release(1).
func (x *XSemaphore) Admit(context.Context) (func(error), error) {
	if !x.Sem.TryAcquire(1) {
		return nil, ErrRejected
	}
	return func(error) { x.Sem.Release(1) }, nil
}

// Chan is the Guard of a semaphore made of a buffered channel: a call
// holds a slot of the buffer.
type Chan struct {
	C chan struct{}
}

// NewChan returns a Chan admitting n calls at a time.
func NewChan(n int) *Chan {
	return &Chan{C: make(chan struct{}, n)}
}

// Admit sends to C without blocking; finish receives from it.
func (c *Chan) Admit(context.Context) (func(error), error) {
	select {
	case c.C <- struct{}{}:
		return func(error) { <-c.C }, nil
	default:
		return nil, ErrRejected
	}
}
