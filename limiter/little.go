package limiter

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// phase is where a little controller is in its cycle, and what moves it on.
type phase int

const (
	starting   phase = iota // admits every call (a guess would refuse a healthy downstream); probing once the first returns
	probing                 // holds the limit below the capacity, so its calls meet no queue; collecting once they are granted
	collecting              // waits for the probe's slow calls; then steady, or probing again at half the depth
	steady                  // applies the rule once per round trip; probing when a full limit doubts b or calls told nothing
)

// Tuning of the little controller, one place.
const (
	minTolerance  = 0.3              // a round trip may be this much slower than b before it is late
	lateSigmas    = 3                // standard errors of a round trip's mean inside the tolerance, and past one half for the sign test alone
	downGain      = 0.5              // share of the way down to the target a late round trip moves the limit
	fullShare     = 0.9              // calls in flight, of the limit, at which a round trip filled it
	startShare    = 0.5              // calls in flight, of the limit, at which a start's success may grow it
	probeDepth    = 0.9              // probe limit, of the calls the downstream carries without queue
	probeEvery    = 30 * time.Second // age of b, at least, at which a full limit probes
	probeAge      = 1500             // age of b in b's, at least, at which a full limit probes
	probeCollect  = 2                // × the longest RTT seen: how long a probe's calls may take
	minProbeCalls = 16               // fewest calls a probe times
	maxProbeCalls = 128              // most calls a probe times, however noisy the RTTs
	probeTrips    = 8                // most round trips of its depth a probe's calls take
	signSigmas    = 1                // standard errors past one half, of a late round trip's share of calls slower than b's median
	medianMargin  = 0.05             // share of b's median a call must exceed it by to count as slower: not jitter around one value
	spreadWeight  = 0.1              // weight of a round trip in the moving spread of RTTs
	burstRoom     = 1.3              // limit, of the most calls in flight, an on-time round trip below it keeps

	minTripSamples   = 10  // fewest samples a round trip closes on (the classic rule's too)
	maxWindowSamples = 256 // most samples a round trip needs, however noisy the RTTs
)

// little is AIMD's adaptive rule (docs/design.md). Per round trip of n calls
// (over once most are drops, if the last did not cut), m in flight on average,
// r their time in flight per success (a drop counts its time), b no-load RTT:
//
//	t = max(0.3, 3·cv·√(1/n + 1/nb))  tolerance: the spread of RTTs (b's nb calls), not their shape
//	c = m·b/r                         calls carried without a queue (Little)
//	late: over half its calls 5 % slower than b's median by σ and r > (1+t)·b, or by 3 σ if b is confirmed
//	reached: most in flight ≥ 0.9·limit; full: m ≥ 0.9·limit, or reached and most dropped
//	full, late:               half way down to (1+t)·c; all the way if b is unconfirmed
//	full or reached, on time: up to (1+t)·c, by one at least
//	neither, r > (1+t)·b:     r is averaged into b, if b is unconfirmed and most succeeded
//	neither, on time:         at least 1.3 × the most in flight
//	neither, b ≤ r ≤ (1+t)·b:  128 such calls in a row confirm b
//
// A full limit probes when b is 30 s and 1500 b's old, the limit halved or a
// late round trip doubts b: 0.9·c until its calls are back (endProbeLocked).
type little struct {
	cfg     AIMDConfig
	current atomic.Int64
	careful atomic.Bool // grants take the lock: not steady

	mu          sync.Mutex
	phase       phase
	win         window
	need        int // samples a round trip needs
	limit       float64
	b, bMedian  time.Duration // no-load RTT (0 until the start's probe ends), its calls' median
	nb          float64       // calls behind b
	unconfirmed bool          // b may hold a queue, or only fast calls
	agreeing    int           // calls of the light round trips in a row that read b
	bDepth      int           // the probe limit b was measured at; 0 for the start's
	bAt         time.Time     // when b was last measured
	cutAt       time.Time     // when a round trip last cut the limit: drops granted before tell of the old one
	probes      int
	probedAt    float64 // the limit the last probe left
	rate        float64 // successes per ns of the full round trip that started the probes; 0 if unknown
	rateN       int     // the calls rate rests on
	// moving mean (µs), variance (µs²) and cv of round trips' RTTs; the longest RTT lately
	spreadMean, spreadVar, cv float64
	longest                   time.Duration

	// the current probe: its limit, start, end of admission, timed calls and their RTTs
	probeLimit         int
	probeFrom, probeTo time.Time
	probe              trip
	probeRTTs          []time.Duration
	probeBack          int // its calls that have returned
	grants, mostIn     int // permits granted into its cohort (0 without a Limiter); most in flight at one
}

func newLittle(c AIMDConfig, admitAll bool) *little {
	c = c.withDefaults()
	l := &little{cfg: c, limit: float64(c.InitialLimit), cv: -1, need: minTripSamples}
	l.startProbeLocked(time.Time{}, c.InitialLimit)
	if admitAll {
		l.phase = starting
	}
	l.publishLocked()
	return l
}

func (l *little) Limit() int { return int(l.current.Load()) }

// granted counts a grant into the probe's cohort until its quota is filled,
// and tells the start's slow start whether it found the limit half full.
func (l *little) granted(inflight int) (cohort, full bool) {
	if !l.careful.Load() {
		return false, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mostIn = max(l.mostIn, inflight)
	full = l.b == 0 && l.phase != starting && float64(inflight) >= startShare*float64(l.current.Load())
	if l.phase == collecting || l.phase == steady || l.grants >= l.probeCalls(l.probeLimit) {
		return false, full
	}
	l.grants++
	return true, full
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
	default:
		if s.Outcome == Dropped || float64(s.RTT) > (1+medianMargin)*float64(l.bMedian) {
			l.win.slow++
		}
		// Mostly drops close it early: calls granted before it opened tell
		// of overload too, and waiting for one of its own takes a deadline.
		if l.win.add(s, l.need) || l.win.opened.After(l.cutAt) && l.win.n >= l.need && l.win.mostlyDropped() {
			l.closeLocked(s.At)
		}
	}
	l.publishLocked()
	return l.Limit()
}

// untimedLocked applies a call without an RTT (a stream): a drop backs off;
// a success that found the limit full grows it by 1/limit.
func (l *little) untimedLocked(s Sample) {
	if s.Outcome == Dropped {
		l.setLimit(l.limit * l.cfg.BackoffRatio)
	} else if float64(s.Inflight) >= fullShare*l.limit {
		l.setLimit(l.limit + 1/l.limit)
	}
}

// setLimit sets the limit to v within [MinLimit, MaxLimit].
func (l *little) setLimit(v float64) {
	l.limit = min(max(v, float64(l.cfg.MinLimit)), float64(l.cfg.MaxLimit))
}

// closeLocked applies the rule to the round trip that just completed.
func (l *little) closeLocked(at time.Time) {
	rt := l.win.close(at)
	l.observeSpreadLocked(rt)
	if l.b != 0 && rt.toldNothing(l.unconfirmed) {
		// Only overruns a server ignores: only a probe's successes move the limit.
		l.rate = 0
		l.startProbeLocked(at, int(l.limit)/2)
		return
	}
	if rt.n == 0 || l.b == 0 || !at.After(rt.opened) {
		return
	}
	ok := rt.successes()
	r, t, meanLate, late := l.judgeLocked(rt)
	m, b := float64(rt.sumIn)/float64(rt.n), float64(l.b)
	c := m * b / r // Little's law
	if ok == 0 {
		c = l.limit / 2 / (1 + t) // unknown, not 0
	}
	target := (1 + t) * c
	admits := math.Floor(l.limit) // what the Limiter enforces
	overran, reached := rt.mostlyDropped(), float64(rt.maxIn) >= fullShare*admits
	full := m >= fullShare*admits || reached && overran // mostly dropped: too many let in, whatever m
	before := l.limit
	switch {
	case full && late && l.unconfirmed:
		l.setLimit(min(target, l.limit)) // b holds a queue if anything, and c errs high
	case full && late:
		l.setLimit(l.limit + downGain*min(target-l.limit, 0))
	case full && !late:
		l.setLimit(l.limit + max(1, target-l.limit))
	case reached && !late:
		l.setLimit(l.limit + max(min(float64(rt.n)/admits, admits), 1, target-l.limit))
	case meanLate && l.unconfirmed && !reached && !overran:
		// Nothing held the load back, yet r was late: b rests on too few calls (a tail missed).
		l.averageIntoB(l.nb, r, float64(rt.n))
	case !late && rt.drops == 0:
		l.setLimit(max(l.limit, burstRoom*float64(rt.maxIn))) // room for the load's own bursts
	}
	if l.limit < before {
		l.cutAt = at
	}
	// Light round trips that read b confirm it: the start met no queue.
	if !reached && r <= (1+t)*b && r >= b && rt.drops == 0 {
		l.agreeing += rt.n
	} else {
		l.agreeing = 0
	}
	l.unconfirmed = l.unconfirmed && l.agreeing < maxProbeCalls
	old := at.Sub(l.bAt) >= max(probeEvery, probeAge*l.b)
	if full && (old || l.limit <= l.probedAt/2 || late && (l.unconfirmed || l.nb < float64(l.need)/2)) {
		depth := probeDepth * c
		if ok == 0 {
			depth = l.limit / 2
		}
		l.rate, l.rateN = m/r, rt.n
		l.startProbeLocked(at, int(depth))
	}
}

// judgeLocked returns rt's time in flight per success r (ns) and its
// tolerance t, and whether r is late and rt is. A queue delays every call,
// so it moves the median as well as the mean: a late mean alone is a tail
// of slow calls, and a median past a confirmed b's by lateSigmas is a queue
// whose slow calls are not back yet (a start's b may come from a quieter
// process than the one now).
func (l *little) judgeLocked(rt trip) (r, t float64, meanLate, late bool) {
	r, t = rt.perSuccess(), tolerance(l.cv, float64(rt.n), l.nb)
	share, se := float64(rt.slow)/float64(rt.n), 0.5*math.Sqrt(1/float64(rt.n)+1/max(l.nb, minProbeCalls))
	meanLate = r > (1+t)*float64(l.b)
	return r, t, meanLate, meanLate && share > 0.5+signSigmas*se || !l.unconfirmed && share > 0.5+lateSigmas*se
}

// averageIntoB makes b the mean of w calls at b and n calls at mean (ns).
func (l *little) averageIntoB(w, mean, n float64) {
	l.b = time.Duration((float64(l.b)*w + mean*n) / (w + n))
	l.nb = w + n
}

// tolerance is lateSigmas standard errors of the difference between two
// means of RTTs over n1 and n2 calls at spread cv, relative to the mean.
func tolerance(cv, n1, n2 float64) float64 {
	return max(minTolerance, lateSigmas*max(cv, 0)*math.Sqrt(1/max(n1, 1)+1/max(n2, 1)))
}

// observeSpreadLocked folds a round trip's variance, not its cv (small round
// trips miss rare slow calls), into the moving spread and returns its own cv
// (-1 below two successes).
func (l *little) observeSpreadLocked(rt trip) float64 {
	l.longest = max(rt.maxRTT, l.longest*7/8)
	mean, variance, ok := rt.moments()
	if !ok {
		return -1
	}
	if l.cv < 0 {
		l.spreadMean, l.spreadVar = mean, variance
	} else {
		l.spreadMean += spreadWeight * (mean - l.spreadMean)
		l.spreadVar += spreadWeight * (variance - l.spreadVar)
	}
	l.cv = math.Sqrt(l.spreadVar) / l.spreadMean
	l.need = samplesNeeded(l.cv)
	return math.Sqrt(variance) / mean
}

// samplesNeeded is how many samples put a round trip's mean within
// minTolerance by lateSigmas standard errors at cv (negative: unknown).
func samplesNeeded(cv float64) int {
	n := math.Ceil(math.Pow(lateSigmas*max(cv, 0)/minTolerance, 2))
	return int(min(max(n, minTripSamples), maxWindowSamples))
}

// probeCalls is how many calls a probe times: enough for the spread, but
// at most probeTrips round trips at its depth, since it holds others out.
func (l *little) probeCalls(depth int) int {
	return min(max(l.need, minProbeCalls), maxProbeCalls, max(minProbeCalls, probeTrips*depth))
}

func (l *little) startProbeLocked(at time.Time, limit int) {
	l.phase = probing
	l.probes++
	l.probeLimit = min(max(limit, l.cfg.MinLimit), int(l.limit))
	l.probeFrom, l.probeTo = at, time.Time{}
	l.probe, l.probeRTTs = trip{}, l.probeRTTs[:0]
	l.probeBack, l.grants, l.mostIn, l.agreeing = 0, 0, 0, 0
}

// probeLocked times the calls granted under the probe limit. Admission
// ends once probeCalls have been granted; the probe ends when every call
// granted until then has returned, the slow ones included.
func (l *little) probeLocked(s Sample) {
	if l.phase == starting {
		// The first call is back: the calls in flight become the limit.
		l.phase = probing
		l.setLimit(max(l.limit, float64(l.mostIn)))
	}
	if s.RTT < 0 {
		if s.Outcome != Ignored {
			l.untimedLocked(s) // a stream: no start time to place it in the probe
		}
		return
	}
	// The cohort's calls; without a Limiter, those granted since the probe
	// began and, once collecting, before its admission ended.
	start := s.At.Add(-s.RTT)
	mine := !start.Before(l.probeFrom) && (s.cohort || l.grants == 0 && (l.phase == probing || !start.After(l.probeTo)))
	if l.b == 0 {
		// The start's slow start: a backoff per drop, one more per success
		// whose grant found the limit half full and (HyStart's exit) whose
		// RTT is within 1+minTolerance of the mean of the start's calls so far.
		full := s.full || l.grants == 0 && float64(s.Inflight) >= startShare*l.limit
		n := l.probe.successes()
		if s.Outcome == Dropped {
			l.setLimit(l.limit * l.cfg.BackoffRatio)
		} else if s.Outcome == Success && full && (n == 0 || float64(s.RTT) <= (1+minTolerance)*float64(l.probe.sumRTT)/float64(n)) {
			l.setLimit(l.limit + 1)
		}
	}
	if mine {
		l.probeBack++
		if s.Outcome != Ignored {
			l.probe.add(s)
			if len(l.probeRTTs) < 2*maxProbeCalls { // a bound on memory
				l.probeRTTs = append(l.probeRTTs, s.RTT)
			}
		}
	}
	if l.phase == probing && max(l.grants, l.probeBack) >= l.probeCalls(l.probeLimit) {
		l.phase, l.probeTo = collecting, s.At // the quota is granted, or (no Limiter counts grants) back
	}
	if l.phase == collecting {
		// Every call granted is back, or (uncounted, or lost to a stream) the
		// longest RTT seen has passed twice.
		wait := probeCollect * max(l.longest, l.probe.maxRTT)
		if l.grants > 0 {
			wait = max(wait, probeCollect*time.Second)
		}
		if l.grants > 0 && l.probeBack >= l.grants || !s.At.Before(l.probeTo.Add(wait)) {
			l.endProbeLocked(s.At)
		}
	}
}

// endProbeLocked judges b by the mean p of the probe's calls at depth d:
//
//	p ≥ b/(1+t):          averaged into b (replaces b while unconfirmed or if p > (1+t)·b)
//	p late by its drops:  the limit is capped at (1+t)·d, b kept
//	lower:                p becomes b, the limit is capped at (1+t)·d
//
// b is unconfirmed after the start and after a p that fell in proportion
// to d, until a p agrees from below b's depth or the round trip's
// throughput, or light load reads it (closeLocked). Until then, and after
// a probe that told nothing, one at d/2 follows, unless it could not tell
// a p halved by a queue from p.
func (l *little) endProbeLocked(at time.Time) {
	l.phase = steady
	l.win.close(at)
	n := l.probe.successes()
	if n == 0 {
		// Measure again at half the depth. Before any b the limit halves
		// too, or calls that all overran (a server may ignore) would hold it.
		depth := l.probeLimit / 2
		if l.b == 0 {
			l.setLimit(l.limit / 2)
			depth = int(l.limit)
		}
		l.startProbeLocked(at, depth)
		return
	}
	m := l.probe.sumRTT / time.Duration(n)
	slices.Sort(l.probeRTTs)
	median := l.probeRTTs[len(l.probeRTTs)/2]
	depth := l.probeLimit
	all := l.probe // the spread counts the drops: they are the probe's slow calls
	all.drops, all.sumRTT, all.sumSq = 0, all.sumRTT+all.dropRTT, all.sumSq+all.dropSq
	own := l.observeSpreadLocked(all)
	t := tolerance(l.cv, float64(n), l.nb)
	// A throughput below the round trip's by two standard errors: a queue
	// would have carried it all, so none did.
	tr := tolerance(l.cv, float64(n), float64(l.rateN))
	unsaturated := (1+2*tr/lateSigmas)*float64(depth) < l.rate*float64(m)
	again, measured := false, at
	switch {
	case l.b == 0:
		// The start: its calls met a queue of unknown depth.
		l.b, l.bMedian, l.nb, l.unconfirmed, depth = m, median, float64(n), true, 0
	case float64(m)*(1+t) >= float64(l.b):
		// It confirms b from below b's depth (one as deep may meet the same
		// queue) or unsaturated. One at half the depth is no test if a mean
		// halved would agree too, at the moving spread or the probe's own.
		telling := tolerance(max(l.cv, own), float64(l.probeCalls(depth/2)), float64(n)) < 1
		again = l.unconfirmed && depth >= l.bDepth && !unsaturated && telling
		w := min(l.nb, float64(2*l.probeCalls(l.probeLimit))) // b follows a downstream that changed
		if l.unconfirmed || float64(m) > (1+t)*float64(l.b) {
			w = 0 // or the downstream slowed: an average would still be late
		}
		l.unconfirmed = again
		l.bMedian = time.Duration((float64(l.bMedian)*w + float64(median)*float64(n)) / (w + float64(n)))
		l.averageIntoB(w, float64(m), float64(n))
	case l.probe.perSuccess() > (1+t)*float64(m):
		// Its drops made it late: its successes' mean lacks the slow calls.
		again = true
		l.setLimit(min(l.limit, (1+t)*float64(depth)))
		depth, measured = l.bDepth, l.bAt
	default:
		// A queue in b. If p fell in proportion to the depth, the probe's
		// own calls may have queued too, unless it was unsaturated.
		again = !unsaturated && (l.bDepth == 0 || float64(m)/float64(l.b) <= (1+t)*float64(depth)/float64(l.bDepth))
		l.b, l.bMedian, l.nb, l.unconfirmed = m, median, float64(n), again
		l.setLimit(min(l.limit, (1+t)*float64(depth)))
	}
	l.bDepth, l.bAt = depth, measured
	l.probedAt = l.limit // a limit halved from here means the downstream slowed
	if again && l.probeLimit > l.cfg.MinLimit {
		l.startProbeLocked(at, l.probeLimit/2)
	}
}
