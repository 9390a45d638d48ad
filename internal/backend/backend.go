package backend

import (
	"context"
	"errors"
	"fmt"
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
)

func (d Dist) String() string {
	switch d {
	case Constant:
		return "constant"
	case Uniform:
		return "uniform"
	case Exponential:
		return "exponential"
	}
	return fmt.Sprintf("Dist(%d)", uint8(d))
}

// ParseDist parses "constant", "uniform" or "exponential".
func ParseDist(s string) (Dist, error) {
	switch s {
	case "constant", "":
		return Constant, nil
	case "uniform":
		return Uniform, nil
	case "exponential":
		return Exponential, nil
	}
	return 0, fmt.Errorf(`backend: distribution must be "constant", "uniform" or "exponential", got %q`, s)
}

// sampler draws service times; safe for concurrent use.
type sampler struct {
	mean time.Duration
	dist Dist
	mu   sync.Mutex
	rng  *rand.Rand
}

func newSampler(mean time.Duration, d Dist) *sampler {
	return &sampler{mean: mean, dist: d, rng: rand.New(rand.NewPCG(uint64(mean), 7))}
}

func (s *sampler) next() time.Duration {
	if s.dist == Constant {
		return s.mean
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dist == Uniform {
		return time.Duration((0.5 + s.rng.Float64()) * float64(s.mean))
	}
	return time.Duration(s.rng.ExpFloat64() * float64(s.mean))
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

	mu       sync.Mutex
	capacity int
	busy     int
	queue    []*fifoWaiter
}

type fifoWaiter struct {
	ready chan struct{}
	left  bool
}

// NewFIFO returns a FIFO backend with c workers and service time s.
func NewFIFO(c int, s time.Duration) (*FIFO, error) {
	if err := checkConfig(c, s); err != nil {
		return nil, err
	}
	return &FIFO{service: s, capacity: c, draw: newSampler(s, Constant)}, nil
}

// Do implements Backend.
func (b *FIFO) Do(ctx context.Context) error {
	b.mu.Lock()
	if b.busy < b.capacity && len(b.queue) == 0 {
		b.busy++
		b.mu.Unlock()
	} else {
		w := &fifoWaiter{ready: make(chan struct{})}
		b.queue = append(b.queue, w)
		b.mu.Unlock()
		select {
		case <-w.ready:
		case <-ctx.Done():
			b.mu.Lock()
			select {
			case <-w.ready: // got a worker while leaving: give it back
				b.finishLocked()
			default:
				w.left = true
			}
			b.mu.Unlock()
			return ctx.Err()
		}
	}
	timer := time.NewTimer(b.draw.next())
	<-timer.C
	b.mu.Lock()
	b.finishLocked()
	b.mu.Unlock()
	return ctx.Err()
}

// finishLocked frees a worker and hands free workers to queued calls.
func (b *FIFO) finishLocked() {
	b.busy--
	b.dispatchLocked()
}

func (b *FIFO) dispatchLocked() {
	for b.busy < b.capacity && len(b.queue) > 0 {
		w := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		if w.left {
			continue
		}
		b.busy++
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
	b.dispatchLocked()
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
	return &ProcessorSharing{service: s, capacity: c, jobs: make(map[*psJob]struct{}), draw: newSampler(s, Constant)}, nil
}

// Do implements Backend.
func (b *ProcessorSharing) Do(ctx context.Context) error {
	j := &psJob{remaining: b.draw.next().Seconds(), done: make(chan struct{})}
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

// advanceLocked brings remaining work up to now and completes finished jobs.
func (b *ProcessorSharing) advanceLocked(now time.Time) {
	if !b.last.IsZero() && len(b.jobs) > 0 {
		work := now.Sub(b.last).Seconds() * b.rateLocked()
		for j := range b.jobs {
			j.remaining -= work
			// Timers fire at whole nanoseconds: treat a sliver as done.
			if j.remaining <= 1e-9 {
				delete(b.jobs, j)
				close(j.done)
			}
		}
	}
	b.last = now
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
	least := -1.0
	for j := range b.jobs {
		if least < 0 || j.remaining < least {
			least = j.remaining
		}
	}
	wait := time.Duration(least / b.rateLocked() * float64(time.Second))
	gen := b.gen
	b.timer = time.AfterFunc(max(wait, time.Nanosecond), func() {
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
// c and service times of mean s drawn from d.
func New(kind string, c int, s time.Duration, d Dist) (Backend, error) {
	if d > Exponential {
		return nil, fmt.Errorf("backend: unknown distribution %d", d)
	}
	switch kind {
	case "fifo":
		b, err := NewFIFO(c, s)
		if err == nil {
			b.draw = newSampler(s, d)
		}
		return b, err
	case "ps":
		b, err := NewProcessorSharing(c, s)
		if err == nil {
			b.draw = newSampler(s, d)
		}
		return b, err
	}
	return nil, fmt.Errorf("%w, got %q", ErrUnknownKind, kind)
}
