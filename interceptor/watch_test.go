package interceptor

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/callerkey"
)

func TestWatchConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sluice.json")
		write := func(s string) { require.NoError(t, os.WriteFile(path, []byte(s), 0o600)) }
		write(`{"default": {"fixed": {"limit": 3}}}`)
		opts, err := LoadConfig(path)
		require.NoError(t, err)
		s, err := NewServer(opts...)
		require.NoError(t, err)
		defer func() { assert.NoError(t, s.Close()) }()
		limit := func() int { return gateOf(s.core, unaryMethod).lim.Limit() }
		require.Equal(t, 3, limit())

		var mu sync.Mutex
		var errList []error
		errs := func() []error { mu.Lock(); defer mu.Unlock(); return append([]error(nil), errList...) }
		onError := func(err error) { mu.Lock(); defer mu.Unlock(); errList = append(errList, err) }
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- WatchConfig(ctx, path, time.Second, s, onError) }()
		synctest.Wait() // the watcher has read the starting file

		write(`{"default": {"fixed": {"limit": 7}}}`)
		time.Sleep(time.Second) // fake time: one poll
		synctest.Wait()
		assert.Equal(t, 7, limit(), "a changed file is applied")

		write(`{"default": {"fixed": {"limit": -1}}}`)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, 7, limit(), "a bad file changes nothing")
		require.Len(t, errs(), 1)
		assert.Contains(t, errs()[0].Error(), "default.fixed.limit")

		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.Len(t, errs(), 1, "an unchanged bad file is reported once")

		require.NoError(t, os.Remove(path))
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Len(t, errs(), 2, "a missing file is reported")
		assert.Equal(t, 7, limit())

		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
	})
}

func TestWatchConfigErrors(t *testing.T) {
	s, err := NewServer()
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	assert.EqualError(t, WatchConfig(t.Context(), "x.json", 0, s, nil), "interceptor: WatchConfig interval is 0s, must be > 0")
	assert.EqualError(t, WatchConfig(t.Context(), "x.json", time.Second, nil, nil), "interceptor: WatchConfig needs a Server")
}

// TestWatchConfigLayersOverCode: a server built from a file plus a quota
// in code; each edit of the file replaces the file's settings whole (an
// entry deleted from the file is gone) and leaves the quota alone.
func TestWatchConfigLayersOverCode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sluice.json")
		write := func(s string) { require.NoError(t, os.WriteFile(path, []byte(s), 0o600)) }
		write(`{"default": {"fixed": {"limit": 3}}, "methods": [{"name": [{"service": "sluice.test.v1.TestService", "method": "Unary"}], "limit": {"fixed": {"limit": 4}}}]}`)
		opts, err := LoadConfig(path)
		require.NoError(t, err)
		s, err := NewServer(append(opts, callerRateLimit(callerkey.Metadata("x-api-key"), RateLimit{PerSecond: 0.001, Burst: 1}, 0))...)
		require.NoError(t, err)
		defer func() { assert.NoError(t, s.Close()) }()
		limit := func() int { return gateOf(s.core, unaryMethod).lim.Limit() }
		require.Equal(t, 4, limit())

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- WatchConfig(ctx, path, time.Second, s, func(err error) { t.Error(err) }) }()
		synctest.Wait()

		write(`{"default": {"fixed": {"limit": 5}}}`) // the method entry deleted
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, 5, limit(), "the deleted entry is gone: the new default applies")
		cl := s.tab.Load().callers
		require.NotNil(t, cl, "the quota set in code stays")
		assert.Equal(t, RateLimit{PerSecond: 0.001, Burst: 1}, cl.rate)

		write(`{"default": {"fixed": {"limit": 5}}, "caller_limit": {"rate_limit": {"per_second": 2}, "peer_identity": {}}}`)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, RateLimit{PerSecond: 2}, s.tab.Load().callers.rate, "a quota in the file wins over the one in code")

		write(`{"default": {"fixed": {"limit": 5}}}`)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, RateLimit{PerSecond: 0.001, Burst: 1}, s.tab.Load().callers.rate, "and leaves the code's when it goes")

		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
	})
}
