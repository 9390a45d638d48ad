package limiter

// An Option configures a Limiter built by New.
type Option func(*config)

type config struct {
	alg   Algorithm
	queue Queue
	lifo  bool

	timeAll bool
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

// WithEveryCallTimed makes the Limiter time every call. By default the
// AIMD times only a random sample of calls that take less than a
// microsecond on average, where two clock reads would cost about as much as
// the call itself, and Token.Release returns 0 for the others. Use it when
// you need each call's RTT from Release or Token.Granted, as the
// interceptors do for their latency metrics.
func WithEveryCallTimed() Option {
	return func(c *config) { c.timeAll = true }
}
