package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice/limiter"
)

func Example() {
	l, err := limiter.New() // adaptive AIMD, no queue
	if err != nil {
		panic(err)
	}
	handle := func(ctx context.Context) error {
		tok, ok := l.TryAcquire()
		if !ok {
			return errors.New("overloaded, try later")
		}
		defer tok.Release(limiter.Success)
		// ... do the work the limit protects ...
		return nil
	}
	fmt.Println(handle(context.Background()), l.Inflight())
	// Output: <nil> 0
}

// A Limiter with a wait queue: callers that find every permit taken wait
// for one, within their deadline, unless the queue is full.
func ExampleLimiter_Acquire() {
	fixed, _ := limiter.FixedConfig{Limit: 1}.New()
	l, err := limiter.New(limiter.WithAlgorithm(fixed), limiter.WithQueue(limiter.Queue{Size: 10}))
	if err != nil {
		panic(err)
	}
	held, _ := l.TryAcquire()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(ctx) // the only permit is held: waits, then times out
	fmt.Println(err)

	held.Release(limiter.Success)
	tok, err := l.Acquire(context.Background())
	fmt.Println(err)
	tok.Release(limiter.Success)
	// Output:
	// context deadline exceeded
	// <nil>
}

// Lowering the limit below the permits in flight records a debt: the next
// releases pay it instead of freeing permits.
func ExampleLimiter_Pin() {
	fixed, _ := limiter.FixedConfig{Limit: 3}.New()
	l, _ := limiter.New(limiter.WithAlgorithm(fixed))
	a, _ := l.TryAcquire()
	b, _ := l.TryAcquire()

	_ = l.Pin(1)
	fmt.Println("limit", l.Limit(), "in flight", l.Inflight())
	a.Release(limiter.Success) // pays the debt
	_, ok := l.TryAcquire()
	fmt.Println("admitted:", ok)
	b.Release(limiter.Success)
	c, ok := l.TryAcquire()
	fmt.Println("admitted:", ok)
	c.Release(limiter.Success)
	// Output:
	// limit 1 in flight 2
	// admitted: false
	// admitted: true
}

func ExampleAIMDConfig_New() {
	_, err := limiter.AIMDConfig{BackoffRatio: 1.2}.New()
	fmt.Println(err)

	// Seed semantics: the rule applied to every call, with a fixed timeout.
	aimd, _ := limiter.AIMDConfig{InitialLimit: 10, Timeout: time.Second, PerCall: true}.New()
	fmt.Println(aimd.Update(limiter.Sample{RTT: 2 * time.Second, Inflight: 10, Outcome: limiter.Success}))
	// Output:
	// limiter: AIMDConfig.BackoffRatio is 1.2, must be in [0.5, 1)
	// 9
}

// A Limiter whose caller records each call's latency: Granted tells when
// the call started, Release its RTT.
func ExampleToken_Release() {
	l, err := limiter.New()
	if err != nil {
		panic(err)
	}
	tok, ok := l.TryAcquire()
	if !ok {
		return
	}
	start := tok.Granted()       // when the call started: no clock read of its own
	time.Sleep(time.Millisecond) // the call
	rtt := tok.Release(limiter.Success)
	fmt.Println(!start.IsZero(), rtt >= time.Millisecond)
	// Output: true true
}
