package interceptor

import (
	"context"
	"errors"
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
	// nil for success. A server stream whose handler passed on a failure
	// of RecvMsg or SendMsg is Ignored before any Classifier sees it (see
	// Server).
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
//
// A limit learns only from the server's own work, so what a call teaches
// depends on more than its outcome. The round-trip time of a unary call
// that answered OK is learned by the algorithm (its baseline) and by the
// moving average behind a Server's late rule and pushback; that of a
// Dropped call only by the algorithm, to size the back-off. A Success
// with an error, such as an instant INVALID_ARGUMENT, did none of the
// method's work: it counts for the limit without its time. A stream's
// time is never learned. Calls that say nothing about the server
// are Ignored before any Classifier sees them (see Result.Late, and
// Server for the streams whose messages grpc-go refused).
//
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
// answers NOT_FOUND quickly had room to answer. Such a success grows the
// limit like an OK one, but its round-trip time is not learned: only OK
// answers did the method's real work, and an error that costs
// microseconds would teach that the method is that fast (see Classifier).
// A handler that returns a bare context error is classified by the
// matching code.
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
