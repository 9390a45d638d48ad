package limiter

import (
	"fmt"
	"sync"
)

// WindowConfig configures Windowed. The zero value selects the defaults.
type WindowConfig struct {
	// MinSamples is the fewest samples a window needs before it can
	// close. Default 10.
	MinSamples int
}

// DefaultWindowMinSamples is the default WindowConfig.MinSamples.
const DefaultWindowMinSamples = 10

// Windowed feeds an Algorithm one aggregate sample per round trip instead
// of one per call, in the manner of Netflix concurrency-limits'
// WindowedLimit. AIMD windows its samples by itself; Windowed is for
// Vegas, Gradient2 or an Algorithm of your own.
//
// A window opens, collects samples, and closes once a call that started
// after the window opened has returned and at least MinSamples samples
// are in. The window then reaches the algorithm as one sample: Dropped if
// any of its calls was dropped, with the mean RTT of its successful calls
// and the largest in-flight count seen. Ignored samples are not counted.
type Windowed struct {
	alg        Algorithm
	minSamples int

	mu  sync.Mutex
	win window
}

// NewWindowed wraps alg in a sampling window.
func NewWindowed(alg Algorithm, c WindowConfig) (*Windowed, error) {
	if alg == nil {
		return nil, &ConfigError{"Windowed algorithm", nil, "non-nil"}
	}
	if c.MinSamples < 0 {
		return nil, &ConfigError{"WindowConfig.MinSamples", c.MinSamples, ">= 1, or 0 for the default"}
	}
	if c.MinSamples == 0 {
		c.MinSamples = DefaultWindowMinSamples
	}
	return &Windowed{alg: alg, minSamples: c.MinSamples}, nil
}

// Limit implements Algorithm.
func (w *Windowed) Limit() int { return w.alg.Limit() }

// Unwrap returns the algorithm w feeds.
func (w *Windowed) Unwrap() Algorithm { return w.alg }

// Update implements Algorithm.
func (w *Windowed) Update(s Sample) int {
	if s.Outcome == Ignored {
		return w.alg.Limit()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.RTT < 0 {
		// Untimed calls have no latency to aggregate; pass them through.
		return w.alg.Update(s)
	}
	if !w.win.add(s, w.minSamples) {
		return w.alg.Limit()
	}
	// The inner update runs under w.mu so that windows reach the
	// algorithm in the order they closed.
	return w.alg.Update(w.win.close(s.At).sample())
}

func (w *Windowed) String() string { return fmt.Sprintf("Windowed(%v)", w.alg) }
