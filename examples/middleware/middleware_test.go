package middleware

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The compiler checks that sluice's RateLimiter is a go-grpc-middleware
// Limiter.
var _ ratelimit.Limiter = (*interceptor.RateLimiter)(nil)

// TestGoGRPCMiddleware runs sluice's rate limit inside go-grpc-middleware's
// interceptor over real gRPC: two calls in a burst of two pass, the third
// is RESOURCE_EXHAUSTED with sluice's reason in the message.
func TestGoGRPCMiddleware(t *testing.T) {
	rl, err := interceptor.NewRateLimiter(interceptor.RateLimit{PerSecond: 0.001, Burst: 2})
	require.NoError(t, err)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(rl)),
		grpc.ChainStreamInterceptor(ratelimit.StreamServerInterceptor(rl)),
	)
	testpb.RegisterTestServiceServer(srv, &testpb.Service{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	defer func() { srv.Stop(); wg.Wait() }()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { assert.NoError(t, conn.Close()) }()
	client := testpb.NewTestServiceClient(conn)

	for range 2 {
		_, err := client.Unary(context.Background(), &testpb.UnaryRequest{})
		require.NoError(t, err)
	}
	_, err = client.Unary(context.Background(), &testpb.UnaryRequest{})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "sluice: rate limit 0.001/s")
}
