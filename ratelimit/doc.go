// Package ratelimit gives each caller a quota of its own: how many
// requests a second, with bursts. It complements package limiter, which
// limits how many calls run at once: the concurrency limit protects the
// server when its capacity drops, a quota keeps one caller from spending
// what the others share.
//
// A Keyed gives each key (a client, a peer address, a tenant) its own
// rate and burst. It uses the generic cell rate algorithm (GCRA) rather
// than a token bucket per key because GCRA keeps one number per key, exact
// to the nanosecond, and a key with its whole burst back holds no
// information at all: Cleanup can forget it without changing any
// decision, so memory follows the keys active lately, and WithMaxKeys
// bounds it against floods of made-up keys.
//
// A refused caller is told when to come back (Decision.RetryAfter), the
// value of a retry-after or grpc-retry-pushback-ms header, and a request
// a later check turns away is given back with Refund. A Keyed is a
// CallerLimiter of package interceptor (WithCallerLimiter); so is the
// fleet-wide limiter of package redis. docs/design.md explains the choices.
package ratelimit
