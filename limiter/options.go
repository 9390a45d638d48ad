package limiter

// An Option configures a Limiter built by New.
type Option func(*config)

type config struct {
	alg      Algorithm
	queue    Queue
	lifo     bool
	onChange func(old, new int)
}

// WithAlgorithm sets the algorithm that adapts the limit. The default is an
// AIMD with the defaults of AIMDConfig. An Algorithm instance keeps state:
// give each Limiter its own.
func WithAlgorithm(a Algorithm) Option {
	return func(c *config) { c.alg = a }
}

// WithQueue lets callers of Acquire wait for a permit, within the bound q
// sets. The default is NoQueue.
func WithQueue(q Queue) Option {
	return func(c *config) { c.queue = q }
}

// WithLIFO serves waiters newest-first. Under sustained overload LIFO
// gives fresh callers, whose deadlines are furthest away, the freed
// permits, at the price of fairness; FIFO, the default, is fair.
func WithLIFO() Option {
	return func(c *config) { c.lifo = true }
}

// WithLimitObserver registers f to be called with the old and new limit
// every time the limit changes. f runs while the Limiter holds its internal
// lock, in the order the changes happen: it must be fast and must not call
// back into the Limiter.
func WithLimitObserver(f func(old, new int)) Option {
	return func(c *config) { c.onChange = f }
}
