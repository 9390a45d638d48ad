package redis_test

import (
	"log"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/redis"
)

// The README's fleet-wide quota: one quota per caller, kept in Redis.
func Example_readme() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
	quota, err := redis.New(rdb, 100, 200) // 100 calls/s per caller, bursts of 200
	if err != nil {
		log.Fatal(err)
	}
	limits, err := interceptor.NewServer(interceptor.WithCallerLimiter(callerkey.Metadata("x-api-key"), quota))

	if err != nil {
		log.Fatal(err)
	}
	defer limits.Close()
	_ = grpc.NewServer(limits.ServerOptions()...)
}
