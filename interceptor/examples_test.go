package interceptor_test

import (
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/limiter"
	"github.com/sluice-go/sluice/ratelimit"
)

// The one line on the server: every method gets an adaptive limiter.
func ExampleServer_ServerOptions() {
	limits, err := interceptor.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(limits.ServerOptions()...)
	// Register services, then srv.Serve(lis).
	srv.Stop()
	// Output:
}

// The one line on the client: calls back off when the servers push back.
func ExampleClient_DialOptions() {
	client, err := interceptor.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient("dns:///orders.internal:443",
		append(client.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// Output:
}

// Per-method limits: a method entry wins over its service's entry, which
// wins over the default.
func ExampleWithMethod() {
	srv, err := interceptor.NewServer(
		// Reports scan a large table: at most 4 at a time, and a short
		// queue so a burst waits instead of failing.
		interceptor.WithMethod("/shop.v1.Reports/Generate", interceptor.Limit{
			Algorithm: limiter.FixedConfig{Limit: 4},
			Queue:     limiter.Queue{Size: 8},
		}),
		// Every method of the order service shares one adaptive limiter.
		interceptor.WithMethod("/shop.v1.Orders/", interceptor.Limit{
			Algorithm: limiter.AIMDConfig{MaxLimit: 200},
		}),
		interceptor.WithExempt("/shop.v1.Admin/"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	_ = grpc.NewServer(srv.ServerOptions()...)
	// Output:
}

// A fresh server admits every call until the first returns. In front of
// a slow downstream whose capacity you know, about 64 calls of 100 ms at
// once here, starting from twice that keeps a start into overload from
// queueing everything that arrived before the first call returned.
func ExampleWithDefault_initialLimit() {
	const capacity = 64
	srv, err := interceptor.NewServer(interceptor.WithDefault(interceptor.Limit{
		Algorithm: limiter.AIMDConfig{InitialLimit: 2 * capacity},
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	_ = grpc.NewServer(srv.ServerOptions()...)
	// Output:
}

// Configuration mistakes are errors at construction, all at once.
func ExampleNewServer_errors() {
	_, err := interceptor.NewServer(
		interceptor.WithMethod("shop.v1.Orders/Create", interceptor.Limit{}),
		interceptor.WithDefault(interceptor.Limit{
			Algorithm: limiter.AIMDConfig{BackoffRatio: 1.5},
		}),
	)
	fmt.Println(err)
	// Output:
	// interceptor: WithDefault: limiter: AIMDConfig.BackoffRatio is 1.5, must be in [0.5, 1)
	// interceptor: method name "shop.v1.Orders/Create" does not start with '/': want "/package.Service/Method" or "/package.Service/"
}

// A custom pushback: ask rejected callers to wait a fixed second.
func ExampleWithPushback() {
	_, err := interceptor.NewServer(interceptor.WithPushback(func(interceptor.LimiterState) time.Duration {
		return time.Second
	}))
	fmt.Println(err)
	// Output: <nil>
}

// Rate limits beside the adaptive concurrency limit: a fixed rate for an
// expensive method, and a quota per API key for everything.
func ExampleWithCallerLimiter() {
	quota, err := ratelimit.NewKeyed(20, 40) // per API key: 20 calls a second, bursts of 40
	if err != nil {
		log.Fatal(err)
	}
	limits, err := interceptor.NewServer(
		interceptor.WithMethod("/shop.v1.Search/Query", interceptor.Limit{
			Rate: interceptor.RateLimit{PerSecond: 200, Burst: 50},
		}),
		interceptor.WithCallerLimiter(callerkey.Metadata("x-api-key"), quota),
	)
	if err != nil {
		log.Fatal(err)
	}
	_ = grpc.NewServer(limits.ServerOptions()...)
	// Output:
}

// Priorities named by a header that only the edge proxies may set: the
// header of any other caller is ignored, and even the proxies cannot
// Fair share: while a limiter is full, each tenant named by the verified
// client certificate gets its share, so one tenant's flood cannot crowd
// out the others; a tenant alone may use the whole limit.
func ExampleWithFairShare() {
	limits, err := interceptor.NewServer(
		interceptor.WithFairShare(callerkey.PeerIdentity), // or a header your own auth proxy sets
	)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(limits.ServerOptions()...)
	srv.Stop()
	// Output:
}

// claim more than default priority for a call (the zero MaxClaimed).
func ExampleWithPriorities() {
	limits, err := interceptor.NewServer(interceptor.WithPriorities(interceptor.Priorities{
		Header:       "x-priority",
		TrustedPeers: []string{"10.20.0.0/16", "fd00:20::/32"},
	}))
	if err != nil {
		log.Fatal(err)
	}
	_ = grpc.NewServer(limits.ServerOptions()...)
	// Output:
}

// A server that should tell rejected callers not to retry at all.
func ExampleDoNotRetry() {
	_, err := interceptor.NewServer(interceptor.WithPushback(func(interceptor.LimiterState) time.Duration {
		return interceptor.DoNotRetry
	}))
	fmt.Println(err)
	// Output: <nil>
}

// Large requests: reject calls over the limit before grpc-go reads and
// decodes them. ServerOptions then also installs a tap handle.
func ExampleWithEarlyRejection() {
	limits, err := interceptor.NewServer(interceptor.WithEarlyRejection())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(limits.ServerOptions()), "server options: two interceptors and the tap")
	srv := grpc.NewServer(limits.ServerOptions()...)
	srv.Stop()
	// Output: 3 server options: two interceptors and the tap
}
