package limiter

import (
	"strconv"
	"time"
)

// Outcome says what a finished call tells the limiter about capacity.
type Outcome uint8

const (
	// Success means the call completed and showed no sign of overload. A
	// call that failed for its own reasons (NOT_FOUND, INVALID_ARGUMENT)
	// is still a Success here: the server had room to answer.
	Success Outcome = iota

	// Dropped means the call was shed or overran: the downstream returned
	// RESOURCE_EXHAUSTED, the deadline passed, or the round trip exceeded
	// the algorithm's timeout. Algorithms back off on it.
	Dropped

	// Ignored means the call says nothing about capacity, for example
	// because the caller cancelled it or the handler panicked. The permit
	// is returned and the limit is left alone.
	Ignored
)

// String returns the lower-case name of o, as used in metric attributes.
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Dropped:
		return "dropped"
	case Ignored:
		return "ignored"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// A Sample describes one finished call. The Limiter builds it when a
// Token is released and hands it to the Algorithm.
type Sample struct {
	// RTT is the time from the permit being granted to its release. Time
	// spent waiting in the queue is not included, so the queue cannot
	// feed back into latency-based algorithms.
	//
	// RTT is UntimedRTT (negative) for calls released with
	// Token.ReleaseUntimed: algorithms must not read it as a latency.
	RTT time.Duration

	// Inflight is the number of permits held, this one included, right
	// after this call's permit was granted.
	Inflight int

	// Outcome is how the call ended.
	Outcome Outcome

	// At is when the call ended, read from the Limiter's clock. Algorithms
	// that keep time windows use it instead of reading a clock, so that
	// they are deterministic given their samples.
	At time.Time

	// cohort is set when the algorithm counted the call's grant into a
	// cohort it measures (see grantCounter).
	cohort bool
	// full is set when the grant found the limit full, counted against
	// the limit then (see grantCounter).
	full bool
}

// UntimedRTT is the RTT of a Sample whose call's duration is not a latency
// measurement (see Token.ReleaseUntimed).
const UntimedRTT time.Duration = -1
