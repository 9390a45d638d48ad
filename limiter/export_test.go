package limiter

import "time"

// RaceEnabled lets the external tests (package limiter_test) shorten their
// simulations under the race detector as the internal ones do.
const RaceEnabled = raceEnabled

// ProbeState reads the probes the default algorithm of l has made and
// the no-load RTT it learned.
func ProbeState(l *Limiter) (probes int, baseline time.Duration) {
	a := l.alg.(*aimd).little
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.probes, a.b
}
