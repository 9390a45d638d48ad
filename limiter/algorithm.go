package limiter

// An Algorithm decides the concurrency limit from the samples of finished
// calls. AIMD is the default; Vegas and Gradient2 follow latency instead of
// drops; a fixed limit never changes. Their configurations make them (see
// AlgorithmConfig).
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

// An AlgorithmConfig makes a fresh Algorithm each time New is called:
// algorithms keep state, so each Limiter needs its own. AIMDConfig,
// VegasConfig, Gradient2Config and FixedConfig are the ones this package
// provides; a type of your own makes a custom Algorithm.
type AlgorithmConfig interface {
	New() (Algorithm, error)
}

// algorithm returns a, made with err, as an Algorithm: nil with an error,
// never a nil pointer in a non-nil interface.
func algorithm[A Algorithm](a A, err error) (Algorithm, error) {
	if err != nil {
		return nil, err
	}
	return a, nil
}
