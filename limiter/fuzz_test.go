package limiter

import (
	"context"
	"testing"
)

// FuzzLimiterOps drives a Limiter with an arbitrary sequence of operations
// (acquire, queued acquire with a done context, release with any outcome,
// untimed release, pin to any limit, unpin) and checks the invariant users
// rely on: a permit is only granted below the limit, and once every token
// is back, nothing is in flight and the full limit is available.
//
// Each operation is one byte: the low 3 bits pick the operation, the rest
// its argument.
func FuzzLimiterOps(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, 2, 2})
	f.Add([]byte{0, 0, 0, 4 | 1<<3, 2, 2, 5, 2})             // pin to 1 below in-flight, then release
	f.Add([]byte{4, 0, 3, 1, 5, 0, 2 | 1<<3, 2 | 2<<3})      // pin to 0, queued acquire, unpin
	f.Add([]byte{0, 0, 6 | 3<<3, 6 | 1<<3, 4 | 31<<3, 0, 0}) // untimed releases
	f.Fuzz(func(t *testing.T, ops []byte) {
		alg, err := newAIMD(AIMDConfig{InitialLimit: 4, MinLimit: 1, MaxLimit: 16})
		if err != nil {
			t.Fatal(err)
		}
		l, err := New(WithAlgorithm(alg), WithQueue(Queue{Size: 2}))
		if err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(context.Background())
		cancel()
		var held []Token
		take := func(tok Token) {
			if in, lim := l.Inflight(), l.Limit(); in > lim {
				t.Fatalf("granted a permit with %d in flight over a limit of %d", in, lim)
			}
			held = append(held, tok)
		}
		release := func(i int, o Outcome, timed bool) {
			if len(held) == 0 {
				return
			}
			i %= len(held)
			if timed {
				held[i].Release(o)
			} else {
				held[i].ReleaseUntimed(o)
			}
			held[i].Release(o) // a second release must do nothing
			held = append(held[:i], held[i+1:]...)
		}
		for _, op := range ops {
			arg := int(op >> 3)
			switch op & 7 {
			case 0, 1:
				if tok, ok := l.TryAcquire(); ok {
					take(tok)
				}
			case 2:
				release(arg, Outcome(arg%3), true)
			case 3:
				// The context is done: a free permit may still be taken
				// at once, otherwise the caller leaves without one.
				if tok, err := l.Acquire(done); err == nil {
					take(tok)
				}
			case 4:
				if err := l.Pin(arg); err != nil {
					t.Fatal(err)
				}
			case 5:
				l.Unpin()
			case 6:
				release(arg, Outcome(arg%3), false)
			case 7:
				if l.isPinned() {
					l.Unpin()
				} else if err := l.Pin(arg % 3); err != nil {
					t.Fatal(err)
				}
			}
			if l.QueueLen() != 0 {
				t.Fatalf("%d callers queued with no goroutine waiting", l.QueueLen())
			}
		}
		for i := range held {
			held[i].Release(Ignored)
		}
		if in := l.Inflight(); in != 0 {
			t.Fatalf("%d in flight after every token came back (limit %d)", in, l.Limit())
		}
		if avail := state(l.state.Load()).avail(); avail != l.Limit() {
			t.Fatalf("%d permits available after every token came back, want the limit %d", avail, l.Limit())
		}
	})
}
