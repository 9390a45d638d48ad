package limiter

import "time"

// window sums one round trip's samples: complete once a call that started
// after it opened has returned (ready) and minSamples are in. Its owner locks it.
type window struct {
	trip
	ready bool
}

// add records s, timed and not Ignored, and reports whether w is complete.
func (w *window) add(s Sample, minSamples int) bool {
	w.returned(s)
	w.trip.add(s)
	return w.ready && w.n >= minSamples
}

// skip records s, timed and Ignored, and reports whether w is complete with
// calls that told nothing.
func (w *window) skip(s Sample, minSamples int, mostly bool) bool {
	w.returned(s)
	w.ignored++
	return w.ready && w.ignored >= minSamples && w.toldNothing(mostly)
}

// returned notes the timed s: the first opens w at its start.
func (w *window) returned(s Sample) {
	start := s.At.Add(-s.RTT)
	if w.opened.IsZero() {
		w.opened = start
	}
	w.ready = w.ready || !start.Before(w.opened)
}

// close takes the window's samples and opens the next window at at.
func (w *window) close(at time.Time) trip {
	rt := w.trip
	*w = window{trip: trip{opened: at}}
	return rt
}

// A trip is the samples of a round trip, or of a probe.
type trip struct {
	n, drops int
	slow     int // drops, and successes past b's median by medianMargin (round trips only)
	ignored  int // calls that returned Ignored (round trips only)
	// RTTs of the successes and of the drops, summed, and in µs squared
	sumRTT, dropRTT time.Duration
	sumSq, dropSq   float64
	maxRTT          time.Duration
	maxIn, sumIn    int       // of the in-flight counts at grant
	opened          time.Time // when the window opened
}

// add records s, which must be timed and not Ignored.
func (r *trip) add(s Sample) {
	us := float64(s.RTT) / float64(time.Microsecond)
	r.n++
	r.maxRTT = max(r.maxRTT, s.RTT)
	r.sumIn += s.Inflight
	r.maxIn = max(r.maxIn, s.Inflight)
	if s.Outcome == Dropped {
		r.drops++
		r.dropRTT += s.RTT
		r.dropSq += us * us
	} else {
		r.sumRTT += s.RTT
		r.sumSq += us * us
	}
}

func (r trip) successes() int { return r.n - r.drops }

func (r trip) mostlyDropped() bool { return 2*r.drops > r.n }

// toldNothing reports whether the round trip's calls were all Ignored, or
// mostly so when mostly is set.
func (r trip) toldNothing(mostly bool) bool {
	return r.n == 0 || mostly && r.ignored > r.n
}

// perSuccess is the time in flight (ns) per success, the drops' included:
// an overrun is a late call.
func (r trip) perSuccess() float64 {
	return float64(r.sumRTT+r.dropRTT) / float64(r.successes())
}

// moments returns the successes' mean (µs) and unbiased variance (µs²), or
// ok false with fewer than two.
func (r trip) moments() (mean, variance float64, ok bool) {
	n, sum := float64(r.successes()), r.sumRTT
	if n < 2 || sum <= 0 {
		return 0, 0, false
	}
	mean = float64(sum) / float64(time.Microsecond) / n
	variance = max(r.sumSq-n*mean*mean, 0) / (n - 1)
	return mean, variance, true
}
