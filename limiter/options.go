package limiter

// An Option configures a Limiter built by New.
type Option func(*config)

type config struct {
	alg   Algorithm
	queue Queue
}

// WithAlgorithm sets the algorithm that adapts the limit. The default is an
// AIMD with the defaults of AIMDConfig. An Algorithm instance keeps state:
// give each Limiter its own.
func WithAlgorithm(a Algorithm) Option {
	return func(c *config) { c.alg = a }
}

// WithQueue lets callers of Acquire wait for a permit, within the bound q
// sets. The default is the zero Queue: no one waits.
func WithQueue(q Queue) Option {
	return func(c *config) { c.queue = q }
}
