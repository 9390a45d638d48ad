package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice/limiter"
)

// fixedClock is a Clock stopped at one instant, so that the examples'
// output does not depend on how fast they run. Real code uses the default
// SystemClock.
type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() (time.Time, error) { return c.t, nil }

// A TokenBucket admits a burst of its capacity, then requests at its rate.
// A refused request learns when to come back, which a gRPC server puts in
// the grpc-retry-pushback-ms trailer.
func ExampleTokenBucket() {
	clk := &fixedClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b, err := limiter.NewTokenBucket(10, 3, // 10/s, bursts of 3
		limiter.WithTokenBucketClock(func() time.Time { return clk.t }))
	if err != nil {
		panic(err)
	}
	for range 4 {
		d := b.Decide()
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	clk.t = clk.t.Add(100 * time.Millisecond)
	fmt.Println("100ms later:", b.Allow())
	// Output:
	// allowed=true remaining=2 retry-after=0s
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=100ms
	// 100ms later: true
}

// Wait smooths a burst out instead of refusing it: callers queue in order
// and are let through at the rate. A caller whose deadline would pass
// before its turn is refused at once.
func ExampleTokenBucket_Wait() {
	b, _ := limiter.NewTokenBucket(1, 1)
	fmt.Println(b.Wait(context.Background())) // the bucket starts full

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	fmt.Println(b.Wait(ctx)) // the next token is a second away
	// Output:
	// <nil>
	// limiter: rate limit exceeded
}

// NewTokenBucket refuses a configuration it cannot honour, saying why.
func ExampleNewTokenBucket() {
	_, err := limiter.NewTokenBucket(-1, 10)
	fmt.Println(err)
	// Output: limiter: TokenBucket rate is -1, must be a finite number > 0
}

// A KeyedGCRA gives every client its own rate and burst: one client
// exhausting its budget does not touch another's.
func ExampleKeyedGCRA() {
	clk := &fixedClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	g, err := limiter.NewKeyedGCRA(2, 2, limiter.WithGCRAClock(clk)) // 2/s, bursts of 2
	if err != nil {
		panic(err)
	}
	for _, client := range []string{"alice", "alice", "alice", "bob"} {
		d, err := g.Allow(client)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: allowed=%v retry-after=%v\n", client, d.Allowed, d.RetryAfter)
	}
	_, err = g.Allow("")
	fmt.Println(err)
	// Output:
	// alice: allowed=true retry-after=0s
	// alice: allowed=true retry-after=0s
	// alice: allowed=false retry-after=500ms
	// bob: allowed=true retry-after=0s
	// limiter: empty rate limit key
}

// Cleanup forgets the clients that have their whole burst back: they are
// indistinguishable from clients never seen, so no decision changes, and
// the table holds only the clients active lately.
func ExampleKeyedGCRA_Cleanup() {
	clk := &fixedClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	g, _ := limiter.NewKeyedGCRA(1, 5, limiter.WithGCRAClock(clk))
	_, _ = g.Allow("quiet") // full again in 1s
	for range 5 {
		_, _ = g.Allow("busy") // full again in 5s
	}
	clk.t = clk.t.Add(2 * time.Second)
	removed, _ := g.Cleanup()
	fmt.Println("removed", removed, "tracked", g.Len())
	// Output: removed 1 tracked 1
}

// RunCleanup runs Cleanup on a ticker the caller owns, until the context
// ends: nothing runs in the background that the caller cannot stop.
func ExampleKeyedGCRA_RunCleanup() {
	g, _ := limiter.NewKeyedGCRA(100, 10)
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
