package redis_test

import (
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/ratelimit"
	sluiceredis "github.com/sluice-go/sluice/redis"
)

// A server whose per-caller quota, 100 calls per second with bursts of
// 200, holds across every replica that shares the Redis. While Redis is
// down each replica keeps to a third of the quota on its own, as there
// are three of them. (Not run: it needs a Redis.)
func Example() {
	rdb := goredis.NewClient(&goredis.Options{
		Addr:                  "redis:6379",
		ContextTimeoutEnabled: true, // lets WithTimeout bound each decision
	})
	defer rdb.Close()

	const replicas = 3
	fallback, err := ratelimit.NewKeyed(100.0/replicas, 200/replicas, ratelimit.WithMaxKeys(100_000))
	if err != nil {
		log.Fatal(err)
	}
	quota, err := sluiceredis.New(rdb, 100, 200,
		sluiceredis.WithPrefix("orders-api:quota:"),
		sluiceredis.WithTimeout(20*time.Millisecond),
		sluiceredis.WithFailurePolicy(sluiceredis.Fallback(fallback)),
	)
	if err != nil {
		log.Fatal(err)
	}
	srv, err := interceptor.NewServer(interceptor.WithCallerLimiter(callerkey.Metadata("x-api-key"), quota))
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	_ = grpc.NewServer(srv.ServerOptions()...)
}
