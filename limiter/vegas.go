package limiter

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/fielderr"
)

// VegasConfig configures Vegas, a delay-based Algorithm after TCP Vegas,
// as implemented by Netflix concurrency-limits' VegasLimit. It estimates
// how many calls are queued downstream from the ratio of the no-load RTT
// to the current RTT:
//
//	queue = ceil(limit × (1 − rtt_noload / rtt))
//
// and, with l = max(1, ⌊log10(limit)⌋):
//
//   - on a drop: limit −= l;
//   - else if in-flight × 2 < limit: no change (the limiter is idle);
//   - else if queue <= l: limit += Beta·l (no queueing: grow fast);
//   - else if queue < Alpha·l: limit += l;
//   - else if queue > Beta·l: limit −= l;
//   - the result is clamped to [MinLimit, MaxLimit] and blended with the
//     old limit by Smoothing.
//
// rtt_noload is the smallest RTT seen, reset to the current RTT about every
// ProbeMultiplier × limit samples (with a jitter between one half and one)
// so that it can follow a downstream that became slower. The jitter comes
// from a generator with a fixed seed, so Vegas is deterministic given its
// samples.
//
// The zero value of every field of VegasConfig selects its default.
type VegasConfig struct {
	InitialLimit int     // default 20
	MinLimit     int     // default 1
	MaxLimit     int     // default 1000
	Alpha        float64 // queue below Alpha·log10(limit) grows the limit; default 3
	Beta         float64 // queue above Beta·log10(limit) shrinks it; default 6
	// Smoothing in (0, 1] blends each new limit with the old one: 1 (the
	// default) takes the new limit as is.
	Smoothing float64
	// ProbeMultiplier: the no-load RTT is re-measured about every
	// ProbeMultiplier × limit samples. Default 30.
	ProbeMultiplier int
}

func (c VegasConfig) withDefaults() VegasConfig {
	if c.InitialLimit == 0 {
		c.InitialLimit = 20
	}
	if c.MinLimit == 0 {
		c.MinLimit = 1
	}
	if c.MaxLimit == 0 {
		c.MaxLimit = max(1000, c.InitialLimit)
	}
	if c.Alpha == 0 {
		c.Alpha = 3
	}
	if c.Beta == 0 {
		c.Beta = 6
	}
	if c.Smoothing == 0 {
		c.Smoothing = 1
	}
	if c.ProbeMultiplier == 0 {
		c.ProbeMultiplier = 30
	}
	return c
}

// validate reports every invalid field of c, after defaults are applied.
func (c VegasConfig) validate() error {
	c = c.withDefaults()
	errs := []error{checkLimits("VegasConfig", c.InitialLimit, c.MinLimit, c.MaxLimit)}
	if !(c.Alpha > 0) {
		errs = append(errs, fielderr.New("VegasConfig.Alpha", c.Alpha, "> 0"))
	}
	if !(c.Beta > c.Alpha) {
		errs = append(errs, fielderr.New("VegasConfig.Beta", c.Beta, fmt.Sprintf("> Alpha (%v)", c.Alpha)))
	}
	if !(c.Smoothing > 0 && c.Smoothing <= 1) {
		errs = append(errs, fielderr.New("VegasConfig.Smoothing", c.Smoothing, "in (0, 1]"))
	}
	if c.ProbeMultiplier < 1 {
		errs = append(errs, fielderr.New("VegasConfig.ProbeMultiplier", c.ProbeMultiplier, ">= 1"))
	}
	return errors.Join(errs...)
}

// vegas is the Algorithm a VegasConfig makes.
type vegas struct {
	cfg VegasConfig

	mu         sync.Mutex
	limit      float64
	noLoad     time.Duration
	probeCount int
	jitter     float64
	rng        *rand.Rand
}

// New returns a fresh Vegas configured by c, or an error naming every
// field that is out of range.
func (c VegasConfig) New() (Algorithm, error) {
	return algorithm(newVegas(c))
}

func newVegas(c VegasConfig) (*vegas, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	v := &vegas{cfg: c, limit: float64(c.InitialLimit), rng: rand.New(rand.NewPCG(0x5eed, 0x7e6a5))}
	v.jitter = v.nextJitter()
	return v, nil
}

func (v *vegas) nextJitter() float64 { return 0.5 + v.rng.Float64()/2 }

// Limit implements Algorithm.
func (v *vegas) Limit() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return int(v.limit)
}

func log10Step(limit float64) float64 {
	return max(1, math.Floor(math.Log10(limit)))
}

// Update implements Algorithm.
func (v *vegas) Update(s Sample) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	if s.Outcome == Ignored || (s.RTT <= 0 && s.Outcome != Dropped) {
		return int(v.limit)
	}
	if s.RTT < 0 {
		// An untimed drop (a stream) carries no RTT to compare, but it
		// is still overload: step down as a timed drop does.
		v.setLocked(v.limit - log10Step(v.limit))
		return int(v.limit)
	}
	v.probeCount++
	if v.jitter*float64(v.cfg.ProbeMultiplier)*v.limit <= float64(v.probeCount) {
		v.jitter = v.nextJitter()
		v.probeCount = 0
		v.noLoad = s.RTT
		return int(v.limit)
	}
	if v.noLoad == 0 || s.RTT < v.noLoad {
		v.noLoad = s.RTT
		return int(v.limit)
	}
	step := log10Step(v.limit)
	next := v.limit
	if s.Outcome == Dropped {
		next -= step
	} else {
		if float64(s.Inflight*2) < v.limit {
			return int(v.limit)
		}
		queue := math.Ceil(v.limit * (1 - float64(v.noLoad)/float64(s.RTT)))
		switch {
		case queue <= step:
			next += v.cfg.Beta * step
		case queue < v.cfg.Alpha*step:
			next += step
		case queue > v.cfg.Beta*step:
			next -= step
		default:
			return int(v.limit)
		}
	}
	v.setLocked(next)
	return int(v.limit)
}

// setLocked moves the limit toward next, within its bounds, by Smoothing.
func (v *vegas) setLocked(next float64) {
	next = min(max(next, float64(v.cfg.MinLimit)), float64(v.cfg.MaxLimit))
	v.limit = (1-v.cfg.Smoothing)*v.limit + v.cfg.Smoothing*next
}

func (v *vegas) String() string { return fmt.Sprintf("Vegas(limit=%d)", v.Limit()) }
