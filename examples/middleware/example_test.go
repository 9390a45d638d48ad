package middleware_test

import (
	"log"

	grpcratelimit "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/examples/middleware"
	"github.com/sluice-go/sluice/ratelimit"
)

// sluice's rate limit and per-caller quota, enforced by go-grpc-middleware.
func Example() {
	rate, err := ratelimit.NewKeyed(500, 500) // 500 calls a second in all
	if err != nil {
		log.Fatal(err)
	}
	quota, err := ratelimit.NewKeyed(20, 20) // 20 a second per caller
	if err != nil {
		log.Fatal(err)
	}
	rl := middleware.Limiter{Rate: rate, Callers: quota, Key: callerkey.PeerIP}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpcratelimit.UnaryServerInterceptor(rl)),
		grpc.ChainStreamInterceptor(grpcratelimit.StreamServerInterceptor(rl)),
	)
	defer srv.Stop()
	// Register services, then srv.Serve(lis).
	// Output:
}
