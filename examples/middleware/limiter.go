package middleware

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/ratelimit"
)

// Limiter is go-grpc-middleware's ratelimit.Limiter over sluice's rate
// limits. A call is charged to its caller's quota first, so that a caller
// over it spends nothing of the shared rate; a token the quota took is
// given back when the shared rate turns the call away.
//
// Rate is one budget for all calls: every call is charged to the same key,
// and a GCRA of one key is a token bucket.
type Limiter struct {
	Rate    *ratelimit.Keyed // the rate of all calls; nil for none
	Callers *ratelimit.Keyed // each caller's quota; nil for none
	Key     callerkey.Func   // names a call's caller for Callers
}

// allCalls is the key every call is charged to in Limiter.Rate.
const allCalls = "all"

// Limit admits or rejects one call.
func (l Limiter) Limit(ctx context.Context) error {
	var key string
	charged := false
	if l.Callers != nil {
		method, _ := grpc.Method(ctx)
		key = l.Key(ctx, method)
		// An error is no decision: the call goes on, uncharged.
		d, err := l.Callers.Allow(key)
		if err == nil && !d.Allowed {
			return fmt.Errorf("caller quota exceeded, retry after %v", d.RetryAfter)
		}
		charged = err == nil
	}
	if l.Rate != nil {
		if d, err := l.Rate.Allow(allCalls); err == nil && !d.Allowed {
			if charged {
				l.Callers.Refund(key)
			}
			return fmt.Errorf("rate limit exceeded, retry after %v", d.RetryAfter)
		}
	}
	return nil
}
