package limiter

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
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
	// [0.5, 1). Default 0.9. A late round trip, with the adaptive
	// threshold, backs off by less when it is only a little late, and by
	// half as much once the baseline is confirmed (see AIMD).
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
	// firstProbeTrips is how many round trips that fill the limit a
	// limiter measures before it probes the first time: a limiter that
	// starts under overload measures them with a queue, which the probe
	// drains. Waiting longer keeps that queue for longer: at S = 100 ms,
	// eight round trips and half a second cost 3 % of the first 5 s.
	firstProbeTrips = 3
	// firstProbeFraction of the limit is how far the first probe lowers
	// it: far enough below the downstream's capacity to drain the queue
	// of a limiter that started far above it. Only a limiter whose warm-up
	// filled the limit can have measured such a queue; one that started
	// under less load probes its first time like any other, at two
	// thirds: a deep probe there only turns calls away (at exactly full
	// load and S = 100 ms it held the limit at a quarter for 3.5 RTTs).
	firstProbeFraction = 0.25
	// collapseFalls late round trips in a row mean the downstream itself
	// became slower, rather than a limit oscillating around its capacity:
	// the limit has lost 40 % (0.9⁵).
	collapseFalls = 5
	// probeInterval is how long the baseline may go without a no-load
	// measurement before a probe takes one.
	probeInterval = 5 * time.Second
	// probeCalm is how many round trips without a drop must precede a
	// probe, so that no probe measures a limit still coming down.
	probeCalm = 3
	// slowStartFill of the limit is how many calls in flight a success
	// must have found for slow start to grow the limit by one: as TCP grows
	// only a window that holds it back, slow start grows only a limit the
	// calls nearly fill. It took the limit to twice the calls in flight
	// when it grew whenever they held half of it (loaded): at exactly full
	// load and S = 100 ms that was 50 for C = 16, whose bursts then queued
	// up to 2.6·S until the first probe, 2.5 s later, since the limit was
	// too high to fill and probe. With 70 %, over real gRPC (medians of 3,
	// A/B in one session) p99 at 1× and S = 100 ms went from 2.01·S to
	// 1.69·S with processor sharing (goodput 96.2 → 95.0 %), the worst FIFO
	// run from 91.1 % at 2.49·S to 95.1 % at 2.24·S, and at S = 20 ms both
	// backends moved by ≤ 0.2 points at a p99 0.08–0.10·S lower.
	slowStartFill = 0.7
	// fullFraction of the limit is the most calls in flight at which a
	// round trip counts as having filled the limit: a limit that grew
	// during the round trip is not reached by the calls it admitted.
	fullFraction = 0.85
	// smoothWeight is the weight of a round trip's mean RTT in the moving
	// average whose minimum is the baseline.
	smoothWeight = 1.0 / 8
	// smoothWarmup is how many round trips the average needs before its
	// minimum is trusted.
	smoothWarmup = 8
	// cvWeight is the weight of a round trip's RTT variability in the
	// running estimate that sizes the next round trips.
	cvWeight = 0.1
	// adaptiveGain is the share of a whole move that the limit makes in
	// a round trip once the first probe has confirmed the baseline: it
	// grows by adaptiveGain rather than one, and a late round trip takes
	// off adaptiveGain of its step (a quarter of the way to the threshold,
	// 2.5 % at most with the default BackoffRatio). At exactly full load
	// Poisson bursts make round trips late that no lower limit would have
	// helped, and a whole step after each swung the limit with a standard
	// deviation of 3.8 (23 to 35 from the 5th to the 95th percentile,
	// processor sharing, C = 16), half steps with one of 2.9 (25 to 35):
	// the limit stays closer to the level a fixed limit would hold.
	// Quarter steps kept processor sharing at 1× over real gRPC at
	// 94.2 % of ideal instead of 93.6 % (p99 1.86·S, 1.81·S; medians of
	// 3, A/B in one session), at a p99 under noisy 2× load 0.1–0.2·S
	// higher. Until that probe the limit is still finding its level,
	// coming down from slow start's overshoot, and takes whole steps:
	// half steps there kept the queue for twice as many round trips (at
	// S = 100 ms, p99 over the first 5 s of a cold start at exactly full
	// load went from 1.9·S to 2.1–2.2·S). Drops always take the whole
	// step, and so does a round trip late by farLate × the threshold or
	// more.
	adaptiveGain = 0.25
	// farLate × the adaptive threshold is a round trip so late that no
	// burst explains it: the downstream lost capacity or slowed down, and
	// the limit must come down fast. With half steps there too, halving
	// the capacity at 1.5× load raised p99 over the 10 s after the drop
	// from 2.08·S to 2.69·S over real gRPC (FIFO, medians of 3); Poisson
	// bursts at exactly full load stay below it (round trips at 1.05–1.45
	// × the threshold).
	farLate = 1.5
	// spareTolerance: a loaded round trip whose mean RTT is within this
	// factor of the baseline met no queue, and grows the limit faster.
	spareTolerance = 1.1
	// windowSigmas is how many standard errors of a round trip's mean
	// must fit inside the tolerance: 3 keeps false alarms near 0.1%.
	windowSigmas = 3
	// minTripSamples is the fewest samples a round trip needs to close.
	minTripSamples = 10
	// maxWindowSamples caps the samples a round trip needs when the RTT
	// is very noisy.
	maxWindowSamples = 256
	// sampledBelow is the mean RTT under which a Limiter times only a
	// sample of the calls (see AIMD.timeEvery): timing a call takes two
	// clock reads, 25–50 ns each on a virtual machine, which for calls this
	// short is a large share of their cost, while a random sample of them
	// tells the mean and the variability as well. A gRPC call is never
	// this short, and the interceptors time every call anyway.
	sampledBelow = time.Microsecond
	// maxTimeEvery is the most calls one timed call stands for.
	maxTimeEvery = 64
	// slowSample is an RTT that ends the sampling at once: a call this
	// slow among calls short enough to be sampled means they changed.
	slowSample = 4 * sampledBelow
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

// Validate reports every invalid field of c, after defaults are applied.
func (c AIMDConfig) Validate() error {
	c = c.withDefaults()
	errs := []error{checkLimits("AIMDConfig", c.InitialLimit, c.MinLimit, c.MaxLimit)}
	if !(c.BackoffRatio >= 0.5 && c.BackoffRatio < 1) {
		errs = append(errs, &FieldError{"AIMDConfig.BackoffRatio", c.BackoffRatio, "in [0.5, 1)"})
	}
	if c.Timeout < 0 {
		errs = append(errs, &FieldError{"AIMDConfig.Timeout", c.Timeout, "> 0, or 0 for the adaptive threshold"})
	}
	return errors.Join(errs...)
}

// AIMD is a loss-based Algorithm: additive increase, multiplicative
// decrease, the scheme of TCP Reno, applied once per round trip (unless
// PerCall) so that it never acts twice on the same congestion:
//
//   - a round trip whose calls were all dropped multiplies the limit by
//     BackoffRatio (not below MinLimit);
//   - one that is late (its successes are, whatever its drops) backs off
//     to the limit at which it would have been on time, by BackoffRatio
//     at most, and once a probe has confirmed the baseline only a quarter
//     of the way there, by a quarter of that step at most, unless it is
//     far late, so that the limit settles just above the downstream's
//     capacity instead of swinging around it;
//   - one with some drops and on time backs off in proportion to their
//     share and still grows, so a trickle of refusals that are not
//     overload (per-caller quotas) costs little;
//   - a loaded round trip grows the limit by one (by a quarter once a
//     probe has confirmed the baseline), by an eighth when it filled the
//     limit and met no queue; an idle limiter does not grow.
//
// With Timeout zero (the default) a round trip is late when its mean RTT
// exceeds 1.3 × the baseline, the minimum of a moving average of round
// trips' means, refreshed by brief probes at a lower limit while the limit
// is full. A probe that reads more than three standard errors of its mean
// below the baseline (by its own calls' spread, when RTTs are quiet)
// replaces it: the baseline had taken a queue for the RTT. Untimed samples
// (Token.ReleaseUntimed) apply the rule call by call. docs/design.md gives
// the model, the reasoning and the measurements.
type AIMD struct {
	cfg AIMDConfig

	// The hot path reads these without the lock.
	current atomic.Int64 // Limit(): the limit, or the probe's while probing
	careful atomic.Bool  // every sample takes the lock: slow start, probe, PerCall
	need    atomic.Int64 // samples a round trip needs, derived from cv
	every   atomic.Int64 // timeEvery
	win     window

	mu        sync.Mutex // serializes changes of the fields below
	limit     float64
	slowStart bool
	calm      int           // round trips since the last backoff
	falls     int           // late round trips in a row
	probes    int           // probes taken
	fullTrips int           // round trips in a row that filled the limit, until the first probe
	verify    bool          // a probe's reading needs checking: the next one goes deep
	lowSeen   bool          // a noisy probe read far below the baseline: the next one confirms it or not
	cv        float64       // running coefficient of variation of RTT; -1 unknown
	mean      time.Duration // the last round trip's mean RTT; 0 until one
	base      baseline
}

// baseline is the no-load RTT estimate behind the adaptive threshold.
type baseline struct {
	rtt     time.Duration // 0 until the first measurement
	updated time.Time
	// smooth is a moving average of round trips' mean RTTs: the minimum
	// is taken of it, not of single round trips, whose noise would bias
	// a minimum low.
	smooth time.Duration
	offers int // round trips the average has seen, up to smoothWarmup
	// queued: a round trip that filled the limit fed the average during
	// the warm-up, so the baseline may hold a queue of the limit's making.
	queued bool

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
	probeSq      uint64 // sum of the squared RTTs, in microseconds² (see squaredMicros)
	steady       bool   // the limit was not collapsing when the probe started
	deep         bool   // the probe lowers the limit to firstProbeFraction
	scaled       bool   // the limit was scaled to the probe's RTT already
}

// probeCV is the coefficient of variation of the probe's calls collected
// so far, or -1 before there are two.
func (b *baseline) probeCV() float64 {
	return trip{n: b.probeN, sumRTT: b.probeSum, sumSq: b.probeSq}.cv()
}

// offer shows the baseline a round trip's mean RTT. The baseline is the
// lowest mean seen: a round trip that met a queue is slower, so queueing
// can never raise it. A mean within spareTolerance of the baseline confirms
// it (the no-load RTT is still what it was); one lower replaces it. Only a
// probe, once the baseline has gone unconfirmed for probeInterval, can
// raise it.
func (b *baseline) offer(rtt time.Duration, at time.Time) {
	if b.smooth == 0 {
		b.smooth = rtt
	} else {
		b.smooth += time.Duration(smoothWeight * float64(rtt-b.smooth))
	}
	rtt = b.smooth
	if b.offers < smoothWarmup {
		// The first round trips of a limiter are the shortest calls of
		// the first burst: until the average holds several, it is the
		// baseline, up or down. A limiter that starts under overload
		// measures them with a queue; the first probe drains it.
		b.offers++
		b.rtt, b.updated = rtt, at
		return
	}
	switch {
	case rtt < b.rtt:
		b.rtt, b.updated = rtt, at
	case float64(rtt) <= spareTolerance*float64(b.rtt):
		b.updated = at
	}
}

// NewAIMD returns an AIMD configured by c, or an error naming every field
// that is out of range.
func NewAIMD(c AIMDConfig) (*AIMD, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	a := &AIMD{
		cfg:       c,
		limit:     float64(c.InitialLimit),
		slowStart: !c.PerCall,
		cv:        -1,
	}
	a.need.Store(minTripSamples)
	a.publishLocked()
	return a, nil
}

// publishLocked makes the state the hot path reads match the state under
// the lock.
func (a *AIMD) publishLocked() {
	a.current.Store(int64(a.limitLocked()))
	careful := a.cfg.PerCall || a.slowStart || a.base.probing || a.base.collecting
	a.careful.Store(careful)
	every := 1
	if !careful && a.adaptive() && a.mean > 0 && a.mean < sampledBelow {
		every = min(maxTimeEvery, int(sampledBelow/a.mean))
	}
	a.every.Store(int64(every))
}

// timeEvery is how many calls a Limiter may time one of (chosen at
// random) instead of timing each: 1 unless round trips' mean RTT is under
// sampledBelow, and always 1 during slow start and probes, which judge
// calls one by one, and with PerCall or an explicit Timeout, which do too.
// A timed success then stands for timeEvery calls; every drop is counted,
// timed or not (updateUntimed).
func (a *AIMD) timeEvery() int { return int(a.every.Load()) }

// updateWeighted is Update for a timed call that, if a success, stands
// for weight calls (see timeEvery).
func (a *AIMD) updateWeighted(s Sample, weight int) int { return a.update(s, weight) }

// updateUntimed records a call that the Limiter did not time because
// another call stands for it (see timeEvery): a drop counts in its round
// trip, as every drop does; a success only adds its in-flight count.
func (a *AIMD) updateUntimed(o Outcome, inflight int) int {
	if o != Ignored {
		a.win.addUntimed(o, inflight)
	}
	return a.Limit()
}

// Limit implements Algorithm.
func (a *AIMD) Limit() int { return int(a.current.Load()) }

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
	f := probeFraction
	if a.base.deep {
		f = firstProbeFraction
	}
	return max(a.cfg.MinLimit, int(f*a.limit))
}

func (a *AIMD) adaptive() bool { return a.cfg.Timeout == 0 }

// samplesNeeded returns how many samples make a round trip's mean RTT
// trustworthy when RTTs vary with coefficient cv (negative if unknown):
// windowSigmas standard errors within the tolerance.
func samplesNeeded(cv float64) int {
	if cv < 0 {
		return minTripSamples
	}
	n := math.Ceil(math.Pow(windowSigmas*cv/(adaptiveTolerance-1), 2))
	return int(min(max(n, minTripSamples), maxWindowSamples))
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
	a.need.Store(int64(samplesNeeded(a.cv)))
}

// Update implements Algorithm. Outside slow start and probes, a sample
// takes no lock: it is added to the round trip with atomic operations, and
// only the sample that completes a round trip takes the lock to close it.
func (a *AIMD) Update(s Sample) int { return a.update(s, 1) }

func (a *AIMD) update(s Sample, weight int) int {
	if s.Outcome == Ignored {
		return a.Limit()
	}
	if !a.adaptive() && s.Outcome == Success && s.RTT > a.cfg.Timeout {
		s.Outcome = Dropped
	}
	if s.RTT >= slowSample && a.every.Load() > 1 {
		// The calls became slow: time every one from now on, rather
		// than after a round trip of timed calls, which at a
		// timeEvery of 64 would take 64 times as many calls.
		a.every.Store(1)
	}
	if s.RTT >= 0 && !a.careful.Load() {
		if a.win.add(s, int(a.need.Load()), weight) {
			a.mu.Lock()
			if a.win.complete(int(a.need.Load())) { // not closed meanwhile
				a.closeLocked(s.At)
				a.publishLocked()
			}
			a.mu.Unlock()
		}
		return a.Limit()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	defer a.publishLocked()
	if s.RTT < 0 {
		a.untimedLocked(s)
		return a.limitLocked()
	}
	if a.base.probing || a.base.collecting {
		a.probeLocked(s)
	}
	switch {
	case a.cfg.PerCall:
		a.ruleLocked(s, 1)
	case a.slowStart && s.Outcome == Success:
		// Slow start ends at the first late call, as in TCP's HyStart,
		// rather than a round trip later when the window closes.
		if a.lateRTTLocked(s.RTT) {
			a.slowStart = false
		} else if a.fillsForSlowStart(s) {
			a.growBy(1)
		}
	}
	if a.win.add(s, int(a.need.Load()), weight) {
		a.closeLocked(s.At)
	}
	return a.limitLocked()
}

// closeLocked closes the round trip and applies the rule to it.
func (a *AIMD) closeLocked(at time.Time) {
	rt := a.win.close(at)
	a.observeCVLocked(rt.cv())
	if a.slowStart && a.blindLocked() {
		a.slowStart = false
	}
	agg := rt.sample()
	if agg.RTT > 0 {
		a.mean = agg.RTT
	}
	if !a.cfg.PerCall {
		a.ruleLocked(agg, rt.dropShare())
	}
	// A round trip with enough successes for the variability just
	// measured may lower the baseline (see baseline.offer).
	if a.adaptive() && rt.successes() >= int(a.need.Load()) && agg.RTT > 0 && !a.base.probing && !a.base.collecting {
		if a.base.offers < smoothWarmup && float64(agg.Inflight) >= fullFraction*a.limit {
			a.base.queued = true
		}
		a.base.offer(agg.RTT, agg.At)
	}
	a.maybeProbeLocked(at, float64(agg.Inflight) >= fullFraction*a.limit)
}

// blindLocked reports whether slow start has no way to end in time: no
// baseline yet, and RTTs so noisy that the round trip which would set one
// needs more samples than the limit. Slow start adds one per success, so
// before that round trip closed it would more than double the limit with
// nothing to judge the growth by. With exponential service times the first
// round trip needs about a hundred samples: from 20 the limit reached 109
// against a capacity of 16, the baseline was measured with that queue, and
// the limit stayed near 3 C.
func (a *AIMD) blindLocked() bool {
	return a.adaptive() && a.base.rtt == 0 && float64(a.need.Load()) > a.limit
}

// untimedLocked applies a sample without an RTT (a stream, or a permit a
// client held through a pushback) call by call: a drop backs off and ends
// slow start, exactly like a timed one; a loaded success grows the limit by
// a round trip's step divided by the limit, one step per limit's worth of
// successes, which is what a round trip of them would add, or by one
// during slow start.
func (a *AIMD) untimedLocked(s Sample) {
	if s.Outcome == Dropped {
		a.backoffLocked(a.cfg.BackoffRatio)
		return
	}
	if a.slowStart {
		if a.fillsForSlowStart(s) {
			a.growBy(1)
		}
		return
	}
	if a.loaded(s) {
		a.growBy(a.gainLocked() / a.limit)
	}
}

// ruleLocked applies the AIMD rule to one sample: a call, or a round trip
// of which share was dropped. A round trip of drops only, or a dropped or
// late call, backs off by BackoffRatio; a late round trip by
// lateRatioLocked. A round trip
// with some drops backs off in proportion to their share, as DCTCP does
// with marked packets, and still grows by a step like any other round
// trip, so that a trickle of refusals that are not overload costs little:
// the limit settles where the two balance, limit × share ×
// (1 − BackoffRatio) = step, far above any load that a trickle leaves.
func (a *AIMD) ruleLocked(s Sample, share float64) {
	// A round trip's RTT is the mean of its successes: with a share of
	// them dropped, the rest can still be late, as when a queue makes some
	// calls overrun their deadline and the others finish slowly.
	if (s.Outcome == Success || share < 1) && a.lateRTTLocked(s.RTT) {
		a.falls++
	} else {
		a.falls = 0
	}
	if s.Outcome == Dropped && (share >= 1 || a.cfg.PerCall) {
		a.backoffLocked(a.cfg.BackoffRatio)
		return
	}
	if a.falls > 0 {
		a.backoffLocked(a.lateRatioLocked(s.RTT))
		return
	}
	if s.Outcome == Dropped {
		a.backoffLocked(1 - share*(1-a.cfg.BackoffRatio))
	} else {
		a.calm++
	}
	if a.slowStart || !a.loaded(s) {
		return
	}
	// A round trip that filled the limit and met no queue shows spare
	// capacity, e.g. the downstream just doubled: grow by an eighth rather
	// than by one, so a large limit catches up in a few round trips. The
	// step is small enough that the queue it may cause shows in the next
	// round trip.
	if a.adaptive() && !a.cfg.PerCall && s.Outcome == Success && a.base.rtt > 0 &&
		float64(s.Inflight) >= fullFraction*a.limit && float64(s.RTT) <= spareTolerance*float64(a.base.rtt) {
		a.growBy(max(1, a.limit/8))
		return
	}
	a.growBy(a.gainLocked())
}

// lateRatioLocked is how much a round trip late by rtt backs off: to the
// limit whose RTT would have been on time, but never more than
// BackoffRatio. With RTTs that grow with the calls in flight (a queue, or
// a processor shared among them), a round trip just past the threshold
// had about threshold / rtt too many; backing off by a full 10 % took the
// limit below the downstream's capacity at every turn of the sawtooth,
// and calls arriving in bursts found workers idle (processor sharing at
// 5×: fewer calls in flight than workers 1–2.6 % of the time, 0.2–0.7 %
// since). A far-late round trip, a downstream that became slower, still
// backs off by BackoffRatio at once. (PerCall keeps BackoffRatio: one
// call's RTT says too little about how many were too many.)
func (a *AIMD) lateRatioLocked(rtt time.Duration) float64 {
	if a.cfg.PerCall {
		return a.cfg.BackoffRatio
	}
	threshold := adaptiveTolerance * float64(a.base.rtt)
	full := max(a.cfg.BackoffRatio, threshold/float64(rtt))
	if float64(rtt) >= farLate*threshold {
		return full
	}
	return 1 - a.gainLocked()*(1-full)
}

// gainLocked is the share of a whole step that the limit moves by, and
// what a round trip that grows it adds: adaptiveGain once the first probe
// is over and has confirmed the baseline, else one (the classic rule,
// which PerCall and an explicit Timeout keep).
func (a *AIMD) gainLocked() float64 {
	firstProbeOver := a.probes > 1 || (a.probes == 1 && !a.base.probing && !a.base.collecting)
	if a.adaptive() && !a.cfg.PerCall && firstProbeOver {
		return adaptiveGain
	}
	return 1
}

func (a *AIMD) backoffLocked(ratio float64) {
	a.limit = max(a.limit*ratio, float64(a.cfg.MinLimit))
	a.slowStart = false
	a.calm = 0
}

func (a *AIMD) loaded(s Sample) bool { return float64(s.Inflight*2) >= a.limit }

// fillsForSlowStart reports whether s found the limit full enough for slow
// start to grow it (see slowStartFill). It is judged against the limit
// now, which during slow start has grown since s was granted: the rule
// errs toward not growing.
func (a *AIMD) fillsForSlowStart(s Sample) bool {
	return float64(s.Inflight) >= slowStartFill*a.limit
}

func (a *AIMD) growBy(n float64) { a.limit = min(a.limit+n, float64(a.cfg.MaxLimit)) }

// lateRTTLocked reports whether the RTT of successful calls is above the
// adaptive threshold. (An explicit Timeout was applied on arrival.)
func (a *AIMD) lateRTTLocked(rtt time.Duration) bool {
	if !a.adaptive() || a.base.rtt == 0 {
		return false
	}
	return float64(rtt) > adaptiveTolerance*float64(a.base.rtt)
}

// maybeProbeLocked starts a probe when the baseline has not been confirmed
// for probeInterval and the limit has been steady, or for twice as long
// whatever the limit does: a downstream that became slower for good keeps
// every round trip late, so the limit is never steady, and only a probe
// can learn its new RTT.
func (a *AIMD) maybeProbeLocked(now time.Time, full bool) {
	b := &a.base
	if !a.adaptive() || b.probing || b.collecting {
		return
	}
	if !full {
		// A round trip that left the limit unfilled met no queue of the
		// limit's making: lowering the limit would only turn calls away.
		a.fullTrips = 0
		return
	}
	if a.probes == 0 {
		if a.fullTrips++; a.fullTrips < firstProbeTrips {
			return
		}
	} else {
		age := now.Sub(b.updated)
		if b.rtt != 0 && (age < probeInterval || (a.calm < probeCalm && age < 2*probeInterval)) {
			return
		}
	}
	a.probes++
	*b = baseline{rtt: b.rtt, updated: b.updated, smooth: b.smooth, offers: b.offers, queued: b.queued,
		probing: true, probeFrom: now, steady: a.falls < collapseFalls || a.probes == 1,
		deep: (a.probes == 1 && (b.queued || b.rtt == 0)) || a.verify}
}

// probeSamplesLocked is how many calls admitted under the probe limit a
// probe measures: a round trip's worth, but no more than the probe limit
// admits at once, so that a probe lasts about one RTT however long the
// RTT. Fewer samples make a noisier mean, which the noise test weighs.
func (a *AIMD) probeSamplesLocked() int {
	return min(int(a.need.Load()), max(a.probeLimitLocked(), minProbeSamples))
}

// minProbeSamples is the fewest calls a probe measures.
const minProbeSamples = 4

// drainedLocked reports whether a probe's mean m is lower than the
// baseline by more than its own noise (windowSigmas standard errors of
// its mean): the baseline had taken a queue for the RTT.
//
// The noise is the round trips' variability, or the probe's own calls'
// when both are quiet (quietCV). Round trips that meet a queue vary with
// it, calls waiting for different times, so with a steady downstream they
// overstate the noise of the probe, which drained the queue: judged by
// them, a probe 13 % below a baseline set by a queue at a cold start was
// taken for noise, and the limit stayed at 1.5·C. With noisy RTTs the
// probe's own spread of a few calls is itself too noisy to trust (a
// handful of exponential draws can happen to lie close together), so it
// only decides when the round trips agree the RTT is quiet.
func (a *AIMD) drainedLocked(m time.Duration) bool {
	if a.cv < 0 {
		return false
	}
	cv := a.cv
	if own := a.base.probeCV(); a.cv <= quietCV && own >= 0 {
		cv = min(cv, own)
	}
	noise := windowSigmas * cv / math.Sqrt(float64(a.base.probeN))
	return float64(m) < (1-noise)*float64(a.base.rtt)
}

// scaleLimitLocked lowers the limit in proportion when a probe finds the
// true RTT m below a baseline that included a queue. The limit sat at that
// baseline, so it included the queue too: by Little's law, the same
// throughput at the true RTT needs proportionally fewer calls in flight.
func (a *AIMD) scaleLimitLocked(m time.Duration) {
	a.limit = max(float64(a.cfg.MinLimit), a.limit*max(float64(m)/float64(a.base.rtt), 0.75))
}

// quietCV is the most RTT variability (coefficient of variation) at which
// a few calls tell the RTT: a probe's first returns may show a drained
// queue (see probeLocked), and its mean needs no caution (see
// cautiousLocked). At 0.9, the first 19 of a probe's calls to return
// averaged a third of the service time.
const quietCV = 0.3

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
		b.probeSq += squaredMicros(s.RTT)
	}
	switch {
	case b.probing && b.probeN >= a.probeSamplesLocked():
		// Enough admitted: restore the limit, keep collecting.
		b.probing, b.collecting = false, true
		b.probeTo = s.At
		wait := b.rtt
		if wait == 0 {
			wait = b.probeSum / time.Duration(b.probeN)
		}
		b.collectUntil = s.At.Add(probeCollectFactor * wait)
		a.win.reset(s.At)
		// A probe that already reads far below the baseline drained a
		// queue: scale the limit now rather than restore it to a value
		// that rebuilds the queue while the probe's slow calls return.
		// The baseline follows at once, tentatively: the round trips
		// until the probe ends must not count as spare against it. The
		// calls back so far are the ones that returned first, so with
		// noisy RTTs they are the short ones: only quiet RTTs are judged
		// this early, the others when the probe's calls are all in.
		if m := b.probeSum / time.Duration(b.probeN); a.probes == 1 && a.cv >= 0 && a.cv <= quietCV && a.drainedLocked(m) {
			a.scaleLimitLocked(m)
			b.rtt, b.scaled = m, true
		}
	case b.collecting && !s.At.Before(b.collectUntil):
		b.collecting = false
		m := b.probeSum / time.Duration(b.probeN)
		// The old minimum has expired. A measurement within
		// spareTolerance of it replaces it, up or down. One above that
		// while the limit is steady met a queue (the limit is above the
		// downstream's capacity by more than the probe lowered it): it
		// only confirms the old baseline, which must not creep up. While
		// the limit keeps falling, every round trip is late: the
		// downstream itself has slowed, and the probe, at the lowest
		// in-flight count of the recent past, measures its new RTT.
		// (A measurement below it is one noisy round trip; round trips
		// lower the minimum by themselves, through the average.)
		// A probe lower than the baseline by more than its own noise
		// (windowSigmas standard errors of its mean) drained a queue the
		// baseline had taken for the RTT, as when a limiter starts under
		// overload: it replaces the baseline.
		adopt := true
		// A deep probe answers the question a probe before it asked.
		confirming := b.deep && a.lowSeen
		if b.deep {
			a.verify, a.lowSeen = false, false
		}
		switch {
		case b.scaled:
			// Drained already; the calls collected since settle the RTT.
		case b.rtt == 0:
			// No round trip has had the samples to set a baseline yet
			// (noisy RTTs end slow start before one does, see
			// blindLocked): the probe is the first measurement.
			m = a.cautiousLocked(m)
		case a.drainedLocked(m):
			if a.probes > 1 && a.noisyProbeLocked() && !confirming {
				// With noisy RTTs a few dozen calls can average far
				// below the service time by chance, and a baseline that
				// follows them makes every round trip late: one such
				// probe of a run at 2× with exponential service times
				// read 0.37·S, and the limit fell from 29 to 3 for ten
				// seconds. After the first probe (which drains a cold
				// start's queue, and is scaled and bounded for it) the
				// reading waits for the next probe, deep, to read low
				// too.
				adopt = false
				a.verify, a.lowSeen = true, true
				break
			}
			m = a.cautiousLocked(m)
			if a.probes == 1 {
				a.scaleLimitLocked(m)
			}
		case !b.steady:
			m = a.cautiousLocked(m)
		case m > b.rtt && float64(m) <= spareTolerance*float64(b.rtt):
			if !b.deep {
				// A shallow probe of a limit well above the downstream's
				// capacity (at exactly full load it sits near 1.8 C) is
				// itself above it and reads a little queue: adopted, it
				// raised the baseline by 8 % a probe. The next probe
				// goes deep to tell a queue from a slower downstream.
				adopt = false
				a.verify = true
			}
		default:
			adopt = false
		}
		if adopt {
			b.rtt, b.smooth = m, m
		}
		// The probe ends the warm-up, adopted or not: the warm-up's round
		// trips, at a limit full enough to probe, carry a queue, and would
		// move the baseline up with it.
		b.offers = max(b.offers, smoothWarmup)
		b.updated = s.At
	}
}

// noisyProbeLocked reports whether the probe's own RTTs or the round
// trips' vary by more than quietCV.
func (a *AIMD) noisyProbeLocked() bool {
	return a.base.probeCV() > quietCV || a.cv > quietCV
}

// cautiousLocked returns a probe's mean m raised by cautionSigmas standard
// errors of it when the probe's own RTTs are noisy. (Not the running
// estimate of AIMD: at a cold start that one measures round trips that met
// a queue, whose waits vary more than the service time of a constant
// backend and less than that of a noisy one.) Such a probe replaces the
// baseline by what a few dozen calls averaged, and the two ways to be
// wrong are not alike: a baseline too high leaves a little more queue, one
// too low makes every round trip late, and the limit falls to its floor
// until a probe 10 s later. Taken as it was, the first probe of a cold
// start with exponential service times read 0.6–0.87·S.
func (a *AIMD) cautiousLocked(m time.Duration) time.Duration {
	b := &a.base
	cv := b.probeCV()
	if cv <= quietCV {
		return m
	}
	return time.Duration(float64(m) * (1 + cautionSigmas*cv/math.Sqrt(float64(b.probeN))))
}

// cautionSigmas is how many standard errors cautiousLocked adds.
const cautionSigmas = 2

func (a *AIMD) String() string {
	return fmt.Sprintf("AIMD(limit=%d)", a.Limit())
}
