package limiter

import (
	"testing"
)

// The two benchmarks named by the limiter issue: acquire and release below
// the limit with the default algorithm (AIMD), serially and from every
// core. The goal is 0 allocs/op and a cost close to a buffered-channel
// semaphore's, measured alongside as BenchmarkChannelSemaphore*. These
// calls take nanoseconds, so the AIMD has the Limiter time a sample of them
// once slow start is over; BenchmarkTryAcquireReleaseTimed times each.

// newBenchLimiter returns a default Limiter whose AIMD cannot fall below 64:
// calls of a few nanoseconds see scheduler preemption as congestion, and
// the benchmark measures the path below the limit.
func newBenchLimiter(b *testing.B, opts ...Option) *Limiter {
	a, err := newAIMD(AIMDConfig{MinLimit: 64})
	if err != nil {
		b.Fatal(err)
	}
	l, err := New(append(opts, WithAlgorithm(a))...)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func BenchmarkTryAcquireRelease(b *testing.B) { acquireRelease(b, newBenchLimiter(b)) }

func acquireRelease(b *testing.B, l *Limiter) {
	b.ReportAllocs()
	for b.Loop() {
		tok, ok := l.TryAcquire()
		if !ok {
			b.Fatal("no permit below the limit")
		}
		tok.Release(Success)
	}
}

func BenchmarkTryAcquireReleaseParallel(b *testing.B) {
	l := newBenchLimiter(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tok, ok := l.TryAcquire()
			if !ok {
				b.Error("no permit below the limit")
				return
			}
			tok.Release(Success)
		}
	})
}

func BenchmarkChannelSemaphore(b *testing.B) {
	sem := make(chan struct{}, defaultAIMDInitialLimit)
	b.ReportAllocs()
	for b.Loop() {
		sem <- struct{}{}
		<-sem
	}
}

func BenchmarkChannelSemaphoreParallel(b *testing.B) {
	sem := make(chan struct{}, defaultAIMDInitialLimit)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			sem <- struct{}{}
			<-sem
		}
	})
}

// BenchmarkTryAcquireForRelease is the keyed path of fair share: eight
// callers in turn, each call hashing its caller's name and updating its
// usage under the table's lock. Compare with BenchmarkTryAcquireRelease,
// the keyless path.
func BenchmarkTryAcquireForRelease(b *testing.B) {
	l := newBenchLimiter(b)
	callers := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tok, err := l.TryAcquireFor(callers[i%len(callers)], 0)
		if err != nil {
			b.Fatal(err)
		}
		tok.Release(Success)
		i++
	}
}

// BenchmarkNew is what a default Limiter costs before its first call: the
// interceptors build one per route, and most routes of a large service are
// idle.
func BenchmarkNew(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := New(); err != nil {
			b.Fatal(err)
		}
	}
}
