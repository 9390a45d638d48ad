package limiter

// An Algorithm decides the concurrency limit from the samples of finished
// calls. AIMD is the default; Vegas and Gradient2 follow latency instead of
// drops; Fixed never changes.
//
// Implementations must be safe for concurrent use: a Limiter calls Update
// from whichever goroutine releases a Token, without a lock of its own, so
// that an algorithm can keep its hot path lock-free. Given the same
// sequence of samples an implementation must produce the same limits.
type Algorithm interface {
	// Update records one sample and returns the resulting limit, which
	// must be at least 1.
	Update(Sample) int

	// Limit reports the current limit without changing it.
	Limit() int
}
