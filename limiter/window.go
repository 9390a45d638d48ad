package limiter

import (
	"math"
	"time"
)

// window aggregates samples over one round trip. It opens at a point in
// time and is complete once a call that started after that point has
// returned and at least minSamples samples are in. Used by AIMD and by
// Windowed; not safe for concurrent use.
type window struct {
	open   time.Time // zero until the first sample
	n      int       // Success and Dropped samples
	nOK    int       // Success samples
	sumRTT time.Duration
	sumSq  float64 // sum of squared RTTs of successes, in seconds²
	drops  int     // Dropped samples
	maxIn  int
	ready  bool // a call that started after open has returned
}

// add records s, which must not be Ignored, and reports whether the window
// is complete.
func (w *window) add(s Sample, minSamples int) bool {
	if w.open.IsZero() {
		w.open = s.At.Add(-s.RTT)
	}
	w.n++
	if s.Outcome == Dropped {
		w.drops++
	} else {
		w.nOK++
		w.sumRTT += s.RTT
		w.sumSq += s.RTT.Seconds() * s.RTT.Seconds()
	}
	w.maxIn = max(w.maxIn, s.Inflight)
	if !w.ready && s.At.Sub(w.open) >= s.RTT { // started at or after open
		w.ready = true
	}
	return w.ready && w.n >= minSamples
}

// cv returns the coefficient of variation of the successful RTTs, or -1
// with fewer than two of them.
func (w *window) cv() float64 {
	if w.nOK < 2 || w.sumRTT <= 0 {
		return -1
	}
	n := float64(w.nOK)
	mean := w.sumRTT.Seconds() / n
	variance := max(w.sumSq/n-mean*mean, 0)
	return math.Sqrt(variance) / mean
}

// close returns the window as one sample and opens the next window at the
// time the last sample ended:
//
//   - Outcome is Dropped if any sample was dropped, else Success;
//   - RTT is the mean RTT of the successful samples (0 if none);
//   - Inflight is the largest in-flight count seen;
//   - At is when the last sample ended.
func (w *window) close(at time.Time) Sample {
	agg := Sample{Outcome: Success, Inflight: w.maxIn, At: at}
	if w.drops > 0 {
		agg.Outcome = Dropped
	}
	if w.nOK > 0 {
		agg.RTT = w.sumRTT / time.Duration(w.nOK)
	}
	*w = window{open: at}
	return agg
}

// dropFraction is the share of the window's samples that were dropped.
func (w *window) dropFraction() float64 {
	if w.n == 0 {
		return 0
	}
	return float64(w.drops) / float64(w.n)
}
