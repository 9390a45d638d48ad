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
	assert.EqualError(t, WatchConfig(t.Context(), "x.json", time.Second, nil, nil), "interceptor: WatchConfig needs a Reloader (a *Server or *Client)")
}
