package interceptor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testpb"
)

// TestAttackTapRejectionsInLoadReports checks that the calls the tap
// rejects count in the load reports' eps, as the interceptor's do.
func TestAttackTapRejectionsInLoadReports(t *testing.T) {
	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		if req.GetPayload() == "block" {
			return &testpb.UnaryResponse{}, b.wait(ctx)
		}
		return &testpb.UnaryResponse{}, nil
	}}
	e := newEnv(t, svc, envConfig{noClient: true,
		server: []Option{WithDefault(fixed(1)), WithEarlyRejection(), WithLoadReports()}})
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")

	done := make(chan error, 1)
	go func() {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{Payload: "block"})
		done <- err
	}()
	b.awaitEntered(t, 1)
	const rejected = 5
	for range rejected {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		require.Equal(t, codes.ResourceExhausted, status.Code(err))
		e.awaitRejection(t, "server:limit")
	}
	close(b.release)
	require.NoError(t, <-done)
	e.awaitRelease(t, "server")

	var tr metadata.MD
	_, err = e.client.Unary(t.Context(), &testpb.UnaryRequest{}, grpc.Trailer(&tr))
	require.NoError(t, err)
	e.awaitRelease(t, "server")
	r := loadReportOf(t, tr)
	require.NotNil(t, r)
	// At least a window's worth: rejected calls over at most two windows.
	assert.GreaterOrEqual(t, r.GetEps(), float64(rejected)/(2*loadWindow.Seconds()), "the tap's rejections are missing from eps")
}
