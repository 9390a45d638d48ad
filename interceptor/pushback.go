package interceptor

import (
	"math"
	"strconv"
	"time"
)

// LimiterState is a snapshot of one limiter, given to a PushbackFunc.
type LimiterState struct {
	// Name identifies the limiter, as in the sluice.limiter attribute.
	Name string
	// Limit, Inflight and Queued are the limiter's live figures.
	Limit, Inflight, Queued int
	// RTT is a moving average of the durations of the unary calls the
	// limiter admitted recently that answered OK (see Classifier); 0
	// before the first one finishes.
	RTT time.Duration
	// OverrideUntil is when the operator's override (SetOverride) ends;
	// zero when the limiter adapts freely.
	OverrideUntil time.Time
	// DryRun reports a limiter that records its decisions and enforces
	// none (Limit.DryRun, WithDryRun, SetDryRun).
	DryRun bool
	// Admitted and Rejected count the calls the limiter decided since it
	// was created, as the sluice.requests counter does: a call counts as
	// admitted when it returns its permit (so not while in flight), and
	// as rejected for every reason there (limit, queue deadline or
	// cancellation, rate, caller rate, priority). A limiter in a dry run
	// counts the calls it would have admitted as admitted, and the calls
	// it would have rejected not at all: they go on without a permit, and
	// appear only in sluice.requests, with sluice.dry_run=true, and in the
	// log. The
	// counts only grow; a limiter that Reload rebuilds (see Reload) starts
	// again from 0. The rate of calls is the difference of two snapshots.
	Admitted, Rejected uint64
}

// A PushbackFunc tells a rejected caller when to try again, in the
// grpc-retry-pushback-ms trailer of a server's rejection (gRFC A6):
//
//	d >= 0      retry after d, sent in whole milliseconds, at most
//	            math.MaxInt32 of them (about 24.8 days)
//	DoNotRetry  (or any other negative d but NoPushback) "-1": do not
//	            retry this call
//	NoPushback  no trailer: the caller's retry policy applies its
//	            ordinary exponential backoff
//
// Only a Server calls it, once per rejection, in its interceptors, with no
// permit held: a PushbackFunc that panics fails the rejected call (the
// panic goes on to a recovery interceptor outside sluice) and costs no
// permit. It is not called for the calls WithEarlyRejection's tap rejects,
// whose status grpc-go sends without a trailer.
type PushbackFunc func(LimiterState) time.Duration

// Special PushbackFunc results; see PushbackFunc.
const (
	// DoNotRetry asks the caller not to retry: gRPC's retry policy gives
	// the call up, and a sluice Client holds back (see Client).
	DoNotRetry time.Duration = -1
	// NoPushback sends no trailer, leaving the caller to its ordinary
	// backoff.
	NoPushback time.Duration = math.MinInt64
)

// Bounds of DefaultPushback.
const (
	minPushback = 5 * time.Millisecond
	maxPushback = 10 * time.Second
)

// DefaultPushback asks the caller to come back after about one call
// duration (the limiter's RTT average), when the calls in flight now have
// made room, within [5ms, 10s]. Before any call has
// finished it answers 100ms.
func DefaultPushback(s LimiterState) time.Duration {
	if s.RTT <= 0 {
		return 100 * time.Millisecond
	}
	return min(max(s.RTT, minPushback), maxPushback)
}

// pushbackKey is the trailer gRPC clients read for the server's pushback,
// in whole milliseconds (gRFC A6).
const pushbackKey = "grpc-retry-pushback-ms"

// defaultMaxPushback is the longest server pushback a Client honours unless
// WithMaxPushback says otherwise.
const defaultMaxPushback = 2 * time.Second

// maxPushbackMillis is the largest pushback the trailer can carry: gRFC
// A6 defines it as a signed 32-bit count of milliseconds.
const maxPushbackMillis = math.MaxInt32

// formatPushback renders d for the pushbackKey trailer: whole
// milliseconds, clamped to what an int32 holds, or "-1" for a negative d.
func formatPushback(d time.Duration) string {
	if d < 0 {
		return "-1"
	}
	return strconv.FormatInt(min(d.Milliseconds(), maxPushbackMillis), 10)
}

// parsePushback reads a pushbackKey trailer value, a decimal integer of
// milliseconds that fits an int32 (gRFC A6). A negative value asks the
// caller not to retry: parsePushback returns DoNotRetry for it. Anything
// else (empty, fractional, with a unit, out of the int32 range) reports
// ok = false: a client must then not act on the server's word, and falls
// back to its ordinary backoff.
func parsePushback(v string) (d time.Duration, ok bool) {
	ms, err := strconv.ParseInt(v, 10, 32)
	switch {
	case err != nil:
		return 0, false
	case ms < 0:
		return DoNotRetry, true
	}
	return time.Duration(ms) * time.Millisecond, true
}
