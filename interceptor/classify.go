package interceptor

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/limiter"
)

// A Result describes a finished call for a Classifier.
type Result struct {
	// FullMethod is the call's method, "/package.Service/Method".
	FullMethod string
	// Err is what the handler (server) or the invoker (client) returned;
	// nil for success.
	Err error
	// Late reports that the call's deadline had passed when it finished
	// (or the caller cancelled it just before): whatever the handler
	// returned, the caller no longer waited for it. On a server, Late is
	// set only when the server's own time caused it (see Server); other
	// overruns are Ignored before any Classifier sees them.
	Late bool
	// Stream reports a streaming call.
	Stream bool
}

// A Classifier decides what a finished call tells the limiter: Success
// (room to spare), Dropped (overload: back off) or Ignored (no signal).
// It is called once per admitted call and must be fast and safe for
// concurrent use. A Classifier that panics costs no permit: the call's
// permit is released (as Ignored) and the panic goes on, like a handler's,
// to a recovery interceptor installed outside sluice or to the caller of a
// client call. (A client stream's Classifier runs where the stream ends,
// possibly in a goroutine of gRPC's, where a panic ends the program.)
type Classifier func(Result) limiter.Outcome

// DefaultClassifier classifies calls as sluice's design prescribes:
//
//	finished after its deadline         Dropped
//	OK                                  Success
//	RESOURCE_EXHAUSTED                  Dropped
//	DEADLINE_EXCEEDED                   Dropped
//	CANCELED (the caller went away)     Ignored
//	any other code                      Success
//
// Other codes are errors of the request, not of capacity: a server that
// answers NOT_FOUND quickly had room to answer. A handler that returns a
// bare context error is classified by the matching code.
func DefaultClassifier(r Result) limiter.Outcome {
	if r.Late {
		return limiter.Dropped
	}
	if r.Err == nil {
		return limiter.Success
	}
	switch code(r.Err) {
	case codes.ResourceExhausted, codes.DeadlineExceeded:
		return limiter.Dropped
	case codes.Canceled:
		return limiter.Ignored
	}
	return limiter.Success
}

// code is status.Code that also understands the context errors a handler
// may return unconverted, as grpc-go itself does when it sends them.
func code(err error) codes.Code {
	c := status.Code(err)
	if c == codes.Unknown {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return codes.DeadlineExceeded
		case errors.Is(err, context.Canceled):
			return codes.Canceled
		}
	}
	return c
}

// lateMargin is how close to its deadline a cancellation must come to
// count as the deadline passing. A gRPC server usually learns that a
// client's deadline expired as a cancellation (the client resets the
// stream) a moment before its own timer, set from the grpc-timeout header,
// fires; the two differ by the network's one-way delay.
const lateMargin = 10 * time.Millisecond

// late reports whether ctx ended because its deadline passed, or was
// cancelled within lateMargin of it. A live context costs no clock read.
func late(ctx context.Context) bool {
	switch err := ctx.Err(); {
	case err == nil:
		return false
	case errors.Is(err, context.DeadlineExceeded):
		return true
	}
	d, ok := ctx.Deadline()
	return ok && time.Until(d) <= lateMargin
}

// LimiterState is a snapshot of one limiter, given to a PushbackFunc.
type LimiterState struct {
	// Name identifies the limiter, as in the sluice.limiter attribute.
	Name string
	// Limit, Inflight and Queued are the limiter's live figures.
	Limit, Inflight, Queued int
	// RTT is a moving average of the durations of the calls the limiter
	// admitted recently; 0 before the first one finishes.
	RTT time.Duration
	// OverrideUntil is when the operator's override (SetOverride) ends;
	// zero when the limiter adapts freely.
	OverrideUntil time.Time
	// DryRun reports a limiter that records its decisions and enforces
	// none (Limit.DryRun, WithDryRun, SetDryRun).
	DryRun bool
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
// Only a Server calls it, once per rejection, with no permit held: a
// PushbackFunc that panics fails the rejected call (the panic goes on to
// a recovery interceptor outside sluice) and costs no permit.
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
	MinPushback = 5 * time.Millisecond
	MaxPushback = 10 * time.Second
)

// DefaultPushback asks the caller to come back after about one call
// duration (the limiter's RTT average), when the calls in flight now have
// made room, within [MinPushback, MaxPushback]. Before any call has
// finished it answers 100ms.
func DefaultPushback(s LimiterState) time.Duration {
	if s.RTT <= 0 {
		return 100 * time.Millisecond
	}
	return min(max(s.RTT, MinPushback), MaxPushback)
}

// PushbackKey is the trailer gRPC clients read for the server's pushback,
// in whole milliseconds (gRFC A6).
const PushbackKey = "grpc-retry-pushback-ms"

// DefaultMaxPushback is the longest server pushback a Client honours unless
// WithMaxPushback says otherwise.
const DefaultMaxPushback = 2 * time.Second

// maxPushbackMillis is the largest pushback the trailer can carry: gRFC
// A6 defines it as a signed 32-bit count of milliseconds.
const maxPushbackMillis = math.MaxInt32

// formatPushback renders d for the PushbackKey trailer: whole
// milliseconds, clamped to what an int32 holds, or "-1" for a negative d.
func formatPushback(d time.Duration) string {
	if d < 0 {
		return "-1"
	}
	return strconv.FormatInt(min(d.Milliseconds(), maxPushbackMillis), 10)
}

// ParsePushback reads a PushbackKey trailer value, a decimal integer of
// milliseconds that fits an int32 (gRFC A6). A negative value asks the
// caller not to retry: ParsePushback returns DoNotRetry for it. Anything
// else (empty, fractional, with a unit, out of the int32 range) reports
// ok = false: a client must then not act on the server's word, and falls
// back to its ordinary backoff.
func ParsePushback(v string) (d time.Duration, ok bool) {
	ms, err := strconv.ParseInt(v, 10, 32)
	switch {
	case err != nil:
		return 0, false
	case ms < 0:
		return DoNotRetry, true
	}
	return time.Duration(ms) * time.Millisecond, true
}
