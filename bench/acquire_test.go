package bench

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kratos/aegis/ratelimit"

	"github.com/sluice-go/sluice/limiter"
)

// The micro benchmarks time one admission and its release, well below the
// limit, for each peer: serially (BenchmarkAcquireRelease) and from
// GOMAXPROCS goroutines at once (BenchmarkAcquireReleaseParallel).
//
// Every peer is measured the same way:
//
//   - it is built by the constructor Peers uses, fresh for each run of
//     the benchmark function, and warmed up (see warmUp);
//   - the loop calls the library itself, the calls its own gRPC
//     interceptor or executor makes, not Guard.Admit: the finish closure
//     Admit returns costs an allocation that would hide the differences
//     being measured;
//   - each call is reported as a success, with no error;
//   - a rejection fails the benchmark. Serial loops fail at once; parallel
//     ones count rejections and fail after RunParallel, since b.Fatal may
//     not be called from its goroutines.
//
// The parallel benchmark holds at most GOMAXPROCS permits at a time, so it
// is valid while GOMAXPROCS (or -cpu) stays well below 20: failsafe's
// initial limit, the smallest of any peer, which its default max limit
// factor lowers by about one a second while the load stays small.

// acquireRelease lists the sub-benchmarks, in the order and under the
// names of Peers (TestAcquireReleaseCoversPeers checks it).
var acquireRelease = []struct {
	name             string
	serial, parallel func(*testing.B)
}{
	{"sluice", benchSluice, benchSluiceParallel},
	{"failsafe", benchFailsafe, benchFailsafeParallel},
	{"gozero", benchGoZero, benchGoZeroParallel},
	{"kratos", benchKratos, benchKratosParallel},
	{"xsemaphore", benchXSemaphore, benchXSemaphoreParallel},
	{"chan", benchChan, benchChanParallel},
}

func BenchmarkAcquireRelease(b *testing.B) {
	for _, bm := range acquireRelease {
		b.Run(bm.name, bm.serial)
	}
}

func BenchmarkAcquireReleaseParallel(b *testing.B) {
	for _, bm := range acquireRelease {
		b.Run(bm.name, bm.parallel)
	}
}

func TestAcquireReleaseCoversPeers(t *testing.T) {
	peers := Peers()
	if len(peers) != len(acquireRelease) {
		t.Fatalf("%d peers, %d micro benchmarks", len(peers), len(acquireRelease))
	}
	for i, p := range peers {
		if got := acquireRelease[i].name; got != p.Name {
			t.Errorf("micro benchmark %d is %q, peer %d is %q", i, got, i, p.Name)
		}
	}
}

// warmUpFor is how long warmUp drives a peer.
const warmUpFor = 150 * time.Millisecond

// warmUp admits and finishes calls through g, one at a time, for
// warmUpFor, so that every peer is timed past its cold start. Kratos's BBR
// needs it: it estimates capacity from completed 100 ms buckets, and until
// the first one completes, a BBR that sees CPU use above its threshold
// admits no more than two calls at a time, which would fail the parallel
// benchmark with more than two goroutines. Warm-up calls are serial, so
// none is rejected. The garbage the warm-up leaves is collected before
// timing starts.
func warmUp(b *testing.B, g Guard) {
	b.Helper()
	ctx := context.Background()
	for start := time.Now(); time.Since(start) < warmUpFor; {
		finish, err := g.Admit(ctx)
		if err != nil {
			b.Fatalf("warm-up: %v", err)
		}
		finish(nil)
	}
	runtime.GC()
}

// checkParallel fails b if any of the parallel loop's acquisitions was
// rejected.
func checkParallel(b *testing.B, rejected *atomic.Int64) {
	b.Helper()
	if n := rejected.Load(); n > 0 {
		b.Fatalf("%d of %d acquisitions rejected below the limit", n, b.N)
	}
}

func benchSluice(b *testing.B) {
	g := NewSluice()
	warmUp(b, g)
	l := g.Limiter
	b.ReportAllocs()
	for b.Loop() {
		tok, ok := l.TryAcquire()
		if !ok {
			b.Fatal("rejected below the limit")
		}
		tok.Release(limiter.Success)
	}
}

func benchSluiceParallel(b *testing.B) {
	g := NewSluice()
	warmUp(b, g)
	l := g.Limiter
	var rejected atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tok, ok := l.TryAcquire()
			if !ok {
				rejected.Add(1)
				continue
			}
			tok.Release(limiter.Success)
		}
	})
	checkParallel(b, &rejected)
}

func benchFailsafe(b *testing.B) {
	g := NewFailsafe()
	warmUp(b, g)
	l := g.Limiter
	b.ReportAllocs()
	for b.Loop() {
		p, ok := l.TryAcquirePermit()
		if !ok {
			b.Fatal("rejected below the limit")
		}
		p.Record()
	}
}

func benchFailsafeParallel(b *testing.B) {
	g := NewFailsafe()
	warmUp(b, g)
	l := g.Limiter
	var rejected atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, ok := l.TryAcquirePermit()
			if !ok {
				rejected.Add(1)
				continue
			}
			p.Record()
		}
	})
	checkParallel(b, &rejected)
}

func benchGoZero(b *testing.B) {
	g := NewGoZero()
	warmUp(b, g)
	s := g.Shedder
	b.ReportAllocs()
	for b.Loop() {
		p, err := s.Allow()
		if err != nil {
			b.Fatal(err)
		}
		p.Pass()
	}
}

func benchGoZeroParallel(b *testing.B) {
	g := NewGoZero()
	warmUp(b, g)
	s := g.Shedder
	var rejected atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := s.Allow()
			if err != nil {
				rejected.Add(1)
				continue
			}
			p.Pass()
		}
	})
	checkParallel(b, &rejected)
}

func benchKratos(b *testing.B) {
	g := NewKratos()
	warmUp(b, g)
	l := g.Limiter
	b.ReportAllocs()
	for b.Loop() {
		done, err := l.Allow()
		if err != nil {
			b.Fatal(err)
		}
		done(ratelimit.DoneInfo{})
	}
}

func benchKratosParallel(b *testing.B) {
	g := NewKratos()
	warmUp(b, g)
	l := g.Limiter
	var rejected atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			done, err := l.Allow()
			if err != nil {
				rejected.Add(1)
				continue
			}
			done(ratelimit.DoneInfo{})
		}
	})
	checkParallel(b, &rejected)
}

func benchXSemaphore(b *testing.B) {
	g := NewXSemaphore(StaticLimit)
	warmUp(b, g)
	s := g.Sem
	b.ReportAllocs()
	for b.Loop() {
		if !s.TryAcquire(1) {
			b.Fatal("rejected below the limit")
		}
		s.Release(1)
	}
}

func benchXSemaphoreParallel(b *testing.B) {
	g := NewXSemaphore(StaticLimit)
	warmUp(b, g)
	s := g.Sem
	var rejected atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !s.TryAcquire(1) {
				rejected.Add(1)
				continue
			}
			s.Release(1)
		}
	})
	checkParallel(b, &rejected)
}

func benchChan(b *testing.B) {
	g := NewChan(StaticLimit)
	warmUp(b, g)
	c := g.C
	b.ReportAllocs()
	for b.Loop() {
		select {
		case c <- struct{}{}:
		default:
			b.Fatal("rejected below the limit")
		}
		<-c
	}
}

func benchChanParallel(b *testing.B) {
	g := NewChan(StaticLimit)
	warmUp(b, g)
	c := g.C
	var rejected atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			select {
			case c <- struct{}{}:
			default:
				rejected.Add(1)
				continue
			}
			<-c
		}
	})
	checkParallel(b, &rejected)
}
