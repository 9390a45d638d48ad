package limiter

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// phase is where a little controller is in its cycle.
type phase int

const (
	// starting admits every call until the first returns: a fresh process
	// knows nothing of the downstream, and a limit it guessed would refuse
	// a healthy one's traffic. The calls then in flight become the limit,
	// and the start goes on as a probe.
	starting phase = iota
	// probing holds the limit below the downstream's capacity so that the
	// calls granted now meet no queue: their mean RTT is the no-load RTT.
	probing
	// collecting stops counting the calls granted and waits, the limit
	// still lowered, for the probe's slow calls: the probe's mean must
	// not be that of its first returns, and with processor sharing calls
	// admitted meanwhile would slow the ones still running.
	collecting
	// steady applies the rule once per round trip.
	steady
)

// Tuning of the little controller, one place.
const (
	minTolerance  = 0.3              // a round trip may be this much slower than b before it is late
	lateSigmas    = 3                // standard errors of a round trip's mean inside the tolerance
	downGain      = 0.5              // share of the way down to the target a late round trip moves the limit
	fullShare     = 0.9              // calls in flight, of the limit, at which a round trip filled it
	probeDepth    = 0.9              // probe limit, of the calls the downstream carries without queue
	probeEvery    = 30 * time.Second // how old b may grow while the limit is full
	probeCollect  = 2                // × the longest RTT seen: how long a probe's calls may take
	minProbeCalls = 16               // fewest calls a probe times
	maxProbeCalls = 128              // most calls a probe times, however noisy the RTTs
	probeTrips    = 8                // most round trips of its depth a probe's calls take
	spreadWeight  = 0.1              // weight of a round trip in the moving spread of RTTs

	minTripSamples   = 10  // fewest samples a round trip closes on (the classic rule's too)
	maxWindowSamples = 256 // most samples a round trip needs, however noisy the RTTs
)

// little is AIMD's adaptive rule. Per round trip of n calls, m in flight
// on average, r is their time in flight per success (a drop counts with its
// time) and b the mean RTT of a probe's nb calls:
//
//	t = max(0.3, 3·cv·√(1/n + 1/nb))  the tolerance: the calls' spread, not their shape
//	c = m·b/r                         the calls done without a queue (Little); limit/2/(1+t) if none succeeded
//	late: r > (1+t)·b
//	full (m ≥ 0.9·limit), late: the limit moves half way down to (1+t)·c, all the way if b is unconfirmed
//	full, on time: up to (1+t)·c, by one at least
//	reached (most in flight ≥ 0.9·limit), on time: the same, by max(1, min(n/limit, limit)) at least
//
// A probe holds the limit at d = 0.9·c until the calls it admitted (at
// most eight round trips' worth) are back; p is their mean RTT. A full limit
// probes when b is 30 s old or the limit has halved since the last probe,
// and when late with b unconfirmed or on too few calls. At its end ("again":
// a probe at d/2 follows):
//
//	p ≥ b/(1+t)              b averages p in (takes it if unconfirmed); stays unconfirmed, and again, if it was,
//	                         d ≥ b's depth, and not p > (1+t/3)·b at d/p two standard errors below the trip's m/r
//	p < b/(1+t), drops late  b stays, the limit at most (1+t)·d; again
//	p < b/(1+t)              b = p, the limit at most (1+t)·d; unconfirmed, and again, if p/b ≤ (1+t)·d/(b's depth)
//	nothing succeeded        again
//
// The start admits every call until the first returns, then grows as a
// slow start until its probe ends; its probe's mean is an unconfirmed b of
// unknown depth.
type little struct {
	cfg     AIMDConfig
	current atomic.Int64
	careful atomic.Bool // grants take the lock: not steady

	mu    sync.Mutex
	phase phase
	win   window
	need  int // samples a round trip needs
	limit float64
	b     time.Duration // no-load RTT; 0 until the first probe ends
	nb    float64       // calls behind b
	// unconfirmed: b may hold a queue, measured by the start or by a
	// probe whose mean fell in proportion to its depth, or agreed with
	// such a b from as deep
	unconfirmed bool
	bDepth      int       // the probe limit b was measured at; 0 for the start's
	bAt         time.Time // when b was last measured
	probes      int
	probedAt    float64 // the limit when the last probe started
	// rate is the successes per ns of the full round trip that started
	// the probe (and the probes again at half after it), measured on
	// rateN calls; 0 if unknown
	rate  float64
	rateN int
	// spread of RTTs: moving averages of round trips' mean (µs) and
	// variance (µs²), and the coefficient of variation they give.
	spreadMean, spreadVar, cv float64
	longest                   time.Duration // longest RTT of the last round trips

	// the current probe
	probeLimit int
	probeFrom  time.Time
	probeTo    time.Time // end of admission under probeLimit
	probe      trip      // its timed calls
	probeBack  int       // its calls that have returned
	grants     int       // permits granted into its cohort; 0 without a Limiter
	mostIn     int       // most calls in flight at a grant during it
}

func newLittle(c AIMDConfig, admitAll bool) *little {
	c = c.withDefaults()
	l := &little{cfg: c, limit: float64(c.InitialLimit), cv: -1}
	l.need = minTripSamples
	l.startProbeLocked(time.Time{}, c.InitialLimit)
	if admitAll {
		l.phase = starting
	}
	l.publishLocked()
	return l
}

func (l *little) Limit() int { return int(l.current.Load()) }

// granted counts a permit granted during a probe's admission into the
// probe's cohort, until the quota is filled. The calls granted after, while
// no call has yet returned to end the admission, may meet the queue the
// cohort made: they are not the probe's.
func (l *little) granted(inflight int) bool {
	if !l.careful.Load() {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mostIn = max(l.mostIn, inflight)
	if l.phase == collecting || l.phase == steady || l.grants >= l.probeCalls() {
		return false
	}
	l.grants++
	return true
}

func (l *little) publishLocked() {
	n := int(l.limit)
	switch {
	case l.phase == starting:
		n = l.cfg.MaxLimit
	case l.phase != steady && l.b != 0:
		n = l.probeLimit
	}
	l.current.Store(int64(max(n, l.cfg.MinLimit)))
	l.careful.Store(l.phase != steady)
}

func (l *little) Update(s Sample) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.phase != steady:
		l.probeLocked(s)
	case s.Outcome == Ignored:
		if s.RTT >= 0 && l.win.skip(s, l.need, l.unconfirmed) {
			l.closeLocked(s.At)
		}
	case s.RTT < 0:
		l.untimedLocked(s)
	case l.win.add(s, l.need):
		l.closeLocked(s.At)
	}
	l.publishLocked()
	return l.Limit()
}

// untimedLocked applies a call without an RTT (a stream): a drop backs
// off; a success that found the limit full adds a round trip's step
// divided among the limit's calls.
func (l *little) untimedLocked(s Sample) {
	if s.Outcome == Dropped {
		l.limit = max(l.limit*l.cfg.BackoffRatio, float64(l.cfg.MinLimit))
		return
	}
	if float64(s.Inflight) >= fullShare*l.limit {
		l.grow(1 / l.limit)
	}
}

func (l *little) grow(n float64) {
	l.limit += n
	l.clampLocked()
}

// clampLocked keeps the limit within [MinLimit, MaxLimit].
func (l *little) clampLocked() {
	l.limit = min(max(l.limit, float64(l.cfg.MinLimit)), float64(l.cfg.MaxLimit))
}

// closeLocked applies the rule to the round trip that just completed.
func (l *little) closeLocked(at time.Time) {
	rt := l.win.close(at)
	l.observeSpreadLocked(rt)
	if l.b != 0 && rt.toldNothing(l.unconfirmed) {
		// A round trip of calls that told nothing (deadline overruns a
		// server does not count, since a caller may choose them): if b
		// holds a queue, no call may ever succeed again. Measure b anew
		// at half the limit; a caller cannot move the limit this way, only
		// a probe's successes do. While b is unconfirmed (a start's, whose
		// calls met a queue), mostly such calls are enough: the few that
		// succeed are the ones admitted before the queue grew.
		l.rate = 0
		l.startProbeLocked(at, int(l.limit)/2)
		return
	}
	if rt.n == 0 || l.b == 0 || !at.After(rt.opened) {
		return
	}
	ok := rt.successes()
	r := rt.perSuccess()
	m := float64(rt.sumIn) / float64(rt.n)
	b := float64(l.b)
	t := l.toleranceLocked(rt.n)
	c := m * b / r // Little's law
	if ok == 0 {
		c = l.limit / 2 / (1 + t) // nothing succeeded: c is unknown, not 0
	}
	target := (1 + t) * c
	admits := math.Floor(l.limit) // what the Limiter enforces
	full := m >= fullShare*admits
	reached := float64(rt.maxIn) >= fullShare*admits
	late := r > (1+t)*b
	switch {
	case full && late && l.unconfirmed:
		// b holds a queue if anything, and c errs high: all the way down.
		l.limit = min(target, l.limit)
	case full && late:
		l.limit += downGain * min(target-l.limit, 0)
	case full && !late:
		l.grow(max(1, target-l.limit))
	case reached && !late:
		l.grow(max(min(float64(rt.n)/admits, admits), 1, target-l.limit))
	}
	l.clampLocked()
	if full && l.reprobeLocked(at, late) {
		depth := probeDepth * c
		if ok == 0 {
			depth = l.limit / 2
		}
		l.rate, l.rateN = m/r, rt.n
		l.startProbeLocked(at, int(depth))
	}
}

// reprobeLocked reports whether b needs measuring again, now that the
// limit is full: b is old; or it rests on too few calls for the spread
// and the round trip was late; or the limit has halved since the last
// probe (or the start), as when the downstream slowed.
func (l *little) reprobeLocked(at time.Time, late bool) bool {
	return at.Sub(l.bAt) >= probeEvery || l.limit <= l.probedAt/2 ||
		late && (l.unconfirmed || l.nb < float64(l.need)/2)
}

// toleranceLocked is t for a round trip of n calls: lateSigmas standard
// errors of the difference between its mean and b, which rests on nb calls.
func (l *little) toleranceLocked(n int) float64 {
	return l.tolerance(float64(n), l.nb)
}

// tolerance is lateSigmas standard errors of the difference between two
// means of RTTs, over n1 and n2 calls.
func (l *little) tolerance(n1, n2 float64) float64 {
	cv := max(l.cv, 0)
	return max(minTolerance, lateSigmas*cv*math.Sqrt(1/max(n1, 1)+1/max(n2, 1)))
}

// observeSpreadLocked folds a round trip's RTT variance into the moving
// spread, and sizes the round trips to come so that their mean is known to
// within the tolerance. It averages variances, not coefficients: a round
// trip of a few calls rarely holds one of a shape's rare slow calls, and an
// average of its square root reads far below the calls' spread.
func (l *little) observeSpreadLocked(rt trip) {
	l.longest = max(rt.maxRTT, l.longest*7/8)
	mean, variance, ok := rt.moments()
	if !ok {
		return
	}
	if l.cv < 0 {
		l.spreadMean, l.spreadVar = mean, variance
	} else {
		l.spreadMean += spreadWeight * (mean - l.spreadMean)
		l.spreadVar += spreadWeight * (variance - l.spreadVar)
	}
	l.cv = math.Sqrt(l.spreadVar) / l.spreadMean
	l.need = samplesNeeded(l.cv)
}

// samplesNeeded is how many samples a round trip needs for its mean RTT
// to be known within minTolerance by lateSigmas standard errors, when RTTs
// vary with coefficient cv (negative if unknown).
func samplesNeeded(cv float64) int {
	if cv < 0 {
		return minTripSamples
	}
	n := math.Ceil(math.Pow(lateSigmas*cv/minTolerance, 2))
	return int(min(max(n, minTripSamples), maxWindowSamples))
}

// probeCalls is how many calls a probe times: enough for the spread, but
// no more than probeTrips round trips at its depth, since the probe holds
// every other call out meanwhile. Fewer calls widen t through nb.
func (l *little) probeCalls() int {
	return min(max(l.need, minProbeCalls), maxProbeCalls, max(minProbeCalls, probeTrips*l.probeLimit))
}

func (l *little) startProbeLocked(at time.Time, limit int) {
	l.phase = probing
	l.probes++
	l.probedAt = l.limit
	l.probeLimit = min(max(limit, l.cfg.MinLimit), int(l.limit))
	l.probeFrom, l.probeTo = at, time.Time{}
	l.probe = trip{}
	l.probeBack, l.grants, l.mostIn = 0, 0, 0
}

// probeLocked times the calls granted under the probe limit. Admission
// ends once probeCalls have been granted; the probe ends when every call
// granted until then has returned, the slow ones included.
func (l *little) probeLocked(s Sample) {
	if l.phase == starting {
		// The first call is back: the calls in flight become the limit.
		l.phase = probing
		l.limit = max(l.limit, float64(l.mostIn))
		l.clampLocked()
	}
	if s.RTT < 0 {
		// A stream: no start time to place it in the probe or not.
		if s.Outcome != Ignored {
			l.untimedLocked(s)
		}
		return
	}
	if l.phase == probing && l.grants >= l.probeCalls() {
		l.phase = collecting
		l.probeTo = s.At
	}
	// The cohort's calls, if a Limiter counts the grants; else the calls
	// granted since the probe began and, once collecting, before that.
	start := s.At.Add(-s.RTT) // the first probe's probeFrom is zero
	mine := !start.Before(l.probeFrom) && s.cohort
	if l.grants == 0 {
		mine = !start.Before(l.probeFrom) && (l.phase == probing || !start.After(l.probeTo))
	}
	if l.b == 0 {
		// The start is a slow start: it knows no capacity to stay below,
		// grows a limit its calls fill by one per call, and backs off on
		// a drop, until its probe ends: the wait for a long tail's slowest
		// call is no reason to hold a guess.
		switch {
		case s.Outcome == Dropped:
			l.limit *= l.cfg.BackoffRatio
			l.clampLocked()
		case s.Outcome == Success && float64(s.Inflight) >= fullShare*l.limit:
			l.grow(1)
		}
	}
	if mine {
		l.probeBack++
		if s.Outcome != Ignored {
			l.probe.add(s)
		}
	}
	if l.phase == probing && l.probeBack >= l.probeCalls() {
		// No Limiter counts the grants: the calls that returned are the probe.
		l.phase = collecting
		l.probeTo = s.At
	}
	if l.phase == collecting {
		// Every call granted is back; or, if the calls granted are not
		// counted (the AIMD used without a Limiter) or one of them is
		// lost to a stream, the longest RTT seen has passed twice over.
		wait := probeCollect * max(l.longest, l.probe.maxRTT)
		if l.grants > 0 {
			wait = max(wait, probeCollect*time.Second)
		}
		if l.grants > 0 && l.probeBack >= l.grants || !s.At.Before(l.probeTo.Add(wait)) {
			l.endProbeLocked(s.At)
		}
	}
}

func (l *little) endProbeLocked(at time.Time) {
	l.phase = steady
	l.win.close(at)
	if l.probe.successes() == 0 {
		// No call of the probe succeeded: no b to keep; measure again at
		// half the depth. Before any b the limit is the start's, and it
		// halves too: calls that all overran their deadlines (which a
		// server that has seen no success cannot tell from a caller's tiny
		// ones, and ignores) would otherwise hold it there for good.
		if l.b == 0 {
			l.limit = max(l.limit/2, float64(l.cfg.MinLimit))
			l.startProbeLocked(at, int(l.limit))
			return
		}
		l.startProbeLocked(at, l.probeLimit/2)
		return
	}
	n := l.probe.successes()
	m := l.probe.sumRTT / time.Duration(n)
	depth := l.probeLimit
	// The spread counts the drops with the time they took: they are the
	// probe's slow calls, and without them a cache-like shape reads quiet.
	all := l.probe
	all.drops, all.sumRTT, all.sumSq = 0, all.sumRTT+all.dropRTT, all.sumSq+all.dropSq
	l.observeSpreadLocked(all)
	t := l.toleranceLocked(n)
	again, measured := false, at
	switch {
	case l.b == 0:
		// The start: its calls met a queue of unknown depth.
		l.b, l.nb, l.unconfirmed, depth = m, float64(n), true, 0
		l.probedAt = l.limit
	case float64(m)*(1+t) >= float64(l.b):
		// b is the mean of the probes' calls, the older ones weighing at
		// most two probes' worth, so that b follows a downstream that changed.
		// An unconfirmed b is confirmed only from below the depth it was
		// measured at (the start's, 0, is unknown): a probe as deep meets
		// the same queue, if there is one, reads about b, and c = m·b/r
		// makes the first probe as deep. Measure again at half the depth.
		// A mean higher than b by a standard error met no such queue if
		// its calls carried less than the round trip's throughput by two
		// (a queue carries it all): b was low, a start's fast calls. Higher
		// alone is not enough: a start's queue may still be growing, and a
		// probe as deep in it reads higher than the start's calls did.
		// The throughputs compared rest on the probe's calls and the
		// round trip's, not on b's: their own tolerance.
		higher := float64(m) > (1+t/lateSigmas)*float64(l.b)
		tr := l.tolerance(float64(n), float64(l.rateN))
		unsaturated := (1+2*tr/lateSigmas)*float64(depth) < l.rate*float64(m)
		again = l.unconfirmed && depth >= l.bDepth && !(higher && unsaturated)
		w := min(l.nb, float64(2*l.probeCalls()))
		if l.unconfirmed {
			w = 0 // a b that may hold a queue, or only the fast calls, is not averaged in
		}
		l.unconfirmed = again
		l.b = time.Duration((float64(l.b)*w + float64(m)*float64(n)) / (w + float64(n)))
		l.nb = w + float64(n)
	case l.probe.perSuccess() > (1+t)*float64(m):
		// The probe's calls overran: they queued, and the mean of those
		// that succeeded lacks the slow ones. b stays; measure again at
		// half the depth. Overruns count in proportion, as in r: a
		// downstream's own rare ones are not a queue.
		again = true
		l.limit = min(l.limit, (1+t)*float64(depth))
		l.clampLocked()
		depth, measured = l.bDepth, l.bAt
	default:
		// A queue in b. If the mean fell in proportion to the depth, the
		// probe's own calls may have queued: measure again at half the depth.
		again = l.bDepth == 0 || float64(m)/float64(l.b) <= (1+t)*float64(depth)/float64(l.bDepth)
		l.b, l.nb, l.unconfirmed = m, float64(n), again
		l.limit = min(l.limit, (1+t)*float64(depth))
		l.clampLocked()
	}
	l.bDepth, l.bAt = depth, measured
	if again && l.probeLimit > l.cfg.MinLimit {
		l.startProbeLocked(at, l.probeLimit/2)
	}
}
