package middleware_test

import (
	"log"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/interceptor"
)

// sluice's rate limit and per-caller quota, enforced by go-grpc-middleware.
func Example() {
	rl, err := interceptor.NewRateLimiter(interceptor.RateLimit{PerSecond: 500},
		interceptor.WithCallerQuota(interceptor.PeerIP, interceptor.RateLimit{PerSecond: 20}))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(rl)),
		grpc.ChainStreamInterceptor(ratelimit.StreamServerInterceptor(rl)),
	)
	defer srv.Stop()
	// Register services, then srv.Serve(lis).
	// Output:
}
