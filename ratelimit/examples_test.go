package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice/ratelimit"
)

// A Bucket admits a burst, then requests at its rate. A refused request
// learns when to come back, which a gRPC server puts in the
// grpc-retry-pushback-ms trailer. (The rate here is one an hour so that the
// output, rounded to the minute, does not depend on how fast it runs.)
func ExampleBucket() {
	b, err := ratelimit.NewBucket(1.0/3600, 3) // 1 an hour, bursts of 3
	if err != nil {
		panic(err)
	}
	for range 4 {
		d := b.Decide()
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter.Round(time.Minute))
	}
	// Output:
	// allowed=true remaining=2 retry-after=0s
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=1h0m0s
}

// Wait smooths a burst out instead of refusing it: callers queue in order
// and are let through at the rate. A caller whose deadline would pass
// before its turn is refused at once.
func ExampleBucket_Wait() {
	b, _ := ratelimit.NewBucket(1, 1)
	fmt.Println(b.Wait(context.Background())) // the bucket starts full

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	fmt.Println(b.Wait(ctx)) // the next token is a second away
	// Output:
	// <nil>
	// ratelimit: rate limit exceeded
}

// NewBucket refuses a configuration it cannot honour, saying why.
func ExampleNewBucket() {
	_, err := ratelimit.NewBucket(-1, 10)
	fmt.Println(err)
	// Output: ratelimit: Bucket rate is -1, must be a finite number > 0
}

// A Keyed gives every client its own rate and burst: one client
// exhausting its budget does not touch another's.
func ExampleKeyed() {
	g, err := ratelimit.NewKeyed(1.0/60, 2) // 1 a minute, bursts of 2
	if err != nil {
		panic(err)
	}
	for _, client := range []string{"alice", "alice", "alice", "bob"} {
		d, err := g.Allow(client)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: allowed=%v retry-after=%v\n", client, d.Allowed, d.RetryAfter.Round(time.Second))
	}
	_, err = g.Allow("")
	fmt.Println(err)
	// Output:
	// alice: allowed=true retry-after=0s
	// alice: allowed=true retry-after=0s
	// alice: allowed=false retry-after=1m0s
	// bob: allowed=true retry-after=0s
	// ratelimit: empty rate limit key
}

// Cleanup forgets only the clients that have their whole burst back,
// which are indistinguishable from clients never seen. Clients still
// earning back what they spent are kept, so no decision changes.
func ExampleKeyed_Cleanup() {
	g, _ := ratelimit.NewKeyed(1.0/60, 5) // 1 a minute, bursts of 5
	_, _ = g.Allow("alice")
	_, _ = g.Allow("bob")
	removed, _ := g.Cleanup() // both are a minute from their whole burst
	fmt.Println("removed", removed, "tracked", g.Len())
	// Output: removed 0 tracked 2
}

// RunCleanup runs Cleanup on a ticker the caller owns, until the context
// ends: nothing runs in the background that the caller cannot stop.
func ExampleKeyed_RunCleanup() {
	g, _ := ratelimit.NewKeyed(100, 10)
	ctx, cancel := context.WithCancel(context.Background())
	ticker := time.NewTicker(time.Minute)
	defer ticker.Stop()
	done := make(chan error)
	go func() { done <- g.RunCleanup(ctx, ticker.C) }()

	// ... serve requests, calling g.Allow(clientKey) ...

	cancel() // at shutdown
	fmt.Println(<-done)
	// Output: context canceled
}
