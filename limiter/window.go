package limiter

import "time"

// window sums the samples of one round trip. It opens at a point in time
// and is complete once a call that started after that point has returned
// and at least minSamples samples are in. Its owner's mutex guards it.
type window struct {
	trip
	ready bool // a call that started after the window opened has returned
}

// add records s, which must be timed and not Ignored, and reports whether
// the window is complete.
func (w *window) add(s Sample, minSamples int) bool {
	start := s.At.Add(-s.RTT)
	if w.opened.IsZero() {
		w.opened = start
	}
	w.n++
	w.sumIn += s.Inflight
	w.maxIn = max(w.maxIn, s.Inflight)
	if s.Outcome == Dropped {
		w.drops++
		w.dropRTT += s.RTT
	} else {
		w.sumRTT += s.RTT
		w.sumSq += squaredMicros(s.RTT)
		w.maxRTT = max(w.maxRTT, s.RTT)
	}
	w.ready = w.ready || !start.Before(w.opened)
	return w.ready && w.n >= minSamples
}

// close takes the window's samples and opens the next window at at.
func (w *window) close(at time.Time) trip {
	rt := w.trip
	rt.at = at
	*w = window{trip: trip{opened: at}}
	return rt
}

// A trip is the samples of a round trip.
type trip struct {
	n, drops int
	sumRTT   time.Duration // of the successes
	sumSq    float64       // of the successes' RTTs in microseconds, squared
	maxRTT   time.Duration // of the successes
	dropRTT  time.Duration // summed RTTs of the drops
	maxIn    int
	sumIn    int       // in-flight counts at grant
	opened   time.Time // when the window opened
	at       time.Time // when it closed
}

// squaredMicros is rtt² in microseconds², as trip.sumSq holds it.
func squaredMicros(rtt time.Duration) float64 {
	us := float64(rtt) / float64(time.Microsecond)
	return us * us
}

func (r trip) successes() int { return r.n - r.drops }

// dropShare is the share of the round trip's calls that were dropped.
func (r trip) dropShare() float64 {
	if r.n == 0 {
		return 0
	}
	return float64(r.drops) / float64(r.n)
}

// moments returns the mean (µs) and the unbiased variance (µs²) of the
// successful RTTs, or ok false with fewer than two of them.
func (r trip) moments() (mean, variance float64, ok bool) {
	n := float64(r.successes())
	if n < 2 || r.sumRTT <= 0 {
		return 0, 0, false
	}
	mean = float64(r.sumRTT) / float64(time.Microsecond) / n
	variance = max(r.sumSq-n*mean*mean, 0) / (n - 1)
	return mean, variance, true
}
