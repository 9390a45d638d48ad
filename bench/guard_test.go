package bench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/go-kratos/aegis/ratelimit"
	"github.com/go-kratos/aegis/ratelimit/bbr"
	"github.com/zeromicro/go-zero/core/load"

	"github.com/sluice-go/sluice/limiter"
)

// finishErrors are the call results a Guard must accept: success, an error
// of the request, cancellation and an expired deadline.
var finishErrors = []error{
	nil,
	errors.New("not found"),
	context.Canceled,
	context.DeadlineExceeded,
}

func TestPeers(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range Peers() {
		if p.Name == "" || seen[p.Name] {
			t.Errorf("peer name %q is empty or repeated", p.Name)
		}
		seen[p.Name] = true
		if p.New == nil {
			t.Errorf("peer %s has no constructor", p.Name)
		} else if a, b := p.New(), p.New(); a == b {
			t.Errorf("peer %s: New returned the same Guard twice", p.Name)
		}
	}
}

// TestAdmitFinish admits calls on every default peer, two at a time, and
// finishes them with each kind of result. Well below every peer's limit,
// none may be rejected.
func TestAdmitFinish(t *testing.T) {
	for _, p := range Peers() {
		t.Run(p.Name, func(t *testing.T) {
			g := p.New()
			for _, result := range finishErrors {
				// A call that ends in cancellation or at its deadline ends
				// with its context done, which some adapters look at.
				ctx, cancel := context.WithCancel(t.Context())
				if errors.Is(result, context.DeadlineExceeded) {
					ctx, cancel = context.WithTimeout(t.Context(), time.Millisecond)
				}
				first, err := g.Admit(ctx)
				if err != nil {
					cancel()
					t.Fatalf("Admit: %v", err)
				}
				second, err := g.Admit(ctx)
				if err != nil {
					cancel()
					t.Fatalf("second Admit: %v", err)
				}
				switch {
				case errors.Is(result, context.Canceled):
					cancel()
				case errors.Is(result, context.DeadlineExceeded):
					<-ctx.Done()
				}
				first(result)
				second(nil)
				cancel()
			}
		})
	}
}

// TestAdmitConcurrently drives every default peer from several goroutines,
// for the race detector. Rejections are possible in principle (the
// CPU-based peers react to the machine's load) but must be ErrRejected.
func TestAdmitConcurrently(t *testing.T) {
	const goroutines, calls = 4, 500
	for _, p := range Peers() {
		t.Run(p.Name, func(t *testing.T) {
			g := p.New()
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for range calls {
						finish, err := g.Admit(t.Context())
						if err != nil {
							if !errors.Is(err, ErrRejected) {
								t.Errorf("Admit: %v does not wrap ErrRejected", err)
							}
							continue
						}
						finish(nil)
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestRejectAtLimit configures each peer so that it reaches its limit
// after a few calls, checks that the next call is rejected with
// ErrRejected and the peer's own error, and that once the calls held
// finish, calls are admitted again.
func TestRejectAtLimit(t *testing.T) {
	cases := []struct {
		name string
		g    Guard
		// admit calls are admitted and held; release of them then finish
		// before the rejected call.
		admit, release int
		peerErr        error
	}{
		{
			name:    "sluice",
			g:       &Sluice{Limiter: fixedLimiter(t, 1)},
			admit:   1,
			peerErr: limiter.ErrLimitExceeded,
		},
		{
			name:    "failsafe",
			g:       &Failsafe{Limiter: adaptivelimiter.NewBuilder[any]().WithLimits(1, 1, 1).Build()},
			admit:   1,
			peerErr: adaptivelimiter.ErrExceeded,
		},
		{
			// A CPU threshold of 0 makes the shedder consider the machine
			// always overloaded. It then rejects once the moving average
			// of calls in flight, updated as calls finish, exceeds its
			// capacity estimate: at most 10 calls for a shedder that has
			// not yet completed a 100 ms bucket, fewer afterwards.
			name:    "gozero",
			g:       &GoZero{Shedder: load.NewAdaptiveShedder(load.WithCpuThreshold(0))},
			admit:   100,
			release: 30,
			peerErr: load.ErrServiceOverloaded,
		},
		{
			// Likewise, BBR then rejects any call beyond the first two in
			// flight until it has counted enough completed calls to raise
			// its capacity estimate: none complete here before the check.
			name:    "kratos",
			g:       &Kratos{Limiter: bbr.NewLimiter(bbr.WithCPUThreshold(0))},
			admit:   2,
			peerErr: ratelimit.ErrLimitExceed,
		},
		{name: "xsemaphore", g: NewXSemaphore(1), admit: 1},
		{name: "chan", g: NewChan(1), admit: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			var held []func(error)
			for i := range c.admit {
				finish, err := c.g.Admit(ctx)
				if err != nil {
					t.Fatalf("Admit %d of %d: %v", i+1, c.admit, err)
				}
				held = append(held, finish)
			}
			for _, finish := range held[:c.release] {
				finish(nil)
			}
			held = held[c.release:]

			finish, err := c.g.Admit(ctx)
			if err == nil {
				finish(nil)
				t.Fatalf("Admit at the limit succeeded")
			}
			if !errors.Is(err, ErrRejected) {
				t.Errorf("Admit at the limit: %v does not wrap ErrRejected", err)
			}
			if c.peerErr != nil && !errors.Is(err, c.peerErr) {
				t.Errorf("Admit at the limit: %v does not wrap %v", err, c.peerErr)
			}

			for _, finish := range held {
				finish(nil)
			}
			finish, err = c.g.Admit(ctx)
			if err != nil {
				t.Fatalf("Admit after the calls finished: %v", err)
			}
			finish(nil)
		})
	}
}

func fixedLimiter(t testing.TB, n int) *limiter.Limiter {
	t.Helper()
	a, err := limiter.FixedConfig{Limit: n}.New()
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(limiter.WithAlgorithm(a))
	if err != nil {
		t.Fatal(err)
	}
	return l
}
