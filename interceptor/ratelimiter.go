package interceptor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/ratelimit"
)

// A RateLimiter is sluice's rate limiting on its own, without the
// concurrency limit, for code that expects a limiter with the method
// Limit(ctx) error, such as go-grpc-middleware's interceptors/ratelimit
// (its Limiter interface has exactly that method, so sluice needs no
// import of it):
//
//	rl, err := interceptor.NewRateLimiter(interceptor.RateLimit{PerSecond: 100},
//		interceptor.WithCallerQuota(interceptor.PeerIP, interceptor.RateLimit{PerSecond: 10}))
//	...
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(rl)))
//
// The caller's quota is checked before the shared rate, and a token the
// quota took is given back when the shared rate rejects the call, as in
// WithCallerRateLimit. A RateLimiter is safe for concurrent use.
type RateLimiter struct {
	rate    RateLimit
	bucket  *ratelimit.Bucket // nil: no shared rate
	callers *callerLimit      // nil: no caller quota
}

// A RateLimiterOption configures a RateLimiter.
type RateLimiterOption func(*config)

// WithCallerQuota gives each caller, as named by key, a quota of r of its
// own, with at most 100,000 callers tracked at once.
func WithCallerQuota(key KeyFunc, r RateLimit) RateLimiterOption {
	return WithCallerRateLimit(key, r).applyServer
}

// NewRateLimiter returns a RateLimiter admitting r in all (the zero
// RateLimit: no shared rate), and with WithCallerQuota a quota per caller.
// It reports a RateLimit or a quota out of range, or neither being set.
func NewRateLimiter(r RateLimit, opts ...RateLimiterOption) (*RateLimiter, error) {
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if err := errors.Join(c.errs...); err != nil {
		return nil, err
	}
	bucket, err := newBucket(r)
	if err != nil {
		return nil, fmt.Errorf("interceptor: NewRateLimiter: %w", err)
	}
	callers, err := newCallerLimit(&c)
	if err != nil {
		return nil, err
	}
	if bucket == nil && callers == nil {
		return nil, errors.New("interceptor: NewRateLimiter: no rate and no caller quota: set RateLimit.PerSecond or use WithCallerQuota")
	}
	return &RateLimiter{rate: r, bucket: bucket, callers: callers}, nil
}

// A RateLimitError is the error of a call a RateLimiter turned away.
type RateLimitError struct {
	// What happened: "rate limit 100/s exceeded", "caller rate limit 10/s
	// exceeded".
	What string
	// RetryAfter is how long until the call would be admitted.
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("sluice: %s, retry after %v", e.What, e.RetryAfter)
}

// Limit admits or rejects one call: nil, or a *RateLimitError. The call's
// method, for the caller's KeyFunc, is grpc.Method(ctx).
func (l *RateLimiter) Limit(ctx context.Context) error {
	method := ""
	if l.callers != nil {
		method, _ = grpc.Method(ctx)
	}
	if _, refused, ok := takeRates(ctx, l.callers, method, l.bucket, l.rate); !ok {
		return &RateLimitError{What: refused.what, RetryAfter: refused.after}
	}
	return nil
}
