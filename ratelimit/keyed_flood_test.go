package ratelimit

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeyedFloodDoesNotLockOutNewCallers is the attack on a full key
// table: an attacker spends one request on each of more distinct keys than
// the table holds, all of them still counted; a legitimate caller seen for
// the first time must still be admitted.
func TestKeyedFloodDoesNotLockOutNewCallers(t *testing.T) {
	const maxKeys = 1000
	g, clk := newStepGCRA(t, 1, 5, WithMaxKeys(maxKeys))
	for i := range 10 * maxKeys {
		allow(t, g, fmt.Sprintf("attacker-%d", i))
	}
	clk.Step(time.Millisecond)
	for i := range 100 {
		d := allow(t, g, fmt.Sprintf("legit-%d", i))
		assert.True(t, d.Allowed, "new caller %d refused: %+v", i, d)
	}
	assert.LessOrEqual(t, g.Len(), maxKeys+gcraShards, "the bound holds")
	assertConsistent(t, g)
}

// TestKeyedEvictionPrefersLightKeys: a full table forgets the keys
// that spent one request before a key that spent its whole burst.
func TestKeyedEvictionPrefersLightKeys(t *testing.T) {
	g, clk := newStepGCRA(t, 1, 10, WithMaxKeys(2*gcraShards)) // two keys per shard
	for range 10 {
		require.True(t, allow(t, g, "heavy").Allowed)
	}
	for i := range 1000 {
		require.True(t, allow(t, g, fmt.Sprintf("light-%d", i)).Allowed)
	}
	clk.Step(time.Millisecond)
	d := allow(t, g, "heavy")
	assert.False(t, d.Allowed, "the key that spent its burst is still remembered: %+v", d)
}

// TestKeyedMemoryOfLongKeys measures the heap held by 100,000 callers
// named by 1 KiB keys: keys are stored hashed, so their length costs
// nothing.
func TestKeyedMemoryOfLongKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 100,000 keys")
	}
	const n = 100_000
	pad := strings.Repeat("x", 1000)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	g, _ := newStepGCRA(t, 1, 1, WithMaxKeys(2*n)) // room for all: none is evicted
	key := make([]byte, 0, 1024)
	for i := range n {
		key = fmt.Appendf(key[:0], "%s-%d", pad, i)
		_, err := g.Allow(string(key))
		require.NoError(t, err)
	}
	after := heap()
	runtime.KeepAlive(g)
	held := int64(after) - int64(before)
	t.Logf("%d keys hold %.1f MiB", n, float64(held)/(1<<20))
	assert.Less(t, held, int64(16<<20))
	assert.Equal(t, n, g.Len())
}

func TestRefund(t *testing.T) {
	t.Run("Keyed", func(t *testing.T) {
		g, clk := newStepGCRA(t, 1, 2)
		require.True(t, allow(t, g, "a").Allowed)
		require.True(t, allow(t, g, "a").Allowed)
		require.False(t, allow(t, g, "a").Allowed)
		g.Refund("a")
		assert.Equal(t, Decision{Allowed: true}, allow(t, g, "a"), "the refunded request is back")
		g.Refund("a")
		g.Refund("a")
		g.Refund("a") // more than was taken: still no more than the burst
		assert.Equal(t, Decision{Allowed: true, Remaining: 1}, allow(t, g, "a"))
		assert.Equal(t, Decision{Allowed: true, Remaining: 0}, allow(t, g, "a"))
		g.Refund("unknown") // nothing to give back
		g.Refund("")
		clk.Step(time.Second)
		assert.Equal(t, Decision{Allowed: true, Remaining: 0}, allow(t, g, "a"))
		assertConsistent(t, g)
	})
}
