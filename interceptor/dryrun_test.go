package interceptor

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"

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

// syncBuffer is a bytes.Buffer for a logger written from gRPC's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDryRun runs the same traffic with the limit enforced and in a dry
// run: the decisions recorded are the same, and the dry run lets the call
// over the limit through, marked in the metrics and logged.
func TestDryRun(t *testing.T) {
	tests := []struct {
		name  string
		opts  []ServerOption
		setup func(t *testing.T, s *Server)
		dry   bool
	}{
		{"enforced", []ServerOption{WithMethod(testService, fixed(1))}, nil, false},
		{"Limit.DryRun", []ServerOption{WithMethod(testService, Limit{Algorithm: limiter.FixedConfig{Limit: 1}, DryRun: true})}, nil, true},
		{"WithDryRun", []ServerOption{WithMethod(testService, fixed(1)), WithDryRun()}, nil, true},
		{"SetDryRun", []ServerOption{WithMethod(testService, fixed(1))}, func(t *testing.T, s *Server) {
			require.NoError(t, s.SetDryRun("sluice.test.v1.TestService/", true))
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer func() { require.NoError(t, provider.Shutdown(context.Background())) }()
			var logs syncBuffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))

			b := newBlock()
			svc := &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
				if req.GetPayload() == "block" {
					return &testpb.UnaryResponse{}, b.wait(ctx)
				}
				return &testpb.UnaryResponse{}, nil
			}}
			e := newEnv(t, svc, envConfig{noClient: true,
				server: append([]ServerOption{WithMeterProvider(provider), WithLogger(logger)}, tt.opts...)})
			// The limiter exists once a call has been made.
			_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
			require.NoError(t, err)
			e.awaitRelease(t, "server")
			if tt.setup != nil {
				tt.setup(t, e.srv)
			}

			var wg sync.WaitGroup
			wg.Go(func() {
				_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{Payload: "block"})
				assert.NoError(t, err)
			})
			b.awaitEntered(t, 1)
			_, err = e.client.Unary(t.Context(), &testpb.UnaryRequest{})
			close(b.release)
			wg.Wait()
			e.awaitRelease(t, "server")

			rejected := []attribute.KeyValue{attribute.String("sluice.decision", "rejected"), attribute.String("sluice.reason", "limit")}
			if tt.dry {
				require.NoError(t, err, "a dry run rejects nothing")
				rejected = append(rejected, attribute.Bool("sluice.dry_run", true))
				assert.Contains(t, logs.String(), "sluice dry run: would have rejected")
				assert.Contains(t, logs.String(), "concurrency limit 1 reached")
			} else {
				require.Equal(t, codes.ResourceExhausted, status.Code(err))
				assert.Empty(t, logs.String())
			}
			call := func(kv ...attribute.KeyValue) attribute.Set {
				return attrsOf(append([]attribute.KeyValue{
					attribute.String("rpc.system.name", "grpc"),
					attribute.String("rpc.method", "sluice.test.v1.TestService/Unary"),
					attribute.String("sluice.side", "server"),
					attribute.String("sluice.limiter", "sluice.test.v1.TestService/"),
				}, kv...)...)
			}
			requests := collect(t, reader)["sluice.requests"].(metricdata.Sum[int64])
			assert.ElementsMatch(t, []metricdata.DataPoint[int64]{
				{Attributes: call(attribute.String("sluice.decision", "admitted"), attribute.String("sluice.outcome", "success")), Value: 2},
				{Attributes: call(rejected...), Value: 1},
			}, withoutTimes(requests.DataPoints), "the same decisions, only marked")
			assert.Equal(t, tt.dry, e.srv.Limiters()[0].DryRun)
		})
	}
}

// TestDryRunReload switches a limiter in and out of a dry run by Reload
// without losing its state.
func TestDryRunReload(t *testing.T) {
	s, err := NewServer(WithMethod(testService, fixed(3)))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	r := s.tab.Load().lookup(unaryMethod)
	tok, rej := s.admit(t.Context(), r)
	require.Nil(t, rej)

	require.NoError(t, s.Reload(WithMethod(testService, Limit{Algorithm: limiter.FixedConfig{Limit: 3}, DryRun: true})))
	ls := s.Limiters()
	require.Len(t, ls, 1)
	assert.True(t, ls[0].DryRun)
	assert.Equal(t, 1, ls[0].Inflight, "the limiter was kept")

	require.NoError(t, s.Reload(WithMethod(testService, fixed(3))))
	assert.False(t, s.Limiters()[0].DryRun)
	s.release(t.Context(), r, &tok, 0, true)
	assert.Zero(t, s.Limiters()[0].Inflight)
	assert.ErrorIs(t, s.SetDryRun("no.such/", true), ErrUnknownLimiter)
}
