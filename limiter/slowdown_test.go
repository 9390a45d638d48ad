package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/limitload"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/limiter"
)

// stepped is a backend whose calls take the mean service time it is set
// to, constant or exponential: a downstream that slows down while its
// workers stay.
type stepped struct {
	backend.Backend
	service atomic.Int64 // ns

	mu  sync.Mutex
	rng *rand.Rand // exponential times; nil for constant ones
}

func (b *stepped) Do(ctx context.Context) error {
	d := time.Duration(b.service.Load())
	if b.rng != nil {
		b.mu.Lock()
		d = max(time.Duration(float64(d)*b.rng.ExpFloat64()), time.Microsecond)
		b.mu.Unlock()
	}
	return b.DoFor(ctx, d)
}

// TestServiceSlowsDown: the downstream's calls start taking twice as
// long, its workers unchanged. Every round trip after that reads late
// against the b measured before, and Little's law puts c at half the calls
// in flight whatever the limit, so the limit falls until a probe measures
// the slower b. That probe reads later than b by far more than b's noise:
// averaged with the old b, it left b still late, and the limit sat at its
// floor until b was 30 s old (C = 4: 24 % of ideal; C = 64: 65 %).
func TestServiceSlowsDown(t *testing.T) {
	for _, tc := range []struct {
		kind        string
		c           int
		s           time.Duration
		exponential bool
		maxP99      float64 // in service times
	}{
		{"fifo", 16, 20 * time.Millisecond, false, 2.5},
		{"ps", 16, 20 * time.Millisecond, false, 2.5},
		{"fifo", 4, 5 * time.Millisecond, false, 2.5},
		{"ps", 64, 100 * time.Millisecond, false, 2.5},
		// Exponential times have a p99 of 4.6 service times on their own.
		{"fifo", 16, 20 * time.Millisecond, true, 6},
		{"ps", 64, 10 * time.Millisecond, true, 7.25},
	} {
		if (testing.Short() || limiter.RaceEnabled) && tc.c*int(time.Second/tc.s) > 2000 {
			continue // make test runs the large ones without -race
		}
		kind, c, s := tc.kind, tc.c, tc.s
		name := fmt.Sprintf("%s/C=%d/S=%v", kind, c, s)
		if tc.exponential {
			name += "/exponential"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inner, err := backend.New(kind, c, s, backend.Constant, 1)
				require.NoError(t, err)
				be := &stepped{Backend: inner}
				if tc.exponential {
					be.rng = rand.New(rand.NewPCG(1, 2))
				}
				be.service.Store(int64(s))
				lim, err := limiter.New()
				require.NoError(t, err)

				rate := 2 * float64(c) / s.Seconds() // 2× before the slowdown, 4× after it
				phase := func(name string, service time.Duration) loadgen.Phase {
					return loadgen.Phase{Name: name, Duration: 8 * time.Second, Rate: rate,
						Start: func() { be.service.Store(int64(service)) }}
				}
				phases := []loadgen.Phase{phase("2x", s), phase("calls twice as slow", 2*s)}
				rep, err := loadgen.Run(context.Background(), loadgen.Config{
					Phases:   phases,
					Deadline: 20 * s,
					Seed:     1,
					Call:     func(ctx context.Context) error { return limitload.Call(ctx, lim, be) },
					Classify: limitload.Classify,
				})
				require.NoError(t, err)
				assert.Zero(t, lim.Inflight(), "in flight after the run")

				for i, service := range []time.Duration{s, 2 * s} {
					p := rep.Phase(i, 2*time.Second)
					goodput := p.Goodput / min(p.Offered, float64(c)/service.Seconds())
					p99 := float64(p.P99) / float64(service)
					t.Logf("%-20s goodput %5.1f%% of ideal, p99 %.2f service times", phases[i].Name, 100*goodput, p99)
					assert.GreaterOrEqual(t, goodput, 0.95, fmt.Sprintf("%s: goodput / ideal", phases[i].Name))
					assert.LessOrEqual(t, p99, tc.maxP99, fmt.Sprintf("%s: p99 in service times", phases[i].Name))
				}
			})
		})
	}
}
