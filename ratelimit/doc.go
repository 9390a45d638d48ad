// Package ratelimit limits the rate of requests: how many a second, with
// bursts. It complements package limiter, which limits how many run at
// once; a server usually wants both, the rate to share capacity fairly and
// the concurrency to protect itself when the capacity drops.
//
// A Bucket is one token bucket for a whole service or method: it admits a
// burst of up to burst requests, then rate requests per second. Allow and
// Decide answer at once; Wait queues callers first-in first-out until
// their token comes, and a caller whose context ends leaves without one.
//
// A Keyed gives each key (a client, a peer address, a tenant) its own
// rate and burst. It uses the generic cell rate algorithm (GCRA) rather
// than a bucket per key because GCRA keeps one number per key, exact to
// the nanosecond, and a key with its whole burst back holds no
// information at all: Cleanup can forget it without changing any
// decision, so memory follows the keys active lately, and WithMaxKeys
// bounds it against floods of made-up keys.
//
// Both tell a refused caller when to come back (Decision.RetryAfter), the
// value of a retry-after or grpc-retry-pushback-ms header, and both take a
// request back with Refund when a later check turns it away. Package
// interceptor builds gRPC rate limits on them; docs/design.md explains the
// choices.
package ratelimit
