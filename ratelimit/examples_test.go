package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/sluice-go/sluice/ratelimit"
)

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
