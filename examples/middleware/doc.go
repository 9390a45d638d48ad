// Package middleware plugs sluice's rate limits into go-grpc-middleware's
// ratelimit interceptors: Limiter gives two ratelimit.Keyed, one rate for
// everyone and a quota per caller, the method
// Limit(ctx) error that go-grpc-middleware's Limiter interface asks for.
package middleware
