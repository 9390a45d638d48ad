package interceptor

import (
	"errors"

	"github.com/sluice-go/sluice/callerkey"
)

// WithFairShare shares each limiter fairly among the callers key names,
// so that one heavy caller cannot crowd out the light ones:
//
//	interceptor.WithFairShare(callerkey.PeerIdentity)
//
// While a limiter is full, a caller that has had less than its share of
// it lately (the permits granted divided among the callers active in the
// last second) is admitted ahead of one that has had more: a caller over
// its share must leave a few permits free for the others, and is rejected
// with RESOURCE_EXHAUSTED, reason fair_share in sluice.requests, when it
// would not, while one within its share may go as many permits past the
// limit. A lone caller may use the whole limit, and the limit itself
// adapts as always (limiter.Limiter.TryAcquireFor has the rule). Fair
// share comes after priorities: a call also leaves what its priority
// must leave. A queued limiter queues only callers within their share.
//
// key must name callers by what the server verified (callerkey.PeerIdentity,
// a callerkey.IP, a header a trusted proxy sets): a caller that can choose
// its own name gets one share per name it makes up. Calls key cannot name
// ("") share one share. The callers are kept per limiter as keyed hashes,
// only while they hold permits or held some within the last second, and
// at most a few thousand idle ones: memory is bounded whatever the
// callers. On a client, key reads the outgoing context: a client that
// multiplexes tenants over one connection shares its limits among them.
func WithFairShare(key callerkey.Func) Option {
	return func(c *config) {
		if key == nil {
			c.errs = append(c.errs, errors.New("interceptor: WithFairShare: the callerkey.Func is nil; use callerkey.PeerIdentity, callerkey.PeerIP, a callerkey.IP, callerkey.Metadata or a func of your own"))
			return
		}
		c.fairKey = key
	}
}
