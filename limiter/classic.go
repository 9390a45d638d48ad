package limiter

import (
	"sync"
	"sync/atomic"
)

// classic is AIMD with an explicit Timeout or PerCall: a drop multiplies
// the limit by BackoffRatio, and a success that found at least half the
// limit in use adds one. Without PerCall the rule runs once per round trip
// of at least minTripSamples calls, and a round trip with some drops backs
// off by their share of BackoffRatio (as DCTCP does with marked packets),
// so that a trickle of refusals that are not overload costs little.
type classic struct {
	cfg     AIMDConfig
	current atomic.Int64
	win     window

	mu    sync.Mutex
	limit float64
}

func newClassic(c AIMDConfig) *classic {
	a := &classic{cfg: c, limit: float64(c.InitialLimit)}
	a.current.Store(int64(c.InitialLimit))
	return a
}

func (a *classic) Limit() int { return int(a.current.Load()) }

func (a *classic) Update(s Sample) int {
	if s.Outcome == Ignored {
		return a.Limit()
	}
	if a.cfg.Timeout > 0 && s.Outcome == Success && s.RTT > a.cfg.Timeout {
		s.Outcome = Dropped
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cfg.PerCall || s.RTT < 0 {
		// Untimed calls (streams) outside PerCall add a round trip's one
		// step per limit's worth of successes.
		step := 1.0
		if !a.cfg.PerCall {
			step = 1 / a.limit
		}
		a.applyLocked(s.Outcome == Dropped, 1, s.Inflight, step)
	} else if a.win.add(s, minTripSamples) {
		rt := a.win.close(s.At)
		a.applyLocked(rt.drops > 0, float64(rt.drops)/float64(rt.n), rt.maxIn, 1)
	}
	return a.Limit()
}

// applyLocked applies the rule to a call or a round trip: dropped, with
// share of its calls dropped, the most calls in flight seen.
func (a *classic) applyLocked(dropped bool, share float64, inflight int, step float64) {
	if dropped && share >= 1 {
		a.limit *= a.cfg.BackoffRatio
	} else {
		if dropped {
			a.limit *= 1 - share*(1-a.cfg.BackoffRatio)
		}
		if float64(2*inflight) >= a.limit {
			a.limit += step
		}
	}
	a.limit = min(max(a.limit, float64(a.cfg.MinLimit)), float64(a.cfg.MaxLimit))
	a.current.Store(int64(a.limit))
}
