package backend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// A Backend serves calls with a capacity that can change at run time.
type Backend interface {
	// Do performs one call of the configured service time. It returns
	// ctx's error if ctx ends before the call completes; work already
	// started is not interrupted (FIFO) or is abandoned (ProcessorSharing).
	Do(ctx context.Context) error
	// DoFor performs one call that needs d of service at full speed
	// instead of a draw from the distribution: a service whose methods
	// differ in cost sharing one pool. d must be positive.
	DoFor(ctx context.Context, d time.Duration) error
	// SetCapacity changes the number of calls served at full speed.
	SetCapacity(c int) error
	// Capacity returns the current capacity.
	Capacity() int
}

// Dist is the distribution of service times around their mean.
type Dist uint8

const (
	Constant    Dist = iota // every call takes exactly the service time
	Uniform                 // uniform in [0.5, 1.5] × the service time
	Exponential             // exponential with the service time as mean
	// Bimodal is a cache in front of a slow store: a third of the service
	// time for 90 % of calls (hits), seven times it for 10 % (misses).
	// Mean S, coefficient of variation 2.
	Bimodal
	// Lognormal is a heavy tail: lognormal with σ = 1.2 and mean S,
	// coefficient of variation 1.8; one call in a hundred takes over 8·S.
	Lognormal
	// TwoMethods is two methods of one service on one pool, as the
	// overload matrix's methods shape: a quarter of the service time for
	// 80 % of calls, four times it for 20 %. Mean S, coefficient of
	// variation 1.5.
	TwoMethods
	// Pareto is a tail without a variance: Pareto with α = 1.5 and mean S,
	// S/3 at the least; one call in 160 takes over 10·S. A round trip's
	// spread never settles, whatever its size.
	Pareto
)

// maxDist is the last Dist.
const maxDist = Pareto

// paretoAlpha is Pareto's shape α; the scale S·(α−1)/α puts the mean at S.
const paretoAlpha = 1.5

// lognormalSigma is Lognormal's σ; its μ puts the mean at the service time.
const lognormalSigma = 1.2

func (d Dist) String() string {
	switch d {
	case Constant:
		return "constant"
	case Uniform:
		return "uniform"
	case Exponential:
		return "exponential"
	case Bimodal:
		return "bimodal"
	case Lognormal:
		return "lognormal"
	case TwoMethods:
		return "methods"
	case Pareto:
		return "pareto"
	}
	return fmt.Sprintf("Dist(%d)", uint8(d))
}

// ParseDist parses a Dist's name: "constant", "uniform", "exponential",
// "bimodal", "lognormal", "methods" or "pareto".
func ParseDist(s string) (Dist, error) {
	switch s {
	case "constant", "":
		return Constant, nil
	case "uniform":
		return Uniform, nil
	case "exponential":
		return Exponential, nil
	case "bimodal":
		return Bimodal, nil
	case "lognormal":
		return Lognormal, nil
	case "methods":
		return TwoMethods, nil
	case "pareto":
		return Pareto, nil
	}
	return 0, fmt.Errorf(`backend: distribution must be "constant", "uniform", "exponential", "bimodal", "lognormal", "methods" or "pareto", got %q`, s)
}

// sampler draws service times; safe for concurrent use.
type sampler struct {
	mean time.Duration
	dist Dist
	mu   sync.Mutex
	rng  *rand.Rand
}

func newSampler(mean time.Duration, d Dist, seed uint64) *sampler {
	return &sampler{mean: mean, dist: d, rng: rand.New(rand.NewPCG(seed, uint64(mean)))}
}

func (s *sampler) next() time.Duration {
	if s.dist == Constant {
		return s.mean
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := float64(s.mean)
	switch s.dist {
	case Uniform:
		return time.Duration((0.5 + s.rng.Float64()) * m)
	case Bimodal:
		if s.rng.Float64() < 0.9 {
			return time.Duration(m / 3)
		}
		return time.Duration(7 * m)
	case TwoMethods:
		if s.rng.Float64() < 0.8 {
			return time.Duration(m / 4)
		}
		return time.Duration(4 * m)
	case Lognormal:
		// E[exp(μ + σZ)] = exp(μ + σ²/2): the mean is m with μ = ln m − σ²/2.
		return time.Duration(m * math.Exp(lognormalSigma*s.rng.NormFloat64()-lognormalSigma*lognormalSigma/2))
	case Pareto:
		return time.Duration(m * (paretoAlpha - 1) / paretoAlpha * math.Pow(1-s.rng.Float64(), -1/paretoAlpha))
	}
	return time.Duration(s.rng.ExpFloat64() * m)
}

func checkWork(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("backend: a call's service time is %v, must be positive", d)
	}
	return nil
}

func checkConfig(c int, s time.Duration) error {
	if c < 1 {
		return fmt.Errorf("backend: capacity is %d, must be at least 1", c)
	}
	if s <= 0 {
		return fmt.Errorf("backend: service time is %v, must be positive", s)
	}
	return nil
}

// FIFO is a Backend with c workers, each taking service time s per call,
// and an unbounded first-in first-out queue in front of them. A queued
// call whose context ends leaves the queue; a call being served holds its
// worker for the full service time even if its caller has gone, as a real
// database keeps running an abandoned query.
type FIFO struct {
	service time.Duration
	draw    *sampler
	late    time.Duration // tests: every timer fires this much late

	mu       sync.Mutex
	capacity int
	busy     int
	queue    []*fifoWaiter
}

type fifoWaiter struct {
	ready   chan struct{}
	left    bool
	arrived time.Time
	start   time.Time // when its service began; set before ready closes
}

// NewFIFO returns a FIFO backend with c workers and service time s.
func NewFIFO(c int, s time.Duration) (*FIFO, error) {
	if err := checkConfig(c, s); err != nil {
		return nil, err
	}
	return &FIFO{service: s, capacity: c, draw: newSampler(s, Constant, 0)}, nil
}

// Do implements Backend.
func (b *FIFO) Do(ctx context.Context) error { return b.do(ctx, 0) }

// DoFor implements Backend.
func (b *FIFO) DoFor(ctx context.Context, d time.Duration) error {
	if err := checkWork(d); err != nil {
		return err
	}
	return b.do(ctx, d)
}

// do serves one call of service time d, or of a draw made when its
// service starts if d is 0.
func (b *FIFO) do(ctx context.Context, d time.Duration) error {
	var start time.Time
	b.mu.Lock()
	if b.busy < b.capacity && len(b.queue) == 0 {
		b.busy++
		b.mu.Unlock()
		start = time.Now()
	} else {
		w := &fifoWaiter{ready: make(chan struct{}), arrived: time.Now()}
		b.queue = append(b.queue, w)
		b.mu.Unlock()
		select {
		case <-w.ready:
			start = w.start
		case <-ctx.Done():
			b.mu.Lock()
			select {
			case <-w.ready: // got a worker while leaving: give it back
				b.finishLocked(w.start)
			default:
				w.left = true
			}
			b.mu.Unlock()
			return ctx.Err()
		}
	}
	if d == 0 {
		d = b.draw.next()
	}
	end := start.Add(d)
	timer := time.NewTimer(time.Until(end) + b.late)
	<-timer.C
	b.mu.Lock()
	b.finishLocked(end)
	b.mu.Unlock()
	return ctx.Err()
}

// catchUpShare bounds how far in the past a worker's next call may start:
// a 1/catchUpShare of the mean service time. A worker freed at time t starts
// the next queued call at t, not when its timer fired or its goroutine
// woke, so the lateness of timers and of the scheduler does not reduce
// capacity below C/S; a long stall (a GC pause, a starved process) is
// lost, as a real server would lose it, beyond this bound.
const catchUpShare = 10

// finishLocked frees a worker that became free at the given time and hands
// free workers to queued calls.
func (b *FIFO) finishLocked(freed time.Time) {
	b.busy--
	b.dispatchLocked(freed)
}

// dispatchLocked starts queued calls on free workers, as of the time the
// workers became free.
func (b *FIFO) dispatchLocked(freed time.Time) {
	if earliest := time.Now().Add(-b.service / catchUpShare); freed.Before(earliest) {
		freed = earliest
	}
	for b.busy < b.capacity && len(b.queue) > 0 {
		w := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		if w.left {
			continue
		}
		b.busy++
		// A call that arrived after the worker was due to be free (it
		// queued only because the worker's timer had not fired yet)
		// starts when it arrived.
		w.start = freed
		if w.arrived.After(freed) {
			w.start = w.arrived
		}
		close(w.ready)
	}
}

// SetCapacity implements Backend. Lowering the capacity lets calls in
// service finish; no new call starts until busy workers drop below it.
func (b *FIFO) SetCapacity(c int) error {
	if err := checkConfig(c, b.service); err != nil {
		return err
	}
	b.mu.Lock()
	b.capacity = c
	b.dispatchLocked(time.Now())
	b.mu.Unlock()
	return nil
}

// Capacity implements Backend.
func (b *FIFO) Capacity() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.capacity
}

// ProcessorSharing is a Backend that serves all calls in progress at once.
// Each call needs s of work; with n calls in progress and capacity c, each
// progresses at rate min(1, c/n). A call whose context ends leaves and
// frees its share.
type ProcessorSharing struct {
	service time.Duration
	draw    *sampler
	late    time.Duration // tests: every timer fires this much late

	mu       sync.Mutex
	capacity int
	jobs     map[*psJob]struct{}
	last     time.Time   // when remaining work was last brought up to date
	timer    *time.Timer // fires at the next completion; nil when idle
	gen      uint64      // invalidates timer callbacks that lost a race
}

type psJob struct {
	remaining float64 // seconds of work left at full speed
	done      chan struct{}
}

// NewProcessorSharing returns a processor-sharing backend of capacity c and
// service time s.
func NewProcessorSharing(c int, s time.Duration) (*ProcessorSharing, error) {
	if err := checkConfig(c, s); err != nil {
		return nil, err
	}
	return &ProcessorSharing{service: s, capacity: c, jobs: make(map[*psJob]struct{}), draw: newSampler(s, Constant, 0)}, nil
}

// Do implements Backend.
func (b *ProcessorSharing) Do(ctx context.Context) error { return b.do(ctx, b.draw.next()) }

// DoFor implements Backend.
func (b *ProcessorSharing) DoFor(ctx context.Context, d time.Duration) error {
	if err := checkWork(d); err != nil {
		return err
	}
	return b.do(ctx, d)
}

func (b *ProcessorSharing) do(ctx context.Context, d time.Duration) error {
	j := &psJob{remaining: d.Seconds(), done: make(chan struct{})}
	b.mu.Lock()
	b.advanceLocked(time.Now())
	b.jobs[j] = struct{}{}
	b.rescheduleLocked()
	b.mu.Unlock()
	select {
	case <-j.done:
		return ctx.Err()
	case <-ctx.Done():
		b.mu.Lock()
		if _, ok := b.jobs[j]; ok {
			b.advanceLocked(time.Now())
			delete(b.jobs, j)
			b.rescheduleLocked()
		}
		b.mu.Unlock()
		return ctx.Err()
	}
}

// rate is the speed of each job, in seconds of work per second.
func (b *ProcessorSharing) rateLocked() float64 {
	n := len(b.jobs)
	if n <= b.capacity {
		return 1
	}
	return float64(b.capacity) / float64(n)
}

// advanceLocked brings remaining work up to now and completes finished
// jobs. It steps from completion to completion, each at the rate of its
// own stretch, so the work is exact however late the timer or the call
// that brought it here: a job that was due to end before now ends at its
// due time in the accounting, and the others get its share from then on.
func (b *ProcessorSharing) advanceLocked(now time.Time) {
	for !b.last.IsZero() && len(b.jobs) > 0 {
		rate := b.rateLocked()
		least := b.leastRemainingLocked()
		due := b.last.Add(time.Duration(least / rate * float64(time.Second)))
		if due.After(now) {
			work := now.Sub(b.last).Seconds() * rate
			for j := range b.jobs {
				j.remaining -= work
			}
			break
		}
		for j := range b.jobs {
			j.remaining -= least
			// Timers fire at whole nanoseconds: treat a sliver as done.
			if j.remaining <= 1e-9 {
				delete(b.jobs, j)
				close(j.done)
			}
		}
		b.last = due
	}
	b.last = now
}

func (b *ProcessorSharing) leastRemainingLocked() float64 {
	least := -1.0
	for j := range b.jobs {
		if least < 0 || j.remaining < least {
			least = j.remaining
		}
	}
	return least
}

// rescheduleLocked arms the timer for the next completion.
func (b *ProcessorSharing) rescheduleLocked() {
	b.gen++
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if len(b.jobs) == 0 {
		return
	}
	wait := time.Duration(b.leastRemainingLocked() / b.rateLocked() * float64(time.Second))
	gen := b.gen
	b.timer = time.AfterFunc(max(wait, time.Nanosecond)+b.late, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if gen != b.gen {
			return
		}
		b.timer = nil
		b.advanceLocked(time.Now())
		b.rescheduleLocked()
	})
}

// SetCapacity implements Backend.
func (b *ProcessorSharing) SetCapacity(c int) error {
	if err := checkConfig(c, b.service); err != nil {
		return err
	}
	b.mu.Lock()
	b.advanceLocked(time.Now())
	b.capacity = c
	b.rescheduleLocked()
	b.mu.Unlock()
	return nil
}

// Capacity implements Backend.
func (b *ProcessorSharing) Capacity() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.capacity
}

// ErrUnknownKind is returned by New for a kind other than "fifo" or "ps".
var ErrUnknownKind = errors.New(`backend: kind must be "fifo" or "ps"`)

// New returns a backend of the named kind, "fifo" or "ps", with capacity
// c and service times of mean s drawn from d. The draws follow seed: runs
// that differ in seed differ in their service times, not only in their
// arrivals.
func New(kind string, c int, s time.Duration, d Dist, seed uint64) (Backend, error) {
	if d > maxDist {
		return nil, fmt.Errorf("backend: unknown distribution %d", d)
	}
	switch kind {
	case "fifo":
		b, err := NewFIFO(c, s)
		if err == nil {
			b.draw = newSampler(s, d, seed)
		}
		return b, err
	case "ps":
		b, err := NewProcessorSharing(c, s)
		if err == nil {
			b.draw = newSampler(s, d, seed)
		}
		return b, err
	}
	return nil, fmt.Errorf("%w, got %q", ErrUnknownKind, kind)
}
