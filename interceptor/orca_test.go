package interceptor

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservicepb "github.com/cncf/xds/go/xds/service/orca/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// orcaTrailer is where gRPC carries a call's ORCA load report.
const orcaTrailer = "endpoint-load-metrics-bin"

// loadReportOf decodes the ORCA report of a call's trailer; nil if none.
func loadReportOf(t *testing.T, tr metadata.MD) *v3orcapb.OrcaLoadReport {
	t.Helper()
	v := tr.Get(orcaTrailer)
	if len(v) == 0 {
		return nil
	}
	r := &v3orcapb.OrcaLoadReport{}
	require.NoError(t, proto.Unmarshal([]byte(v[0]), r))
	return r
}

func TestLoadFigures(t *testing.T) {
	type event struct {
		at       time.Duration // since the limiter's first call
		rejected bool
		util     float64
	}
	tests := []struct {
		name   string
		events []event
		at     time.Duration // when the figures are read
		want   loadFigures
	}{
		{name: "no call", at: time.Second, want: loadFigures{}},
		{
			name:   "a young limiter counts a whole window",
			events: []event{{0, false, 0.5}, {100 * time.Millisecond, true, 1}},
			at:     200 * time.Millisecond,
			want:   loadFigures{util: 0.75, qps: 1, eps: 1, samples: 2},
		},
		{
			name: "the previous window and the current one",
			events: []event{
				{0, false, 1}, {500 * time.Millisecond, false, 1}, // window 1: 1 s long
				{1000 * time.Millisecond, true, 1}, {1200 * time.Millisecond, false, 0.4},
			},
			at:   1500 * time.Millisecond,
			want: loadFigures{util: 0.85, qps: 3 / 1.5, eps: 1 / 1.5, samples: 4},
		},
		{
			name: "older windows are forgotten",
			events: []event{
				{0, true, 1}, {100 * time.Millisecond, true, 1}, // window 1
				{1000 * time.Millisecond, false, 0.5}, // window 2
				{2000 * time.Millisecond, false, 0.5}, // window 3
			},
			at:   2500 * time.Millisecond,
			want: loadFigures{util: 0.5, qps: 2 / 1.5, eps: 0, samples: 2},
		},
		{
			name:   "after a silence the rates fall",
			events: []event{{0, false, 1}, {100 * time.Millisecond, false, 1}},
			at:     10 * time.Second, // one 10 s window then an empty one
			want:   loadFigures{util: 1, qps: 0.2, eps: 0, samples: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				gl := &gateLoad{start: start}
				for _, e := range tt.events {
					time.Sleep(time.Until(start.Add(e.at)))
					gl.record(time.Now(), e.rejected, e.util)
				}
				time.Sleep(time.Until(start.Add(tt.at)))
				got := gl.figures(time.Now())
				assert.Equal(t, tt.want.samples, got.samples)
				assert.InDelta(t, tt.want.util, got.util, 1e-9, "utilization")
				assert.InDelta(t, tt.want.qps, got.qps, 1e-9, "qps")
				assert.InDelta(t, tt.want.eps, got.eps, 1e-9, "eps")
			})
		})
	}
}

// TestLoadReports checks the reports of admitted and rejected calls, unary
// and streams, over real gRPC: a call admitted at a fixed limit of 1 reads
// utilization 1, and the call turned away meanwhile carries the rejection.
func TestLoadReports(t *testing.T) {
	b := newBlock()
	svc := &testpb.Service{
		UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
			return &testpb.UnaryResponse{}, b.wait(ctx)
		},
		ServerStreamFunc: func(_ *testpb.ServerStreamRequest, s grpc.ServerStreamingServer[testpb.ServerStreamResponse]) error {
			return b.wait(s.Context())
		},
	}
	e := newEnv(t, svc, envConfig{server: []ServerOption{WithLoadReports(), WithDefault(fixed(1))}, noClient: true})
	ctx := t.Context()

	tests := []struct {
		name string
		call func(tr *metadata.MD) error
	}{
		{"unary", func(tr *metadata.MD) error {
			_, err := e.client.Unary(ctx, &testpb.UnaryRequest{}, grpc.Trailer(tr))
			return err
		}},
		{"stream", func(tr *metadata.MD) error {
			s, err := e.client.ServerStream(ctx, &testpb.ServerStreamRequest{})
			if err != nil {
				return err
			}
			for err == nil {
				_, err = s.Recv()
			}
			*tr = s.Trailer()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var held metadata.MD
			done := make(chan error, 1)
			go func() { done <- tt.call(&held) }()
			b.awaitEntered(t, 1)

			var rejected metadata.MD
			err := tt.call(&rejected)
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
			r := loadReportOf(t, rejected)
			require.NotNil(t, r, "a rejected call must carry a load report")
			assert.InDelta(t, 1, r.GetApplicationUtilization(), 1e-9, "1 in flight of 1")
			assert.Positive(t, r.GetEps(), "the rejection is counted")
			assert.Positive(t, r.GetRpsFractional(), "the admitted call is counted")
			assert.Zero(t, r.GetCpuUtilization(), "cpu_utilization is the application's")

			b.release <- struct{}{}
			require.NoError(t, <-done)
			r = loadReportOf(t, held)
			require.NotNil(t, r, "an admitted call must carry a load report")
			assert.InDelta(t, 1, r.GetApplicationUtilization(), 1e-9, "its own permit is in flight")
			assert.Positive(t, r.GetRpsFractional())
		})
	}
}

func TestLoadReportsOff(t *testing.T) {
	e := newEnv(t, &testpb.Service{}, envConfig{server: []ServerOption{WithDefault(fixed(1))}, noClient: true})
	var tr metadata.MD
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{}, grpc.Trailer(&tr))
	require.NoError(t, err)
	assert.Nil(t, loadReportOf(t, tr), "no report without WithLoadReports")
}

// TestLoadReportsHandlerOverrides checks that a handler's own figures win:
// sluice reports before the handler runs.
func TestLoadReportsHandlerOverrides(t *testing.T) {
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		orca.CallMetricsRecorderFromContext(ctx).SetApplicationUtilization(0.25)
		return &testpb.UnaryResponse{}, nil
	}}
	e := newEnv(t, svc, envConfig{server: []ServerOption{WithLoadReports()}, noClient: true})
	var tr metadata.MD
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{}, grpc.Trailer(&tr))
	require.NoError(t, err)
	r := loadReportOf(t, tr)
	require.NotNil(t, r)
	assert.InDelta(t, 0.25, r.GetApplicationUtilization(), 1e-9)
	assert.Positive(t, r.GetRpsFractional(), "sluice's other figures stay")
}

func TestRegisterLoadReports(t *testing.T) {
	plain, err := NewServer()
	require.NoError(t, err)
	require.ErrorContains(t, plain.RegisterLoadReports(grpc.NewServer()), "needs a Server made with WithLoadReports")

	s, err := NewServer(WithLoadReports(), WithDefault(fixed(1)))
	require.NoError(t, err)
	gs := grpc.NewServer(s.ServerOptions()...)
	testpb.RegisterTestServiceServer(gs, &testpb.Service{})
	require.NoError(t, s.RegisterLoadReports(gs))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, conn.Close())
		gs.Stop()
		wg.Wait()
	})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// The stream is exempt: were it not, it would hold the only permit
	// and the call below would be rejected.
	stream, err := v3orcaservicepb.NewOpenRcaServiceClient(conn).StreamCoreMetrics(ctx, &v3orcaservicepb.OrcaLoadReportRequest{})
	require.NoError(t, err)
	r, err := stream.Recv()
	require.NoError(t, err)
	assert.Zero(t, r.GetRpsFractional(), "no call yet")

	_, err = testpb.NewTestServiceClient(conn).Unary(ctx, &testpb.UnaryRequest{})
	require.NoError(t, err, "the out-of-band stream must not hold a permit")
	m := s.load.ServerMetrics()
	assert.InDelta(t, 1, m.AppUtilization, 1e-9)
	assert.Positive(t, m.QPS)
	assert.Zero(t, m.EPS)
	assert.Equal(t, float64(-1), m.CPUUtilization, "cpu_utilization is the application's")
}

// TestLoadReportsCountFailures checks that admitted calls failing for
// overload count in eps, and other failures do not.
func TestLoadReportsCountFailures(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		wantEPS bool
	}{
		{"deadline", status.Error(codes.DeadlineExceeded, "backend too slow"), true},
		{"resource exhausted", status.Error(codes.ResourceExhausted, "downstream shed"), true},
		{"not found", status.Error(codes.NotFound, "no such thing"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fail atomic.Bool
			fail.Store(true)
			svc := &testpb.Service{UnaryFunc: func(context.Context, *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
				if fail.Load() {
					return nil, tt.err
				}
				return &testpb.UnaryResponse{}, nil
			}}
			e := newEnv(t, svc, envConfig{server: []ServerOption{WithLoadReports()}, noClient: true})
			_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
			require.Equal(t, status.Code(tt.err), status.Code(err))
			fail.Store(false)
			var tr metadata.MD
			_, err = e.client.Unary(t.Context(), &testpb.UnaryRequest{}, grpc.Trailer(&tr))
			require.NoError(t, err)
			r := loadReportOf(t, tr)
			require.NotNil(t, r)
			assert.Equal(t, tt.wantEPS, r.GetEps() > 0, "eps %v", r.GetEps())
			assert.InDelta(t, 2, r.GetRpsFractional(), 1e-9, "two calls admitted within the first window")
		})
	}
}
