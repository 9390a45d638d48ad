package admin

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/interceptor"
	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// fakeLimits has one limiter whose figures never change.
type fakeLimits struct{}

func (fakeLimits) Limiters() []interceptor.LimiterState {
	return []interceptor.LimiterState{{Name: "a", Limit: 3}}
}
func (fakeLimits) SetOverride(string, int, time.Duration) error { return nil }
func (fakeLimits) ClearOverride(string) error                   { return nil }
func (fakeLimits) SetDryRun(string, bool) error                 { return nil }

// fakeWatch is the server side of a WatchLimits stream, without gRPC, so
// that the watch runs under synctest.
type fakeWatch struct {
	grpc.ServerStream
	ctx  context.Context
	sent chan *sluicev1.WatchLimitsResponse
}

func (w *fakeWatch) Context() context.Context { return w.ctx }
func (w *fakeWatch) Send(m *sluicev1.WatchLimitsResponse) error {
	select {
	case w.sent <- m:
	default: // the tests read only the first message
	}
	return nil
}

// watching runs svc.WatchLimits until cancel is called; done has its
// result.
type watching struct {
	cancel context.CancelFunc
	done   chan error
	first  *sluicev1.WatchLimitsResponse
}

func watch(t *testing.T, svc *service) *watching {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	w := &fakeWatch{ctx: ctx, sent: make(chan *sluicev1.WatchLimitsResponse, 1)}
	done := make(chan error, 1)
	go func() { done <- svc.WatchLimits(&sluicev1.WatchLimitsRequest{}, w) }()
	synctest.Wait()
	var first *sluicev1.WatchLimitsResponse
	select {
	case first = <-w.sent:
	default:
	}
	return &watching{cancel: cancel, done: done, first: first}
}

// ended reports whether the watch has returned, and its error.
func (w *watching) ended() (bool, error) {
	select {
	case err := <-w.done:
		w.done <- err
		return true, err
	default:
		return false, nil
	}
}

// Attack: any number of watch streams, each open for ever.
func TestAttackUnboundedWatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc, err := newService(fakeLimits{}, WithAuthorizer(operator))
		require.NoError(t, err)
		var open []*watching
		for range 16 {
			w := watch(t, svc)
			require.NotNil(t, w.first, "watch %d is served", len(open))
			open = append(open, w)
		}
		extra := watch(t, svc)
		ended, err := extra.ended()
		assert.True(t, ended, "a watch beyond the 16th is refused at once")
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		extra.cancel()

		time.Sleep(10*time.Minute + time.Second) // fake time
		synctest.Wait()
		for i, w := range open {
			ended, err := w.ended()
			assert.True(t, ended, "watch %d ends after 10 minutes", i)
			assert.NoError(t, err, "watch %d ends cleanly", i)
			w.cancel()
		}
	})
}

func TestWatchBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc, err := newService(fakeLimits{}, WithAuthorizer(operator), WithMaxWatches(1), WithWatchLifetime(time.Minute))
		require.NoError(t, err)
		a := watch(t, svc)
		require.NotNil(t, a.first)
		b := watch(t, svc)
		ended, err := b.ended()
		require.True(t, ended)
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Equal(t, "admin: too many watch streams open (the most is 1, admin.WithMaxWatches); retry when one ends",
			status.Convert(err).Message())
		b.cancel()

		a.cancel()
		synctest.Wait()
		ended, err = a.ended()
		require.True(t, ended, "the client went away")
		assert.NoError(t, err)
		c := watch(t, svc)
		require.NotNil(t, c.first, "the slot of a cancelled watch is free again")

		time.Sleep(time.Minute - time.Nanosecond)
		synctest.Wait()
		ended, _ = c.ended()
		assert.False(t, ended, "the watch is alive until its lifetime is over")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		ended, err = c.ended()
		assert.True(t, ended, "the watch ends at its lifetime")
		assert.NoError(t, err, "with OK, so the client can watch again")
		c.cancel()
		d := watch(t, svc)
		require.NotNil(t, d.first, "the slot of an expired watch is free again")
		d.cancel()
		synctest.Wait()
	})
}

// Over gRPC: the client sees RESOURCE_EXHAUSTED.
func TestMaxWatchesOverGRPC(t *testing.T) {
	c := start(t, WithAuthorizer(operator), WithMaxWatches(1))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, err := c.WatchLimits(ctx, &sluicev1.WatchLimitsRequest{})
	require.NoError(t, err)
	_, err = first.Recv()
	require.NoError(t, err)
	second, err := c.WatchLimits(ctx, &sluicev1.WatchLimitsRequest{})
	require.NoError(t, err)
	_, err = second.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
}

// busyLimits has one limiter that admits a call between any two looks.
type busyLimits struct {
	fakeLimits
	calls uint64
}

func (b *busyLimits) Limiters() []interceptor.LimiterState {
	b.calls++
	return []interceptor.LimiterState{{Name: "a", Limit: 3, Admitted: b.calls}}
}

// A limiter whose counts move all the time is sent once per interval,
// never more often.
func TestWatchCadence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc, err := newService(&busyLimits{}, WithAuthorizer(operator))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		w := &fakeWatch{ctx: ctx, sent: make(chan *sluicev1.WatchLimitsResponse, 100)}
		done := make(chan error, 1)
		go func() { done <- svc.WatchLimits(&sluicev1.WatchLimitsRequest{}, w) }()
		time.Sleep(10*defaultWatchInterval + defaultWatchInterval/2) // fake time
		synctest.Wait()
		cancel()
		require.NoError(t, <-done)
		close(w.sent)
		var admitted []uint64
		for m := range w.sent {
			require.Len(t, m.GetLimiters(), 1)
			admitted = append(admitted, m.GetLimiters()[0].GetAdmittedTotal())
		}
		assert.Equal(t, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, admitted, "the first message, then one per interval")
	})
}
