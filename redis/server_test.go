package redis

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// replica starts a gRPC server on loopback TCP whose per-caller quota is
// l, keyed by the x-api-key header, and returns a client of it.
func replica(t *testing.T, l *Limiter) testpb.TestServiceClient {
	t.Helper()
	return serve(t, interceptor.WithCallerLimiter(callerkey.Metadata("x-api-key"), l))
}

// serve starts a gRPC server on loopback TCP with the interceptors of
// opts, and returns a client of it.
func serve(t *testing.T, opts ...interceptor.ServerOption) testpb.TestServiceClient {
	t.Helper()
	srv, err := interceptor.NewServer(opts...)
	require.NoError(t, err)
	gs := grpc.NewServer(srv.ServerOptions()...)
	testpb.RegisterTestServiceServer(gs, &testpb.Service{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		<-served
		_ = srv.Close()
	})
	return testpb.NewTestServiceClient(conn)
}

// TestFleetQuota: two replicas, each with a Limiter of its own on one
// Redis, enforce one quota: a caller's burst spent on one replica is spent
// on the other, and callers stay apart.
func TestFleetQuota(t *testing.T) {
	s := startRedis(t)
	var clients []testpb.TestServiceClient
	for range 2 {
		l, err := New(s.client(t), 0.001, 2, WithTimeout(testTimeout))
		require.NoError(t, err)
		clients = append(clients, replica(t, l))
	}
	call := func(replica int, key string) codes.Code {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key)
		_, err := clients[replica].Unary(ctx, &testpb.UnaryRequest{})
		return status.Code(err)
	}
	for i, tt := range []struct {
		replica int
		key     string
		want    codes.Code
	}{
		{0, "alice", codes.OK},
		{1, "alice", codes.OK},
		{0, "alice", codes.ResourceExhausted}, // the burst of 2 is spent across the fleet
		{1, "alice", codes.ResourceExhausted},
		{1, "bob", codes.OK},
	} {
		assert.Equal(t, tt.want, call(tt.replica, tt.key), "call %d: %s on replica %d", i, tt.key, tt.replica)
	}
}
