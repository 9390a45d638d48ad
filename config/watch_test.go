package config

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
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/ratelimit"
)

func TestWatchConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sluice.json")
		write := func(s string) { require.NoError(t, os.WriteFile(path, []byte(s), 0o600)) }
		write(`{"default": {"fixed": {"limit": 3}}}`)
		opts, err := Load(path)
		require.NoError(t, err)
		s, err := interceptor.NewServer(opts...)
		require.NoError(t, err)
		defer func() { assert.NoError(t, s.Close()) }()
		limit := func() int { return limitOf(t, s, unaryMethod) }
		require.Equal(t, 3, limit())

		var mu sync.Mutex
		var errList []error
		errs := func() []error { mu.Lock(); defer mu.Unlock(); return append([]error(nil), errList...) }
		onError := func(err error) { mu.Lock(); defer mu.Unlock(); errList = append(errList, err) }
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- Watch(ctx, path, time.Second, s, onError) }()
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
	s, err := interceptor.NewServer()
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	assert.EqualError(t, Watch(t.Context(), "x.json", 0, s, nil), "config: Watch interval is 0s, must be > 0")
	assert.EqualError(t, Watch(t.Context(), "x.json", time.Second, nil, nil), "config: Watch needs a Server")
}

// TestWatchConfigLayersOverCode: a server built from a file plus a quota
// in code; each edit of the file replaces the file's settings whole (an
// entry deleted from the file is gone) and leaves the quota alone.
func TestWatchConfigLayersOverCode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sluice.json")
		write := func(s string) { require.NoError(t, os.WriteFile(path, []byte(s), 0o600)) }
		write(`{"default": {"fixed": {"limit": 3}}, "methods": [{"name": [{"service": "sluice.test.v1.TestService", "method": "Unary"}], "limit": {"fixed": {"limit": 4}}}]}`)
		opts, err := Load(path)
		require.NoError(t, err)
		quota, err := ratelimit.NewKeyed(0.001, 1)
		require.NoError(t, err)
		s, err := interceptor.NewServer(append(opts, interceptor.WithCallerLimiter(callerkey.Metadata("x-api-key"), quota))...)
		require.NoError(t, err)
		defer func() { assert.NoError(t, s.Close()) }()
		limit := func() int { return limitOf(t, s, unaryMethod) }
		// admits is how many of 3 calls in a row from caller the quota lets through.
		admits := func(caller string) int {
			ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs("x-api-key", caller))
			n := 0
			for range 3 {
				_, err := s.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: unaryMethod},
					func(context.Context, any) (any, error) { return nil, nil })
				if err == nil {
					n++
				}
			}
			return n
		}
		require.Equal(t, 4, limit())

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- Watch(ctx, path, time.Second, s, func(err error) { t.Error(err) }) }()
		synctest.Wait()

		write(`{"default": {"fixed": {"limit": 5}}}`) // the method entry deleted
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, 5, limit(), "the deleted entry is gone: the new default applies")
		assert.Equal(t, 1, admits("a"), "the quota set in code stays: a burst of 1")

		write(`{"default": {"fixed": {"limit": 5}}, "caller_limit": {"rate_limit": {"per_second": 2}, "peer_identity": {}}}`)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, 2, admits("b"), "a quota in the file wins over the one in code: a burst of 2")

		write(`{"default": {"fixed": {"limit": 5}}}`)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, 1, admits("c"), "and leaves the code's when it goes")

		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
	})
}
