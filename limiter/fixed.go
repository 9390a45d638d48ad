package limiter

import (
	"fmt"

	"github.com/sluice-go/sluice/internal/fielderr"
)

// FixedConfig configures a limit that never changes: a plain semaphore
// with the Limiter's queue, metrics and debt handling around it.
type FixedConfig struct {
	Limit int // in [1, MaxLimit]
}

// New returns a fixed limit of c.Limit, or an error if it is out of range.
func (c FixedConfig) New() (Algorithm, error) {
	return algorithm(newFixed(c.Limit))
}

// fixed is the Algorithm a FixedConfig makes.
type fixed struct{ n int }

func newFixed(n int) (*fixed, error) {
	if n < 1 || n > MaxLimit {
		return nil, fielderr.New("FixedConfig.Limit", n, fmt.Sprintf("in [1, %d]", MaxLimit))
	}
	return &fixed{n: n}, nil
}

func (f *fixed) Limit() int { return f.n }

// Update ignores the sample.
func (f *fixed) Update(Sample) int { return f.n }

func (f *fixed) String() string { return fmt.Sprintf("Fixed(%d)", f.n) }
