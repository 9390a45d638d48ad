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

	"github.com/sluice-go/sluice/internal/testbed/testpb"
	sluiceratelimit "github.com/sluice-go/sluice/ratelimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The compiler checks that Limiter is a go-grpc-middleware Limiter.
var _ ratelimit.Limiter = Limiter{}

// TestGoGRPCMiddleware runs sluice's rate limit inside go-grpc-middleware's
// interceptor over real gRPC: two calls in a burst of two pass, the third
// is RESOURCE_EXHAUSTED with sluice's reason in the message.
func TestGoGRPCMiddleware(t *testing.T) {
	rate, err := sluiceratelimit.NewKeyed(0.001, 2)
	require.NoError(t, err)
	rl := Limiter{Rate: rate}
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
	assert.Contains(t, status.Convert(err).Message(), "rate limit")
}

// TestLimiterRefundsTheQuota: a call the shared rate turns away gives its
// caller's token back, so the caller's next call is charged only once.
func TestLimiterRefundsTheQuota(t *testing.T) {
	rate, err := sluiceratelimit.NewKeyed(0.001, 1)
	require.NoError(t, err)
	quota, err := sluiceratelimit.NewKeyed(0.001, 2)
	require.NoError(t, err)
	rl := Limiter{Rate: rate, Callers: quota, Key: func(context.Context, string) string { return "a" }}
	ctx := context.Background()
	require.NoError(t, rl.Limit(ctx), "within the rate and the quota")
	require.ErrorContains(t, rl.Limit(ctx), "rate limit", "over the rate: the quota's token comes back")
	d, err := quota.Allow("a")
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the refunded token")
	assert.ErrorContains(t, rl.Limit(ctx), "caller quota", "now over the quota")
}
