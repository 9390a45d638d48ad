package interceptor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// padded returns a valid config of exactly size bytes: JSON allows any
// amount of white space.
func padded(t *testing.T, config string, size int) []byte {
	t.Helper()
	require.LessOrEqual(t, len(config), size)
	return []byte(config + strings.Repeat(" ", size-len(config)))
}

// Attack: a config file of any size was read whole into memory.
func TestLoadConfigSizeLimit(t *testing.T) {
	const cfg = `{"default": {"fixed": {"limit": 3}}}`
	tests := []struct {
		name string
		size int
		err  string
	}{
		{"at the limit", maxConfigSize, ""},
		{"one byte over", maxConfigSize + 1, fmt.Sprintf("is %d bytes, more than the limit of %d bytes", maxConfigSize+1, maxConfigSize)},
		{"far over", 8 * maxConfigSize, fmt.Sprintf("is %d bytes, more than the limit of %d bytes", 8*maxConfigSize, maxConfigSize)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "big.json")
			require.NoError(t, os.WriteFile(path, padded(t, cfg, tt.size), 0o600))
			opts, err := LoadConfig(path)
			if tt.err == "" {
				require.NoError(t, err)
				assert.NotEmpty(t, opts)
				return
			}
			require.Error(t, err)
			assert.Equal(t, "interceptor: config "+path+" "+tt.err, err.Error())
		})
	}
}

func TestWatchConfigSizeLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sluice.json")
		require.NoError(t, os.WriteFile(path, []byte(`{"default": {"fixed": {"limit": 3}}}`), 0o600))
		opts, err := LoadConfig(path)
		require.NoError(t, err)
		s, err := NewServer(opts...)
		require.NoError(t, err)
		defer func() { assert.NoError(t, s.Close()) }()

		var mu sync.Mutex
		var errList []error
		onError := func(err error) { mu.Lock(); defer mu.Unlock(); errList = append(errList, err) }
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- WatchConfig(ctx, path, time.Second, s, onError) }()
		synctest.Wait()

		require.NoError(t, os.WriteFile(path, padded(t, `{"default": {"fixed": {"limit": 7}}}`, maxConfigSize+1), 0o600))
		time.Sleep(time.Second) // fake time: one poll
		synctest.Wait()
		assert.Equal(t, 3, gateOf(s.core, unaryMethod).lim.Limit(), "an oversized file changes nothing")
		mu.Lock()
		require.Len(t, errList, 1)
		assert.Equal(t, fmt.Sprintf("interceptor: config %s is %d bytes, more than the limit of %d bytes", path, maxConfigSize+1, maxConfigSize), errList[0].Error())
		mu.Unlock()

		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
	})
}
