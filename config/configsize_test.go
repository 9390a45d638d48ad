package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/interceptor"
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
		{"at the limit", maxSize, ""},
		{"one byte over", maxSize + 1, fmt.Sprintf("is %d bytes, more than the limit of %d bytes", maxSize+1, maxSize)},
		{"far over", 8 * maxSize, fmt.Sprintf("is %d bytes, more than the limit of %d bytes", 8*maxSize, maxSize)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "big.json")
			require.NoError(t, os.WriteFile(path, padded(t, cfg, tt.size), 0o600))
			opts, err := Load(path)
			if tt.err == "" {
				require.NoError(t, err)
				assert.NotEmpty(t, opts)
				return
			}
			require.Error(t, err)
			assert.Equal(t, "config: "+path+" "+tt.err, err.Error())
		})
	}
}

func TestWatchConfigSizeLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := watchConfig(t)
		require.NoError(t, os.WriteFile(w.path, padded(t, `{"default": {"fixed": {"limit": 7}}}`, maxSize+1), 0o600))
		time.Sleep(time.Second) // fake time: one poll
		synctest.Wait()
		assert.Equal(t, 3, limitOf(t, w.s, unaryMethod), "an oversized file changes nothing")
		errs := w.errs()
		require.Len(t, errs, 1)
		assert.Equal(t, fmt.Sprintf("config: %s is %d bytes, more than the limit of %d bytes", w.path, maxSize+1, maxSize), errs[0].Error())
		w.stop()
	})
}

// A configWatch is Watch polling every second over a file of limit 3
// that its interceptor.Server was built from.
type configWatch struct {
	t    *testing.T
	path string
	s    *interceptor.Server

	mu     sync.Mutex
	errors []error
	cancel context.CancelFunc
	done   chan error
}

// watchConfig starts a configWatch. It must run inside a synctest bubble;
// the interceptor.Server is closed when t ends.
func watchConfig(t *testing.T) *configWatch {
	t.Helper()
	w := &configWatch{t: t, path: filepath.Join(t.TempDir(), "sluice.json"), done: make(chan error)}
	require.NoError(t, os.WriteFile(w.path, []byte(`{"default": {"fixed": {"limit": 3}}}`), 0o600))
	opts, err := Load(w.path)
	require.NoError(t, err)
	w.s, err = interceptor.NewServer(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, w.s.Close()) })
	var ctx context.Context
	ctx, w.cancel = context.WithCancel(t.Context())
	onError := func(err error) { w.mu.Lock(); defer w.mu.Unlock(); w.errors = append(w.errors, err) }
	go func() { w.done <- Watch(ctx, w.path, time.Second, w.s, onError) }()
	synctest.Wait()
	return w
}

// errs returns the errors Watch reported so far.
func (w *configWatch) errs() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.errors)
}

// stop ends the watch and checks that it ended for the cancellation.
func (w *configWatch) stop() {
	w.cancel()
	assert.ErrorIs(w.t, <-w.done, context.Canceled)
}
