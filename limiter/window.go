package limiter

import (
	"math"
	"sync/atomic"
	"time"
)

// window aggregates samples over one round trip. It opens at a point in
// time and is complete once a call that started after that point has
// returned and at least minSamples samples are in.
//
// add is lock-free, so that releases on many cores do not serialize on
// it; close must not run concurrently with another close. A sample added
// while a close runs lands whole in one of the two windows, or, rarely,
// with its count in the new window and its RTT in the old: an error of
// one sample that a statistic over a round trip absorbs.
type window struct {
	open    atomic.Int64  // UnixNano when the window opened; 0 until the first sample
	counts  atomic.Uint64 // samples << 32 | drops
	sumRTT  atomic.Int64  // nanoseconds, successes only
	sumSq   atomic.Uint64 // microseconds², successes only; see maxSquaredRTT
	maxIn   atomic.Int64
	maxRTT  atomic.Int64 // nanoseconds, successes only
	sumIn   atomic.Int64 // in-flight counts at grant, timed calls
	dropRTT atomic.Int64 // nanoseconds, drops only
	ready   atomic.Bool  // a call that started after open has returned
}

// maxSquaredRTT caps the RTT that enters the sum of squares, so that 2^32
// samples cannot overflow it. A call that long is far outside any round
// trip whose variability matters.
const maxSquaredRTT = 30 * time.Second

// squaredMicros is rtt², in microseconds² and capped at maxSquaredRTT, as
// the sums of squares behind a coefficient of variation hold it.
func squaredMicros(rtt time.Duration) uint64 {
	us := uint64(min(rtt, maxSquaredRTT) / time.Microsecond)
	return us * us
}

const (
	oneSample = 1 << 32
	oneDrop   = 1
)

// add records s, which must be timed and not Ignored, and
// reports whether the window is complete.
func (w *window) add(s Sample, minSamples int) bool {
	end := s.At.UnixNano()
	start := end - int64(s.RTT)
	if w.open.Load() == 0 {
		w.open.CompareAndSwap(0, start)
	}
	// Sums before the count, so that a close that sees the count sees
	// the sums too.
	var c uint64
	w.sumIn.Add(int64(s.Inflight))
	if s.Outcome == Dropped {
		w.dropRTT.Add(int64(s.RTT))
		c = w.counts.Add(oneSample | oneDrop)
	} else {
		w.sumRTT.Add(int64(s.RTT))
		w.sumSq.Add(squaredMicros(s.RTT))
		raise(&w.maxRTT, int64(s.RTT))
		c = w.counts.Add(oneSample)
	}
	raise(&w.maxIn, int64(s.Inflight))
	if !w.ready.Load() && start >= w.open.Load() {
		w.ready.Store(true)
	}
	return w.ready.Load() && int(c>>32) >= minSamples
}

// raise sets a to v if v is larger, lock-free.
func raise(a *atomic.Int64, v int64) {
	for m := a.Load(); v > m && !a.CompareAndSwap(m, v); m = a.Load() {
	}
}

// complete reports whether the window can close, as add did.
func (w *window) complete(minSamples int) bool {
	return w.ready.Load() && int(w.counts.Load()>>32) >= minSamples
}

// reset empties the window and opens it at at.
func (w *window) reset(at time.Time) { w.close(at) }

// close takes the window's samples and opens the next window at at.
func (w *window) close(at time.Time) trip {
	c := w.counts.Swap(0)
	rt := trip{
		n:       int(c >> 32),
		drops:   int(c & math.MaxUint32),
		sumRTT:  time.Duration(w.sumRTT.Swap(0)),
		sumSq:   w.sumSq.Swap(0),
		maxIn:   int(w.maxIn.Swap(0)),
		maxRTT:  time.Duration(w.maxRTT.Swap(0)),
		sumIn:   int(w.sumIn.Swap(0)),
		dropRTT: time.Duration(w.dropRTT.Swap(0)),
		opened:  time.Unix(0, w.open.Load()),
		at:      at,
	}
	w.ready.Store(false)
	w.open.Store(at.UnixNano())
	return rt
}

// A trip is the content of a closed window.
type trip struct {
	n, drops int
	sumRTT   time.Duration
	sumSq    uint64 // microseconds²
	maxIn    int
	maxRTT   time.Duration
	sumIn    int           // in-flight counts at grant of the timed calls
	dropRTT  time.Duration // summed RTTs of the drops
	opened   time.Time     // when the window opened
	at       time.Time
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
	variance = max(float64(r.sumSq)-n*mean*mean, 0) / (n - 1)
	return mean, variance, true
}
