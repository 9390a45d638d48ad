package redis

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/ratelimit"
)

// TestRememberedDenial: a denial remembered answers with the time left
// until Redis would admit the caller, less as time passes, asks Redis
// nothing meanwhile, and the caller passes once that time is up.
func TestRememberedDenial(t *testing.T) {
	s := startRedis(t)
	c, n := countedClient(t, s)
	mopt, decisions := reader(t)
	l, clk := stepLimiter(t, c, 1, 1, mopt)

	require.True(t, allow(t, l, "k").Allowed)
	require.Equal(t, ratelimit.Decision{RetryAfter: time.Second}, allow(t, l, "k"), "Redis's denial")
	asked := n.n.Load()
	var elapsed time.Duration
	for _, step := range []time.Duration{0, time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, 248 * time.Millisecond, 999 * time.Microsecond} {
		clk.Step(step)
		elapsed += step
		assert.Equal(t, ratelimit.Decision{RetryAfter: time.Second - elapsed}, allow(t, l, "k"), "after %v", elapsed)
		assert.Equal(t, asked, n.n.Load(), "remembered: Redis is not asked")
	}
	assert.Equal(t, ratelimit.Decision{RetryAfter: time.Microsecond}, allow(t, l, "k"), "1 µs before")
	clk.Step(time.Microsecond)
	assert.Equal(t, ratelimit.Decision{Allowed: true}, allow(t, l, "k"), "the caller passes again")
	assert.Equal(t, asked+1, n.n.Load(), "asking Redis once more")
	assert.Equal(t, ratelimit.Decision{RetryAfter: time.Second}, allow(t, l, "k"), "and the next call waits an interval")
	assert.Equal(t, asked+1, n.n.Load(), "without asking Redis")
	assert.Equal(t, map[string]int64{"redis/allowed": 2, "redis/rejected": 9}, decisions(), "remembered denials are Redis's")
	clk.Step(3 * time.Second)
	assert.Equal(t, ratelimit.Decision{Allowed: true}, allow(t, l, "k"))
	assert.Zero(t, l.mem.len(), "a spent denial is forgotten")

	other := allow(t, l, "other")
	assert.True(t, other.Allowed, "a denial is the key's own")
}

// TestLocalMemoryIsBounded: a caller that varies its key, each key over
// its quota or refunded, grows the local memory no further than
// WithMaxLocalKeys, and the newest denials are those kept.
func TestLocalMemoryIsBounded(t *testing.T) {
	s := startRedis(t)
	c, n := countedClient(t, s)
	l, clk := stepLimiter(t, c, 0.001, 1, WithMaxLocalKeys(64))

	for i := range 1000 {
		key := "denied-" + strconv.Itoa(i)
		require.True(t, allow(t, l, key).Allowed)
		require.False(t, allow(t, l, key).Allowed)
		require.LessOrEqual(t, l.mem.len(), 64, "key %d", i)
		clk.Step(time.Millisecond)
	}
	asked := n.n.Load()
	assert.False(t, allow(t, l, "denied-999").Allowed)
	assert.Equal(t, asked, n.n.Load(), "the newest denial is kept")
	assert.False(t, allow(t, l, "denied-0").Allowed)
	assert.Equal(t, asked+1, n.n.Load(), "the oldest went: Redis is asked again, and still denies")

	for i := range 1000 {
		key := "refunded-" + strconv.Itoa(i)
		require.True(t, allow(t, l, key).Allowed)
		l.Refund(key)
		require.LessOrEqual(t, l.mem.len(), 64, "key %d", i)
	}

	// Once every entry is spent, the table empties as it is used.
	clk.Step(2000 * time.Second)
	for i := range 1000 {
		require.True(t, allow(t, l, "refunded-"+strconv.Itoa(i)).Allowed)
	}
	assert.Zero(t, l.mem.len())
}

// TestRefundForgetsTheDenial: a refund moves the key's state in Redis
// back, so a denial remembered before it no longer holds.
func TestRefundForgetsTheDenial(t *testing.T) {
	s := startRedis(t)
	l, _ := newStepLimiter(t, s, 1, 1)
	require.True(t, allow(t, l, "k").Allowed)
	// Another call of k, admitted a moment before on another goroutine,
	// is turned away by a later check; meanwhile this one is denied.
	require.False(t, allow(t, l, "k").Allowed)
	l.Refund("k")
	assert.True(t, allow(t, l, "k").Allowed)
}

// TestRefundsKeepToTheQuota: refunds of a key follow the quota's rate and
// burst; past them the request stays counted, and costs Redis nothing.
func TestRefundsKeepToTheQuota(t *testing.T) {
	s := startRedis(t)
	c, n := countedClient(t, s)
	l, clk := stepLimiter(t, c, 10, 2)

	// A caller whose every call a later check rejects: each is admitted
	// and refunded, a burst's worth.
	for i := range 2 {
		require.Equal(t, ratelimit.Decision{Allowed: true, Remaining: 1}, allow(t, l, "k"), "call %d", i)
		l.Refund("k")
	}
	assert.Equal(t, int64(4), n.n.Load())
	// The third refund is beyond the quota: not sent, the call counts.
	require.True(t, allow(t, l, "k").Allowed)
	l.Refund("k")
	assert.Equal(t, int64(5), n.n.Load())
	assert.Equal(t, ratelimit.Decision{Allowed: true, Remaining: 0}, allow(t, l, "k"))
	// One interval later, one refund more is given back: with the one
	// request earned meanwhile, the key has its whole burst again.
	clk.Step(100 * time.Millisecond)
	l.Refund("k")
	assert.Equal(t, int64(7), n.n.Load())
	assert.Equal(t, ratelimit.Decision{Allowed: true, Remaining: 1}, allow(t, l, "k"))
	assert.Equal(t, ratelimit.Decision{Allowed: true, Remaining: 0}, allow(t, l, "k"))
	assert.False(t, allow(t, l, "k").Allowed)
}

// TestRememberedDenialWhileRedisIsDown: a denial Redis gave holds while
// Redis is down; once it ends, the failure policy decides, and the guess
// that the call asking Redis was admitted is dropped when Redis failed.
func TestRememberedDenialWhileRedisIsDown(t *testing.T) {
	s := startRedis(t)
	mopt, decisions := reader(t)
	l, clk := newStepLimiter(t, s, 10, 1, mopt, WithFailurePolicy(FailOpen), WithTimeout(time.Second), WithBackoff(time.Hour))
	require.True(t, allow(t, l, "k").Allowed)
	require.False(t, allow(t, l, "k").Allowed)

	s.stop()
	assert.Equal(t, ratelimit.Decision{RetryAfter: 100 * time.Millisecond}, allowWithin(t, l, "k", 5*time.Second), "still Redis's denial")
	clk.Step(100 * time.Millisecond)
	assert.True(t, allowWithin(t, l, "k", 5*time.Second).Allowed, "Redis fails: the policy admits")
	assert.True(t, allowWithin(t, l, "k", 5*time.Second).Allowed, "and decides the next calls too")
	assert.Equal(t, map[string]int64{"redis/allowed": 1, "redis/rejected": 2, "fail_open/allowed": 2}, decisions())
}
