package ratelimit

import "time"

// A clock tells a rate limiter the time. Rate limits are decisions about
// time, so tests substitute a clock they control to make those decisions
// reproducible: stepping it forward, back, or making it fail.
//
// Now may fail, as a clock read from another process or from hardware can;
// a limiter then reports the error instead of deciding on a wrong time.
// Implementations must be safe for concurrent use.
type clock interface {
	Now() (time.Time, error)
}

// systemClock is the clock of the running process. It never fails, and the
// times it returns carry the monotonic reading, so a change of the wall
// clock (NTP, a manual setting) neither grants nor withholds requests.
// Limiters recognise it and read the monotonic clock directly, at half the
// cost of a full time.Now.
type systemClock struct{}

// Now returns time.Now() and a nil error.
func (systemClock) Now() (time.Time, error) { return time.Now(), nil }

// maxClockOffset bounds the readings of a clock, as nanoseconds from the
// limiter's origin, so that adding a burst window to a reading cannot
// overflow an int64: 2^62 ns is about 146 years.
const maxClockOffset = 1 << 62

// offset returns t as nanoseconds since origin, clamped to ±maxClockOffset.
// time.Time.Sub already saturates; the clamp leaves headroom for sums.
func offset(t, origin time.Time) int64 {
	d := int64(t.Sub(origin))
	return min(max(d, -maxClockOffset), maxClockOffset)
}
