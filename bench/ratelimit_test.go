package bench

import (
	"math"
	"testing"

	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice/internal/bucket"
)

// BenchmarkRateAllow compares a non-blocking rate check: sluice's
// token bucket (the one behind interceptor.RateLimit) against golang.org/x/time/rate.Limiter.Allow, both
// with a rate high enough that every call is allowed.
func BenchmarkRateAllow(b *testing.B) {
	b.Run("sluice", func(b *testing.B) {
		tb, err := bucket.New(1e12, math.MaxInt32)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := tb.Take(); !ok {
				b.Fatal("rejected")
			}
		}
	})
	b.Run("xrate", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1e12), math.MaxInt32)
		b.ReportAllocs()
		for b.Loop() {
			if !l.Allow() {
				b.Fatal("rejected")
			}
		}
	})
}
