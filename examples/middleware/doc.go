// Package middleware shows sluice's rate limits plugged into
// go-grpc-middleware's ratelimit interceptors: interceptor.RateLimiter has
// the method Limit(ctx) error that its Limiter interface asks for.
package middleware
