package limiter

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/fielderr"
)

// Gradient2Config configures Gradient2, a delay-based Algorithm after
// Netflix concurrency-limits' Gradient2Limit. It compares each sample's
// RTT (the short-term RTT) with an exponential moving average over
// LongWindow samples (the long-term RTT, a plain mean over the first 10):
//
//	gradient = max(0.5, min(1, longRTT / shortRTT))
//	newLimit = limit × gradient + QueueSize
//	limit    = limit × (1 − Smoothing) + newLimit × Smoothing
//
// clamped to [MinLimit, MaxLimit]. When the long-term RTT exceeds twice
// the short-term one, as after a long overload, it is multiplied by 0.9 so
// the baseline comes back down quickly. While in-flight is below half the
// limit the limit does not change.
//
// Netflix's version ignores drops; here a Dropped sample counts as the
// worst gradient, 0.5, so that RESOURCE_EXHAUSTED and deadline overruns
// still back the limit off.
//
// The zero value of every field of Gradient2Config selects its default.
type Gradient2Config struct {
	InitialLimit int // default 20
	MinLimit     int // default 1
	MaxLimit     int // default 200
	// QueueSize is how far the limit may grow past the gradient's verdict
	// while latencies stay low. Default 4.
	QueueSize int
	// Smoothing in (0, 1] blends each new limit with the old one.
	// Default 0.2.
	Smoothing float64
	// LongWindow is the number of samples the long-term RTT average
	// spans. Default 600.
	LongWindow int
}

func (c Gradient2Config) withDefaults() Gradient2Config {
	if c.InitialLimit == 0 {
		c.InitialLimit = 20
	}
	if c.MinLimit == 0 {
		c.MinLimit = 1
	}
	if c.MaxLimit == 0 {
		c.MaxLimit = max(200, c.InitialLimit)
	}
	if c.QueueSize == 0 {
		c.QueueSize = 4
	}
	if c.Smoothing == 0 {
		c.Smoothing = 0.2
	}
	if c.LongWindow == 0 {
		c.LongWindow = 600
	}
	return c
}

// validate reports every invalid field of c, after defaults are applied.
func (c Gradient2Config) validate() error {
	c = c.withDefaults()
	errs := []error{checkLimits("Gradient2Config", c.InitialLimit, c.MinLimit, c.MaxLimit)}
	if c.QueueSize < 0 {
		errs = append(errs, fielderr.New("Gradient2Config.QueueSize", c.QueueSize, ">= 0"))
	}
	if !(c.Smoothing > 0 && c.Smoothing <= 1) {
		errs = append(errs, fielderr.New("Gradient2Config.Smoothing", c.Smoothing, "in (0, 1]"))
	}
	if c.LongWindow < 1 {
		errs = append(errs, fielderr.New("Gradient2Config.LongWindow", c.LongWindow, ">= 1"))
	}
	return errors.Join(errs...)
}

// gradient2Warmup is how many samples the long-term average takes as a
// plain mean before it becomes exponential.
const gradient2Warmup = 10

// gradient2 is the Algorithm a Gradient2Config makes.
type gradient2 struct {
	cfg Gradient2Config

	mu      sync.Mutex
	limit   float64
	longRTT float64 // seconds
	n       int     // samples in longRTT, up to the warmup
}

// New returns a fresh Gradient2 configured by c, or an error naming every
// field that is out of range.
func (c Gradient2Config) New() (Algorithm, error) {
	return algorithm(newGradient2(c))
}

func newGradient2(c Gradient2Config) (*gradient2, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	return &gradient2{cfg: c, limit: float64(c.InitialLimit)}, nil
}

// Limit implements Algorithm.
func (g *gradient2) Limit() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int(g.limit)
}

// longRTTAverage returns the long-term RTT average, for tests.
func (g *gradient2) longRTTAverage() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return time.Duration(g.longRTT * float64(time.Second))
}

// Update implements Algorithm.
func (g *gradient2) Update(s Sample) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.Outcome == Ignored || (s.RTT <= 0 && s.Outcome != Dropped) {
		return int(g.limit)
	}
	if s.RTT < 0 {
		// An untimed drop (a stream) carries no RTT, but it is still
		// overload: apply the drop's gradient without touching the RTT
		// averages.
		g.setLocked(0.5)
		return int(g.limit)
	}
	short := s.RTT.Seconds()
	if g.n < gradient2Warmup {
		g.n++
		g.longRTT += (short - g.longRTT) / float64(g.n)
	} else {
		f := 2 / float64(g.cfg.LongWindow+1)
		g.longRTT = g.longRTT*(1-f) + short*f
	}
	if g.longRTT/short > 2 {
		g.longRTT *= 0.9
	}
	if float64(s.Inflight) < g.limit/2 {
		return int(g.limit)
	}
	gradient := max(0.5, min(1, g.longRTT/short))
	if s.Outcome == Dropped {
		gradient = 0.5
	}
	g.setLocked(gradient)
	return int(g.limit)
}

// setLocked moves the limit toward limit × gradient + QueueSize, within its
// bounds, by Smoothing.
func (g *gradient2) setLocked(gradient float64) {
	next := g.limit*gradient + float64(g.cfg.QueueSize)
	next = g.limit*(1-g.cfg.Smoothing) + next*g.cfg.Smoothing
	g.limit = min(max(next, float64(g.cfg.MinLimit)), float64(g.cfg.MaxLimit))
}

func (g *gradient2) String() string { return fmt.Sprintf("Gradient2(limit=%d)", g.Limit()) }
