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
type Limiter struct {
	Rate    *ratelimit.Bucket // the rate of all calls; nil for none
	Callers *ratelimit.Keyed  // each caller's quota; nil for none
	Key     callerkey.Func    // names a call's caller for Callers
}

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
			return fmt.Errorf("caller quota %v exceeded, retry after %v", l.Callers, d.RetryAfter)
		}
		charged = err == nil
	}
	if l.Rate != nil {
		if d := l.Rate.Decide(); !d.Allowed {
			if charged {
				l.Callers.Refund(key)
			}
			return fmt.Errorf("rate limit %v exceeded, retry after %v", l.Rate, d.RetryAfter)
		}
	}
	return nil
}
