package interceptor

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
)

// collect reads every sluice instrument from r, by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, meterName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func attrsOf(kv ...attribute.KeyValue) attribute.Set { return attribute.NewSet(kv...) }

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, provider.Shutdown(context.Background())) }()

	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		return &testpb.UnaryResponse{}, b.wait(ctx)
	}}
	e := newEnv(t, svc, envConfig{
		server:   []ServerOption{WithMeterProvider(provider), WithMethod(testService, fixed(1))},
		noClient: true,
	})

	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		assert.NoError(t, err)
	})
	b.awaitEntered(t, 1)

	limiterAttrs := attrsOf(attribute.String("rpc.system.name", "grpc"), attribute.String("sluice.side", "server"),
		attribute.String("sluice.limiter", "sluice.test.v1.TestService/"))
	got := collect(t, reader)
	assert.Equal(t, []metricdata.DataPoint[int64]{{Attributes: limiterAttrs, Value: 1}},
		withoutTimes(got["sluice.limit"].(metricdata.Gauge[int64]).DataPoints))
	assert.Equal(t, []metricdata.DataPoint[int64]{{Attributes: limiterAttrs, Value: 1}},
		withoutTimes(got["sluice.inflight"].(metricdata.Sum[int64]).DataPoints))

	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	close(b.release)
	wg.Wait()
	e.awaitRelease(t, "server")

	got = collect(t, reader)
	call := func(kv ...attribute.KeyValue) attribute.Set {
		return attrsOf(append([]attribute.KeyValue{
			attribute.String("rpc.system.name", "grpc"),
			attribute.String("rpc.method", "sluice.test.v1.TestService/Unary"),
			attribute.String("sluice.side", "server"),
			attribute.String("sluice.limiter", "sluice.test.v1.TestService/"),
		}, kv...)...)
	}
	requests := got["sluice.requests"].(metricdata.Sum[int64])
	assert.True(t, requests.IsMonotonic)
	assert.ElementsMatch(t, []metricdata.DataPoint[int64]{
		{Attributes: call(attribute.String("sluice.decision", "admitted"), attribute.String("sluice.outcome", "success")), Value: 1},
		{Attributes: call(attribute.String("sluice.decision", "rejected"), attribute.String("sluice.reason", "limit")), Value: 1},
	}, withoutTimes(requests.DataPoints))

	rtt := got["sluice.rtt"].(metricdata.Histogram[float64])
	require.Len(t, rtt.DataPoints, 1)
	assert.Equal(t, call(), rtt.DataPoints[0].Attributes)
	assert.Equal(t, uint64(1), rtt.DataPoints[0].Count)
	assert.Equal(t, rpcBuckets, rtt.DataPoints[0].Bounds)

	assert.Equal(t, []metricdata.DataPoint[int64]{{Attributes: limiterAttrs, Value: 0}},
		withoutTimes(got["sluice.inflight"].(metricdata.Sum[int64]).DataPoints))
	assert.NotContains(t, got, "sluice.queue.wait", "no call waited")
}

// TestMetricsTimeEveryCall: the RTT histogram holds every call's RTT, also
// of calls of a hundred nanoseconds.
func TestMetricsTimeEveryCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reader := newMeteredServer(t)

		const calls, call = 500, 100 * time.Nanosecond
		r := s.tab.Load().lookup(unaryMethod)
		for i := range calls {
			tok, rej := s.admit(t.Context(), r)
			require.Nil(t, rej)
			time.Sleep(call)
			res := Result{}
			if i < 10 { // a round trip of drops ends the limiter's slow start
				res.Err = status.Error(codes.ResourceExhausted, "quota")
			}
			s.finish(t.Context(), r, &tok, res)
		}

		rtt := collect(t, reader)["sluice.rtt"].(metricdata.Histogram[float64])
		require.Len(t, rtt.DataPoints, 1)
		assert.Equal(t, uint64(calls), rtt.DataPoints[0].Count)
		assert.InDelta(t, (calls * call).Seconds(), rtt.DataPoints[0].Sum, 1e-12)
	})
}

// TestMetricsQueueWait: sluice.queue.wait records the calls that waited,
// and only those: with a full queue, each immediate rejection used to add
// a 0 sample, so that under overload the median wait read as 0.
func TestMetricsQueueWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reader := newMeteredServer(t, WithDefault(Limit{Algorithm: limiter.FixedConfig{Limit: 1}, Queue: limiter.Queue{Size: 2}}))

		r := s.tab.Load().lookup(unaryMethod)
		tok, rej := s.admit(t.Context(), r)
		require.Nil(t, rej)

		// Two calls wait: one is served after 30ms, one gives up after 10ms.
		var wg sync.WaitGroup
		wg.Go(func() {
			tok, rej := s.admit(t.Context(), r)
			if assert.Nil(t, rej) {
				s.finish(t.Context(), r, &tok, Result{})
			}
		})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		wg.Go(func() {
			_, rej := s.admit(ctx, r)
			if assert.NotNil(t, rej) {
				assert.Equal(t, codes.DeadlineExceeded, status.Code(rej.err))
			}
		})
		synctest.Wait()
		require.Equal(t, 2, r.gate.lim.QueueLen())

		// The queue is full: these are rejected at once, without waiting.
		const full = 50
		for range full {
			_, rej := s.admit(t.Context(), r)
			require.NotNil(t, rej)
			require.Equal(t, codes.ResourceExhausted, status.Code(rej.err))
		}
		// A call whose context ended before it came never queues.
		gone, cancelGone := context.WithCancel(t.Context())
		cancelGone()
		_, rej = s.admit(gone, r)
		require.NotNil(t, rej)

		time.Sleep(30 * time.Millisecond)
		s.finish(t.Context(), r, &tok, Result{})
		wg.Wait()

		got := collect(t, reader)
		wait := got["sluice.queue.wait"].(metricdata.Histogram[float64])
		require.Len(t, wait.DataPoints, 1)
		assert.Equal(t, uint64(2), wait.DataPoints[0].Count, "the two calls that waited, not the %d rejected at once", full+1)
		assert.InDelta(t, 0.040, wait.DataPoints[0].Sum, 1e-9, "10ms + 30ms")
		reasons := map[string]int64{}
		for _, dp := range got["sluice.requests"].(metricdata.Sum[int64]).DataPoints {
			if v, ok := dp.Attributes.Value("sluice.reason"); ok {
				reasons[v.AsString()] += dp.Value
			}
		}
		assert.Equal(t, map[string]int64{"limit": full, "deadline": 1, "canceled": 1}, reasons)
	})
}

func withoutTimes[N int64 | float64](dps []metricdata.DataPoint[N]) []metricdata.DataPoint[N] {
	out := make([]metricdata.DataPoint[N], len(dps))
	for i, dp := range dps {
		out[i] = metricdata.DataPoint[N]{Attributes: dp.Attributes, Value: dp.Value}
	}
	return out
}

// TestMetricsOverrideRemaining: sluice.override.remaining tells how long an
// operator's override has left, and 0 once there is none, so that an alert
// can warn before a limit pinned for an incident lets go.
func TestMetricsOverrideRemaining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, reader := newMeteredServer(t)
		gateOf(s.core, unaryMethod)
		name := "sluice.test.v1.TestService/Unary"
		remaining := func() []float64 {
			var out []float64
			for _, dp := range collect(t, reader)["sluice.override.remaining"].(metricdata.Gauge[float64]).DataPoints {
				out = append(out, dp.Value)
			}
			return out
		}

		assert.Equal(t, []float64{0}, remaining(), "no override")
		require.NoError(t, s.SetOverride(name, 3, 10*time.Minute))
		time.Sleep(4 * time.Minute)
		assert.Equal(t, []float64{360}, remaining())
		time.Sleep(6 * time.Minute)
		synctest.Wait() // the expiry has run
		assert.Equal(t, []float64{0}, remaining(), "expired")
		require.NoError(t, s.SetOverride(name, 3, time.Hour))
		require.NoError(t, s.ClearOverride(name))
		assert.Equal(t, []float64{0}, remaining(), "cleared")
	})
}

// newMeteredServer returns a Server built with opts that reports to a
// manual reader; both are shut down when the test ends.
func newMeteredServer(t *testing.T, opts ...ServerOption) (*Server, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, provider.Shutdown(context.Background())) })
	s, err := NewServer(append([]ServerOption{WithMeterProvider(provider)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s, reader
}
