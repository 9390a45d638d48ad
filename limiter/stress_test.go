package limiter

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStressAIMD releases timed and untimed calls of the default AIMD from
// many goroutines at once, with every outcome, through Release and
// ReleaseUntimed, while round trips close and probes count grants: every
// permit comes back, and the race detector sees the lock-free paths.
func TestStressAIMD(t *testing.T) {
	a, err := newAIMD(AIMDConfig{InitialLimit: 64, MinLimit: 8})
	require.NoError(t, err)
	l, err := New(WithAlgorithm(a))
	require.NoError(t, err)

	var workers sync.WaitGroup
	for w := range 8 {
		workers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for range 2000 {
				tok, ok := l.TryAcquire()
				if !ok {
					continue
				}
				o := Outcome(rng.IntN(3))
				if rng.IntN(8) == 0 {
					tok.ReleaseUntimed(o)
				} else {
					tok.Release(o)
				}
				assert.False(t, tok.Held())
			}
		})
	}
	workers.Wait()
	assertSettled(t, l)
	assert.GreaterOrEqual(t, l.Limit(), 8)
}
