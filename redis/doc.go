// Package redis keeps per-caller quotas in Redis, so that a quota holds
// for a whole fleet of replicas rather than for each one.
//
// With a ratelimit.Keyed as interceptor.WithCallerLimiter's quota, each
// replica counts its callers on its own: behind a load balancer that spreads a caller over N replicas,
// a quota of 100 calls per second becomes N × 100. A Limiter counts them
// in one Redis instead, with the algorithm of ratelimit.Keyed, one
// atomic script per decision on Redis's own clock:
//
//	rdb := goredis.NewClient(&goredis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
//	quota, err := redis.New(rdb, 100, 200) // 100 calls/s per caller, bursts of 200
//	...
//	srv, err := interceptor.NewServer(interceptor.WithCallerLimiter(callerkey.PeerIP, quota))
//
// Redis is on the path of the calls: each decision is bounded by
// WithTimeout, and when Redis is slow or down a failure policy decides
// (WithFailurePolicy: a Fallback by default, FailOpen, FailClosed) until Redis
// answers again. The decisions metric counts who decided.
//
// A caller over its quota is not on Redis's path: the Limiter remembers
// Redis's denial in this process until Redis would admit the caller
// again, and answers its calls meanwhile with the time left, so a flood
// from one caller costs Redis about one round trip per interval of its
// quota, however many calls it sends, and cannot slow Redis down for
// everyone else. Refunds (calls admitted, then turned away by a later
// check such as the concurrency limit) are held to the quota's own rate
// and burst for the same reason. This memory is bounded by
// WithMaxLocalKeys, whatever the callers' keys.
package redis
