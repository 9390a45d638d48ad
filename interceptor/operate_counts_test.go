package interceptor

import (
	"context"
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

// TestCounts drives real calls past a limiter, one held in the handler
// while more arrive, and checks that LimiterState counts the decisions
// exactly as sluice.requests records them.
func TestCounts(t *testing.T) {
	tests := []struct {
		name   string
		side   string // where the limiter is: "server" or "client"
		opts   []ServerOption
		block  bool // hold one call in the handler while the others come
		dry    bool // the calls over the limit go through
		admits uint64
		// rejects is how many of the 3 calls over the limit are turned
		// away.
		rejects uint64
	}{
		// The first call, then the held one; the 3 others find no permit.
		{name: "limit", side: "server", opts: []ServerOption{WithMethod(testService, fixed(1))}, block: true, admits: 2, rejects: 3},
		{name: "early rejection", side: "server", opts: []ServerOption{WithMethod(testService, fixed(1)), WithEarlyRejection()}, block: true, admits: 2, rejects: 3},
		{name: "client", side: "client", opts: []ServerOption{WithMethod(testService, fixed(1))}, block: true, admits: 2, rejects: 3},
		// The first call spends the burst.
		{name: "rate", side: "server", opts: []ServerOption{WithMethod(testService, Limit{Rate: RateLimit{PerSecond: 0.001, Burst: 1}})}, admits: 1, rejects: 3},
		// A dry run counts what it admits with a permit, and not the
		// calls it lets through without one.
		{name: "dry run", side: "server", opts: []ServerOption{WithMethod(testService, Limit{Algorithm: limiter.FixedConfig{Limit: 1}, DryRun: true})}, block: true, dry: true, admits: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer func() { require.NoError(t, provider.Shutdown(context.Background())) }()
			b := newBlock()
			svc := &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
				if req.GetPayload() == "block" {
					return &testpb.UnaryResponse{}, b.wait(ctx)
				}
				return &testpb.UnaryResponse{}, nil
			}}
			opts := append([]ServerOption{WithMeterProvider(provider)}, tt.opts...)
			ec := envConfig{server: opts, noClient: true}
			if tt.side == "client" {
				ec = envConfig{client: asClient(opts), noServer: true}
			}
			e := newEnv(t, svc, ec)
			var c *core
			if c = e.coreOf(e.srv); tt.side == "client" {
				c = e.coreOfClient(e.cli)
			}

			_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
			require.NoError(t, err)
			e.awaitRelease(t, tt.side)
			var wg sync.WaitGroup
			if tt.block {
				wg.Go(func() {
					_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{Payload: "block"})
					assert.NoError(t, err)
				})
				b.awaitEntered(t, 1)
				st := c.limiters()[0]
				assert.Equal(t, uint64(1), st.Admitted, "a call in flight is not counted yet")
			}
			for range 3 {
				_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
				if tt.dry {
					require.NoError(t, err)
				} else {
					require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
				}
			}
			close(b.release)
			wg.Wait()
			if tt.block {
				e.awaitRelease(t, tt.side)
			}

			got := c.limiters()
			require.Len(t, got, 1)
			assert.Equal(t, tt.admits, got[0].Admitted, "admitted")
			assert.Equal(t, tt.rejects, got[0].Rejected, "rejected")
			admitted, rejected := requestsByDecision(t, reader)
			assert.Equal(t, admitted, got[0].Admitted, "admitted as sluice.requests counts them")
			assert.Equal(t, rejected, got[0].Rejected, "rejected as sluice.requests counts them (dry runs apart)")
		})
	}
}

// requestsByDecision sums sluice.requests by decision, leaving out the
// rejections of dry runs.
func requestsByDecision(t *testing.T, r *sdkmetric.ManualReader) (admitted, rejected uint64) {
	t.Helper()
	requests, ok := collect(t, r)["sluice.requests"].(metricdata.Sum[int64])
	require.True(t, ok, "sluice.requests")
	for _, dp := range requests.DataPoints {
		if dry, _ := dp.Attributes.Value("sluice.dry_run"); dry.AsBool() {
			continue
		}
		switch d, _ := dp.Attributes.Value(attribute.Key("sluice.decision")); d.AsString() {
		case "admitted":
			admitted += uint64(dp.Value)
		case "rejected":
			rejected += uint64(dp.Value)
		}
	}
	return admitted, rejected
}
