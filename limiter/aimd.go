package limiter

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice/internal/fielderr"
)

// AIMDConfig configures AIMD, the default Algorithm: additive increase and
// multiplicative decrease of a limit on the calls in flight, applied once
// per round trip. The zero value of every field selects its default, so
// AIMDConfig{} is the recommended configuration.
//
// With Timeout zero (the default) a round trip is late when its mean RTT
// exceeds the no-load RTT by more than its noise, and the limit moves
// toward the calls the downstream can carry without a queue, by Little's
// law (docs/design.md has the rule, the reasoning and the measurements).
// A drop (RESOURCE_EXHAUSTED, an overrun deadline) counts with the time
// it took and not as a success, so a round trip in which few calls
// succeed is late and the limit falls toward what did.
//
// With an explicit Timeout, or PerCall, AIMD is the classic rule of TCP
// Reno and Netflix's AIMD: a drop, or a call slower than Timeout,
// multiplies the limit by BackoffRatio, and a success that found the
// limit at least half used adds one (per round trip, or per call with
// PerCall).
type AIMDConfig struct {
	// InitialLimit is the limit before any call has returned. Zero (the
	// default) admits every call until the first returns, so that a fresh
	// process in front of a healthy downstream refuses nothing, and then
	// slow-starts from the calls in flight, or from 20 (or MinLimit, if
	// larger) if fewer were. Set it to start from a known limit instead.
	InitialLimit int

	// MinLimit is the floor of the limit, at least 1. Default 1, so that
	// a backend that can take only a couple of calls at a time is still
	// protected.
	MinLimit int

	// MaxLimit is the ceiling of the limit, at most MaxLimit. Default
	// 1000, or InitialLimit if that is larger.
	MaxLimit int

	// BackoffRatio multiplies the limit on a drop; it must be in
	// [0.5, 1). Default 0.9. With the adaptive threshold it applies to
	// drops before the first round trip has been measured and to drops
	// of streams; a timed call's drop counts in its round trip (see AIMD).
	BackoffRatio float64

	// Timeout is the round-trip time above which a successful call counts
	// as a drop. Zero (the default) selects the adaptive threshold
	// described on AIMD, which fires as soon as queueing starts downstream
	// whether calls take 1 ms or 1 s.
	Timeout time.Duration

	// PerCall applies the rule to every call instead of once per round
	// trip: the behaviour of tower's and Netflix's AIMD. It reacts to each
	// late call of a burst separately, so against a backend whose latency
	// lags the limit by a round trip it overshoots and then collapses the
	// limit; prefer the default unless you need those exact dynamics.
	PerCall bool
}

// Defaults of AIMDConfig, as its field comments state them.
const (
	defaultAIMDInitialLimit = 20
	defaultAIMDMinLimit     = 1
	defaultAIMDMaxLimit     = 1000
	defaultAIMDBackoffRatio = 0.9
)

func (c AIMDConfig) withDefaults() AIMDConfig {
	if c.InitialLimit == 0 {
		c.InitialLimit = defaultAIMDInitialLimit
		if c.MinLimit > c.InitialLimit {
			c.InitialLimit = c.MinLimit
		}
		if c.MaxLimit > 0 && c.MaxLimit < c.InitialLimit {
			c.InitialLimit = c.MaxLimit
		}
	}
	if c.MinLimit == 0 {
		c.MinLimit = defaultAIMDMinLimit
	}
	if c.MaxLimit == 0 {
		c.MaxLimit = max(defaultAIMDMaxLimit, c.InitialLimit)
	}
	if c.BackoffRatio == 0 {
		c.BackoffRatio = defaultAIMDBackoffRatio
	}
	return c
}

// validate reports every invalid field of c, after defaults are applied.
func (c AIMDConfig) validate() error {
	c = c.withDefaults()
	errs := []error{checkLimits("AIMDConfig", c.InitialLimit, c.MinLimit, c.MaxLimit)}
	if !(c.BackoffRatio >= 0.5 && c.BackoffRatio < 1) {
		errs = append(errs, fielderr.New("AIMDConfig.BackoffRatio", c.BackoffRatio, "in [0.5, 1)"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fielderr.New("AIMDConfig.Timeout", c.Timeout, "> 0, or 0 for the adaptive threshold"))
	}
	return errors.Join(errs...)
}

// aimd is the Algorithm an AIMDConfig makes.
type aimd struct {
	cfg     AIMDConfig
	little  *little  // Timeout 0 and not PerCall
	classic *classic // otherwise
}

// New returns a fresh AIMD configured by c, or an error naming every field
// that is out of range.
func (c AIMDConfig) New() (Algorithm, error) {
	return algorithm(newAIMD(c))
}

func newAIMD(c AIMDConfig) (*aimd, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	admitAll := c.InitialLimit == 0
	c = c.withDefaults()
	a := &aimd{cfg: c}
	if c.Timeout == 0 && !c.PerCall {
		a.little = newLittle(c, admitAll)
	} else {
		a.classic = newClassic(c)
	}
	return a, nil
}

// Update implements Algorithm.
func (a *aimd) Update(s Sample) int {
	if a.little != nil {
		return a.little.Update(s)
	}
	return a.classic.Update(s)
}

// Limit implements Algorithm.
func (a *aimd) Limit() int {
	if a.little != nil {
		return a.little.Limit()
	}
	return a.classic.Limit()
}

// granted lets the Limiter count grants for the adaptive rule's probes.
func (a *aimd) granted(inflight int) (cohort, full bool) {
	if a.little == nil {
		return false, false
	}
	return a.little.granted(inflight)
}

func (a *aimd) String() string {
	return fmt.Sprintf("AIMD(limit=%d)", a.Limit())
}
