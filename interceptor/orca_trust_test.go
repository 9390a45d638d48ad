package interceptor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// The load reports go to every client of the fleet: what one caller does
// must not make the server look overloaded to the others, or a single
// caller steers the whole fleet's traffic away from a healthy server.

// TestAttackLoadReportsCallerQuota is a caller that blows through its own
// quota (WithCallerLimiter). Its rejections say nothing about the
// server's capacity, so an honest caller's report must show no errors.
func TestAttackLoadReportsCallerQuota(t *testing.T) {
	e := newEnv(t, &testpb.Service{}, envConfig{noClient: true, server: []ServerOption{
		WithLoadReports(),
		callerRateLimit(callerkey.Metadata("caller"), RateLimit{PerSecond: 1, Burst: 1}, 0),
	}})
	as := func(caller string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "caller", caller)
	}
	for i := range 20 {
		_, err := e.client.Unary(as("attacker"), &testpb.UnaryRequest{})
		if i > 0 {
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "call %d over the attacker's quota", i)
		}
	}
	var tr metadata.MD
	_, err := e.client.Unary(as("honest"), &testpb.UnaryRequest{}, grpc.Trailer(&tr))
	require.NoError(t, err)
	r := loadReportOf(t, tr)
	require.NotNil(t, r)
	assert.Zero(t, r.GetEps(), "one caller's exhausted quota made the server report errors to everyone")
}

// TestAttackLoadReportsShortDeadlines is a caller that sends deadlines it
// knows the server cannot meet. The server was not slow (see
// TestAttackDeadlineCannotLowerLimit): its report must show no errors.
func TestAttackLoadReportsShortDeadlines(t *testing.T) {
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		return &testpb.UnaryResponse{}, doWorkFor(ctx, slowWork)
	}}
	e := newEnv(t, svc, envConfig{noClient: true, server: []ServerOption{WithLoadReports()}})
	call := func(d time.Duration, tr *metadata.MD) error {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		_, err := e.client.Unary(ctx, &testpb.UnaryRequest{}, grpc.Trailer(tr))
		e.awaitRelease(t, "server")
		return err
	}
	var tr metadata.MD
	for range 5 { // the server learns what a call takes
		require.NoError(t, call(time.Second, &tr))
	}
	for range 10 {
		require.Error(t, call(slowWork/4, &tr))
	}
	require.NoError(t, call(time.Second, &tr))
	r := loadReportOf(t, tr)
	require.NotNil(t, r)
	assert.Zero(t, r.GetEps(), "a caller's own deadlines made the server report errors to everyone")
}

// TestAttackUnknownMethodsLoadReports is a caller that calls made-up
// methods of a server with an UnknownServiceHandler and load reports:
// every name must go to the one "_OTHER" limiter.
func TestAttackUnknownMethodsLoadReports(t *testing.T) {
	tests := []struct {
		name string
		opts []ServerOption
	}{
		{"load reports", []ServerOption{WithLoadReports()}},
		{"and early rejection", []ServerOption{WithLoadReports(), WithEarlyRejection()}},
		{"and a dry run", []ServerOption{WithLoadReports(), WithDryRun()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, &testpb.Service{}, envConfig{noClient: true,
				server:     tt.opts,
				serverOpts: []grpc.ServerOption{grpc.UnknownServiceHandler(drainUnknown)}})
			const names = 200
			for i := range names {
				method := fmt.Sprintf("/attacker.Svc/Method%d", i)
				require.NoError(t, e.conn.Invoke(t.Context(), method, &testpb.UnaryRequest{}, &testpb.UnaryResponse{}), method)
				e.awaitRelease(t, "server")
			}
			got := limiterNames(e.srv.core)
			assert.Len(t, got, 1, "%d made-up names made %d limiters", names, len(got))
			assert.Contains(t, got, otherMethod)
			assert.Empty(t, *e.srv.tab.Load().routes.Load(), "routes made for made-up names")
			n := 0
			e.srv.load.loads.Range(func(any, any) bool { n++; return true })
			assert.Equal(t, 1, n, "loads kept for made-up names")
		})
	}
}

// TestAttackLoadReportsOversizeStreams is a caller whose stream messages
// are over the server's receive maximum: grpc-go refuses them with
// RESOURCE_EXHAUSTED, which the handler returns. The caller's bytes caused
// it (see TestAttackOversizeStreams): an honest caller's report must show
// no errors.
func TestAttackLoadReportsOversizeStreams(t *testing.T) {
	e := newEnv(t, &testpb.Service{}, envConfig{
		noClient:   true,
		server:     []ServerOption{WithLoadReports()},
		serverOpts: []grpc.ServerOption{grpc.MaxRecvMsgSize(maxMsg)},
	})
	for range 10 {
		st, err := e.client.ClientStream(t.Context())
		require.NoError(t, err)
		_ = st.Send(&testpb.ClientStreamRequest{Payload: big})
		_, err = st.CloseAndRecv()
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "the attack's call: %v", err)
		e.awaitRelease(t, "server")
	}
	var tr metadata.MD
	st, err := e.client.ClientStream(t.Context(), grpc.Trailer(&tr))
	require.NoError(t, err)
	require.NoError(t, st.Send(&testpb.ClientStreamRequest{}))
	_, err = st.CloseAndRecv()
	require.NoError(t, err)
	r := loadReportOf(t, tr)
	require.NotNil(t, r)
	assert.Zero(t, r.GetEps(), "one caller's oversize messages made the server report errors to everyone")
}
