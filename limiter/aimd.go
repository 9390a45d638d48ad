package limiter

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// AIMDConfig configures an AIMD. The zero value of every field selects its
// default, so AIMDConfig{} is the recommended configuration.
type AIMDConfig struct {
	// InitialLimit is the limit before any sample is seen. Default 20,
	// or MinLimit if that is larger.
	InitialLimit int

	// MinLimit is the floor of the limit, at least 1. Default 1, so that
	// a backend that can take only a couple of calls at a time is still
	// protected.
	MinLimit int

	// MaxLimit is the ceiling of the limit, at most MaxLimit. Default
	// 1000, or InitialLimit if that is larger.
	MaxLimit int

	// BackoffRatio multiplies the limit on a drop; it must be in
	// [0.5, 1). Default 0.9.
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

// Defaults of AIMDConfig.
const (
	DefaultAIMDInitialLimit = 20
	DefaultAIMDMinLimit     = 1
	DefaultAIMDMaxLimit     = 1000
	DefaultAIMDBackoffRatio = 0.9
)

// Parameters of the adaptive threshold, used when AIMDConfig.Timeout is 0.
const (
	// adaptiveTolerance is how many times the no-load RTT a round trip's
	// mean RTT may reach before it counts as a drop.
	adaptiveTolerance = 1.3
	// probeFraction of the limit is the most calls in flight under which
	// a round trip measures the no-load RTT. Near its operating point the
	// limit sits at about adaptiveTolerance × the downstream's capacity, so
	// two thirds of it is below capacity: those calls meet no queue.
	probeFraction = 2.0 / 3
	// probeInterval is how long the baseline may go without a no-load
	// measurement before a probe takes one.
	probeInterval = 5 * time.Second
	// probeCalm is how many round trips without a drop must precede a
	// probe, so that no probe measures a limit still coming down.
	probeCalm = 3
	// baselineWeight is the weight of a new measurement in the baseline.
	baselineWeight = 0.5
	// cvWeight is the weight of a round trip's RTT variability in the
	// running estimate that sizes the next round trips.
	cvWeight = 0.1
	// spareTolerance: a loaded round trip whose mean RTT is within this
	// factor of the baseline met no queue, and grows the limit faster.
	spareTolerance = 1.1
	// windowSigmas is how many standard errors of a round trip's mean
	// must fit inside the tolerance: 3 keeps false alarms near 0.1%.
	windowSigmas = 3
	// maxWindowSamples caps the samples a round trip needs when the RTT
	// is very noisy.
	maxWindowSamples = 256
)

func (c AIMDConfig) withDefaults() AIMDConfig {
	if c.InitialLimit == 0 {
		c.InitialLimit = DefaultAIMDInitialLimit
		if c.MinLimit > c.InitialLimit {
			c.InitialLimit = c.MinLimit
		}
		if c.MaxLimit > 0 && c.MaxLimit < c.InitialLimit {
			c.InitialLimit = c.MaxLimit
		}
	}
	if c.MinLimit == 0 {
		c.MinLimit = DefaultAIMDMinLimit
	}
	if c.MaxLimit == 0 {
		c.MaxLimit = max(DefaultAIMDMaxLimit, c.InitialLimit)
	}
	if c.BackoffRatio == 0 {
		c.BackoffRatio = DefaultAIMDBackoffRatio
	}
	return c
}

// Validate reports every invalid field of c, after defaults are applied.
func (c AIMDConfig) Validate() error {
	c = c.withDefaults()
	errs := []error{checkLimits("AIMDConfig", c.InitialLimit, c.MinLimit, c.MaxLimit)}
	if !(c.BackoffRatio >= 0.5 && c.BackoffRatio < 1) {
		errs = append(errs, &ConfigError{"AIMDConfig.BackoffRatio", c.BackoffRatio, "in [0.5, 1)"})
	}
	if c.Timeout < 0 {
		errs = append(errs, &ConfigError{"AIMDConfig.Timeout", c.Timeout, "> 0, or 0 for the adaptive threshold"})
	}
	return errors.Join(errs...)
}

// AIMD is a loss-based Algorithm: additive increase, multiplicative
// decrease, the scheme of TCP Reno. Its rule, applied to a sample, is:
//
//   - on a drop, or a success whose RTT exceeds the timeout, the limit is
//     multiplied by BackoffRatio, but not below MinLimit;
//   - on a success while the limiter is loaded (in-flight × 2 ≥ limit) the
//     limit grows by 1, up to MaxLimit; an idle limiter does not grow, so
//     the limit stays meaningful after a quiet period;
//   - Ignored samples change nothing.
//
// The limit is kept as a float, so repeated backoffs decay smoothly
// (10, 9, 8.1, 7.29, ...); Limit reports its integer part.
//
// # Round trips
//
// Unless PerCall is set, the rule is applied once per round trip, to the
// calls of that round trip taken together (see Windowed for how a round
// trip is delimited): a drop among them backs off once, and a round trip
// without drops grows the limit by one. This is congestion avoidance as in
// TCP: the limit moves by one step per round trip, so it never acts twice
// on the same congestion. Until the first backoff, each loaded success
// grows the limit by one (slow start), so a new limiter finds a large
// capacity in a few round trips; slow start ends at the first call slower
// than the threshold. With the adaptive threshold, a loaded round trip
// whose mean RTT stays within 10% of the baseline grows the limit by an
// eighth instead of by one: the downstream has room, for example because
// its capacity just doubled, and a large limit catches up in a few round
// trips instead of hundreds.
//
// # Adaptive threshold
//
// With Timeout zero, a round trip counts as a drop when its mean RTT
// exceeds 1.3 times a baseline: the mean RTT of calls that met no queue.
// The baseline is measured on whole round trips, never on single calls, so
// that service times that vary from call to call do not bias it:
//
//   - a round trip whose calls were all admitted with no more than two
//     thirds of the limit in flight met no queue of our making, and its
//     mean RTT updates the baseline; light load provides these all the
//     time;
//   - under sustained overload every call is admitted at the limit, so when
//     the baseline has not been updated for 5 s and the limit has been
//     steady for 3 round trips, AIMD probes, in the manner of BBR's
//     ProbeRTT: it lowers the limit to two thirds until as many calls
//     admitted under it have returned as a round trip needs, restores the
//     limit, and takes the mean RTT of all the calls it admitted, waiting
//     four baselines for the slow ones so as not to measure the fast
//     ones only.
//     Near the operating point that leaves the downstream about 90% busy
//     for a round trip or two.
//
// The noisier the RTT, the more samples a round trip needs before its mean
// can be compared with the baseline: enough for three standard errors to
// stay inside the 30% tolerance, from 10 for steady service times up to
// 256.
type AIMD struct {
	cfg AIMDConfig

	mu        sync.Mutex
	limit     float64
	slowStart bool
	calm      int     // round trips since the last backoff
	cv        float64 // running coefficient of variation of RTT; -1 unknown
	need      int     // samples a round trip needs, derived from cv
	win       window
	base      baseline
}

// baseline is the no-load RTT estimate behind the adaptive threshold.
type baseline struct {
	rtt     time.Duration // 0 until the first measurement
	updated time.Time

	// A probe admits calls under a lowered limit from probeFrom until
	// enough of them have returned (probing), then restores the limit and
	// keeps collecting the calls it admitted until collectUntil, so that
	// the long ones are counted too: stopping at the first returns would
	// measure the short calls only.
	probing      bool
	collecting   bool
	probeFrom    time.Time
	probeTo      time.Time // end of admission; zero while probing
	collectUntil time.Time
	probeN       int
	probeSum     time.Duration
}

func (b *baseline) update(rtt time.Duration, at time.Time) {
	if b.rtt == 0 {
		b.rtt = rtt
	} else {
		b.rtt += time.Duration(baselineWeight * float64(rtt-b.rtt))
	}
	b.updated = at
}

// NewAIMD returns an AIMD configured by c, or an error naming every field
// that is out of range.
func NewAIMD(c AIMDConfig) (*AIMD, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	return &AIMD{
		cfg:       c,
		limit:     float64(c.InitialLimit),
		slowStart: !c.PerCall,
		cv:        -1,
		need:      DefaultWindowMinSamples,
	}, nil
}

// Config returns the configuration of a, with defaults filled in.
func (a *AIMD) Config() AIMDConfig { return a.cfg }

// Limit implements Algorithm.
func (a *AIMD) Limit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limitLocked()
}

func (a *AIMD) limitLocked() int {
	if a.base.probing {
		return a.probeLimitLocked()
	}
	return int(a.limit)
}

// probeLimitLocked is the in-flight count up to which calls measure the
// no-load RTT. At MinLimit it is the limit itself: the limit can go no
// lower, so what calls meet there is the baseline by definition.
func (a *AIMD) probeLimitLocked() int {
	return max(a.cfg.MinLimit, int(probeFraction*a.limit))
}

func (a *AIMD) adaptive() bool { return a.cfg.Timeout == 0 }

// samplesNeeded returns how many samples make a round trip's mean RTT
// trustworthy when RTTs vary with coefficient cv (negative if unknown):
// windowSigmas standard errors within the tolerance.
func samplesNeeded(cv float64) int {
	if cv < 0 {
		return DefaultWindowMinSamples
	}
	n := math.Ceil(math.Pow(windowSigmas*cv/(adaptiveTolerance-1), 2))
	return int(min(max(n, DefaultWindowMinSamples), maxWindowSamples))
}

// observeCVLocked folds a closing round trip's RTT variability into the
// running estimate and resizes the round trips to come.
func (a *AIMD) observeCVLocked(cv float64) {
	if cv < 0 {
		return
	}
	if a.cv < 0 {
		a.cv = cv
	} else {
		a.cv += cvWeight * (cv - a.cv)
	}
	a.need = samplesNeeded(a.cv)
}

// Update implements Algorithm.
func (a *AIMD) Update(s Sample) int {
	if s.Outcome == Ignored {
		return a.Limit()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.RTT < 0 {
		// An untimed call (a stream) carries only its outcome: apply the
		// per-call rule, keeping it out of the RTT windows and baseline.
		if s.Outcome == Dropped {
			a.limit = max(a.limit*a.cfg.BackoffRatio, float64(a.cfg.MinLimit))
		} else if a.loaded(s) {
			a.grow()
		}
		return a.limitLocked()
	}
	if !a.adaptive() && s.Outcome == Success && s.RTT > a.cfg.Timeout {
		s.Outcome = Dropped
	}
	if a.base.probing || a.base.collecting {
		a.probeLocked(s)
	}
	switch {
	case a.cfg.PerCall:
		a.ruleLocked(s)
	case a.slowStart && s.Outcome == Success:
		// Slow start ends at the first late call, as in TCP's HyStart,
		// rather than a round trip later when the window closes.
		if a.lateLocked(s) {
			a.slowStart = false
		} else if a.loaded(s) {
			a.grow()
		}
	}
	if a.win.add(s, a.need) {
		a.observeCVLocked(a.win.cv())
		// Only a round trip that met no queue of ours, and that is big
		// enough for the variability just measured, may move the baseline.
		light := a.win.maxIn <= a.probeLimitLocked() && a.win.nOK >= a.need
		agg := a.win.close(s.At)
		if !a.cfg.PerCall {
			a.ruleLocked(agg)
		}
		if a.adaptive() && light && agg.Outcome == Success && agg.RTT > 0 && !a.base.probing && !a.base.collecting {
			a.base.update(agg.RTT, agg.At)
		}
		a.maybeProbeLocked(s.At)
	}
	return a.limitLocked()
}

// ruleLocked applies the AIMD rule to one sample: a call, or a round trip.
func (a *AIMD) ruleLocked(s Sample) {
	if s.Outcome == Dropped || a.lateLocked(s) {
		a.limit = max(a.limit*a.cfg.BackoffRatio, float64(a.cfg.MinLimit))
		a.slowStart = false
		a.calm = 0
		return
	}
	a.calm++
	if a.slowStart || !a.loaded(s) {
		return
	}
	// A loaded round trip that met no queue shows spare capacity, e.g.
	// the downstream just doubled: grow by an eighth rather than by one,
	// so a large limit catches up in a few round trips. The step is small
	// enough that the queue it may cause shows in the next round trip.
	if a.adaptive() && !a.cfg.PerCall && a.base.rtt > 0 &&
		float64(s.RTT) <= spareTolerance*float64(a.base.rtt) {
		a.limit = min(a.limit+max(1, a.limit/8), float64(a.cfg.MaxLimit))
		return
	}
	a.grow()
}

func (a *AIMD) loaded(s Sample) bool { return float64(s.Inflight*2) >= a.limit }

func (a *AIMD) grow() { a.limit = min(a.limit+1, float64(a.cfg.MaxLimit)) }

// lateLocked reports whether a successful sample's RTT is above the
// adaptive threshold. (An explicit Timeout was applied on arrival.)
func (a *AIMD) lateLocked(s Sample) bool {
	if !a.adaptive() || s.Outcome != Success || a.base.rtt == 0 {
		return false
	}
	return float64(s.RTT) > adaptiveTolerance*float64(a.base.rtt)
}

// maybeProbeLocked starts a probe when the baseline is stale and the limit
// has been steady.
func (a *AIMD) maybeProbeLocked(now time.Time) {
	b := &a.base
	if !a.adaptive() || b.probing || b.collecting || a.calm < probeCalm {
		return
	}
	if b.rtt != 0 && now.Sub(b.updated) < probeInterval {
		return
	}
	*b = baseline{rtt: b.rtt, updated: b.updated, probing: true, probeFrom: now}
}

// probeCollectFactor × the baseline is how long a probe keeps collecting
// its calls after admission ends.
const probeCollectFactor = 4

// probeLocked collects the calls admitted under the probe limit.
func (a *AIMD) probeLocked(s Sample) {
	b := &a.base
	start := s.At.Add(-s.RTT)
	if s.Outcome == Success && !start.Before(b.probeFrom) && (b.probing || start.Before(b.probeTo)) {
		b.probeN++
		b.probeSum += s.RTT
	}
	switch {
	case b.probing && b.probeN >= a.need:
		// Enough admitted: restore the limit, keep collecting.
		b.probing, b.collecting = false, true
		b.probeTo = s.At
		wait := b.rtt
		if wait == 0 {
			wait = b.probeSum / time.Duration(b.probeN)
		}
		b.collectUntil = s.At.Add(probeCollectFactor * wait)
		a.win = window{open: s.At}
	case b.collecting && !s.At.Before(b.collectUntil):
		b.collecting = false
		b.update(b.probeSum/time.Duration(b.probeN), s.At)
	}
}

func (a *AIMD) String() string {
	return fmt.Sprintf("AIMD(limit=%d)", a.Limit())
}
