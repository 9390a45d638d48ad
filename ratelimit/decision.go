package ratelimit

import "time"

// A Decision is a rate limiter's answer to one request, with what a caller
// needs to tell its client: when to come back, or how much is left.
type Decision struct {
	// Allowed reports whether the request may proceed. The limiter has
	// already counted it.
	Allowed bool

	// RetryAfter is 0 when the request is allowed. Otherwise it is how
	// long, to the nanosecond and by the limiter's clock, until the same
	// request would be allowed as the limiter stands: a client that
	// retries after RetryAfter is admitted, unless others spent the limit
	// meanwhile or the rate was lowered. It is what belongs in a
	// retry-after or grpc-retry-pushback-ms header.
	RetryAfter time.Duration

	// Remaining is how many more requests would be allowed at once, right
	// after this one. 0 when the request is denied.
	Remaining int
}
