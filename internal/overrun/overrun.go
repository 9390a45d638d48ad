// Package overrun holds a server's rule for a call that ran past its
// deadline. The deadline is the caller's choice, so an overrun is the
// server's doing, and overload, only when the server held the call for
// longer than Factor × the time its calls that succeeded take; a caller
// must not be able to lower a limit every caller shares by choosing
// deadlines no server meets.
package overrun

import (
	"sync/atomic"
	"time"
)

// Factor × a Baseline is how long a server must have held a call for its
// overrun to count as overload.
const Factor = 2

// weight is the share of a new RTT in the moving average, as a divisor.
const weight = 8

// A Baseline is a moving average (weight 1/8) of the RTTs of calls that
// succeeded. Its zero value is ready and knows nothing; it is safe for
// concurrent use. Concurrent updates may overwrite each other: an average
// that skips a sample is still an average.
type Baseline struct {
	ns atomic.Int64
}

// Observe folds the RTT of a call that succeeded into the average.
func (b *Baseline) Observe(rtt time.Duration) {
	old := b.ns.Load()
	if old == 0 {
		b.ns.Store(int64(rtt))
		return
	}
	b.ns.Store(old + (int64(rtt)-old)/weight)
}

// Value returns the average, or 0 before any call succeeded.
func (b *Baseline) Value() time.Duration { return time.Duration(b.ns.Load()) }

// CallersFault reports whether a call the server held for held and that
// overran its deadline did so by the caller's choice: the server has seen
// calls succeed, and held this one no longer than Factor × their average.
// Before any success it reports false: there is nothing to judge by, and
// a fresh server whose downstream is stuck must hear its overruns.
func (b *Baseline) CallersFault(held time.Duration) bool {
	v := b.Value()
	return v > 0 && held <= Factor*v
}

// ServersFault reports whether such a call overran by the server's doing:
// the server has seen calls succeed, and held this one longer than Factor ×
// their average. Before any success it reports false too: the caller's
// rule (CallersFault) and this one judge nothing without a baseline.
func (b *Baseline) ServersFault(held time.Duration) bool {
	v := b.Value()
	return v > 0 && held > Factor*v
}
