// Package limiter implements adaptive concurrency limits: a permit pool
// whose size an algorithm adjusts, call by call, from the outcome and
// round-trip time of the calls it admits.
//
// A Limiter admits at most Limit() calls at once. Each admitted call holds
// a Token and releases it with its Outcome when it ends:
//
//	tok, ok := l.TryAcquire()
//	if !ok {
//		return errOverloaded // shed the call
//	}
//	err := doWork(ctx)
//	tok.Release(limiter.Success) // or Dropped on overload, Ignored on cancel
//
// The algorithm turns those outcomes into the limit. AIMD, the default,
// backs off multiplicatively when calls are dropped or slow down and grows
// additively while they succeed; it detects "slow" by itself, by comparing
// each round trip's RTT with the RTT the downstream shows without a queue,
// so it needs no tuning for services whose calls take 1 ms or 1 s. Vegas
// and Gradient2 follow latency more finely; Fixed is a plain semaphore.
//
// Lowering the limit never revokes a permit: the excess becomes a debt that
// the next releases pay, so in-flight converges to the new limit. Callers
// may wait for a permit with Acquire, in a queue bounded by a fixed size or
// by Little's law (see Queue); a full queue rejects at once with
// ErrLimitExceeded, which is what an overloaded service should do.
//
// The package imports nothing of gRPC; package interceptor builds gRPC
// interceptors on it. Rate limits (requests per second, with bursts) are
// in package ratelimit.
package limiter
