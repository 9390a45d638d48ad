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
	// returned, the caller no longer waited for it.
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
// client call.
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
}

// A PushbackFunc returns how long a rejected caller should wait before it
// tries again, sent in the grpc-retry-pushback-ms trailer. A negative
// duration sends no trailer, which tells gRPC's retry policy not to retry.
type PushbackFunc func(LimiterState) time.Duration

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

// formatPushback renders d for the PushbackKey trailer.
func formatPushback(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// ParsePushback reads a PushbackKey trailer value. It reports ok = false
// for anything but a non-negative decimal integer of milliseconds that fits
// a time.Duration, the values gRFC A6 defines; a client must then not hold
// back on the server's word.
func ParsePushback(v string) (d time.Duration, ok bool) {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}
