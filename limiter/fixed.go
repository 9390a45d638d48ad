package limiter

import "fmt"

// Fixed is an Algorithm whose limit never changes: a plain semaphore with
// the Limiter's queue, metrics and debt handling around it.
type Fixed struct{ n int }

// NewFixed returns a Fixed limit of n, which must be in [1, MaxLimit].
func NewFixed(n int) (*Fixed, error) {
	if n < 1 || n > MaxLimit {
		return nil, &FieldError{"Fixed limit", n, fmt.Sprintf("in [1, %d]", MaxLimit)}
	}
	return &Fixed{n: n}, nil
}

// Limit implements Algorithm.
func (f *Fixed) Limit() int { return f.n }

// Update implements Algorithm; it ignores the sample.
func (f *Fixed) Update(Sample) int { return f.n }

func (f *Fixed) String() string { return fmt.Sprintf("Fixed(%d)", f.n) }
