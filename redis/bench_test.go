package redis

import (
	"context"
	"strconv"
	"testing"

	"github.com/go-redis/redis_rate/v10"
)

// The benchmarks below run one client against a local redis-server, one
// decision at a time: ns/op is the latency a decision adds to a call, and
// decisions/s what one client can decide. Ping is the bare round trip,
// the floor of any limiter kept in Redis. Keys cycle over 1000 callers, at
// a quota none of them reaches, so every decision writes.

const benchKeys = 1000

func benchKeyNames() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "caller-" + strconv.Itoa(i)
	}
	return keys
}

func BenchmarkPing(b *testing.B) {
	s := startRedis(b)
	c := s.client(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

func BenchmarkAllow(b *testing.B) {
	b.Run("impl=sluice", func(b *testing.B) {
		s := startRedis(b)
		l, err := New(s.client(b), 1e6, 1000, WithTimeout(DefaultTimeout*20))
		if err != nil {
			b.Fatal(err)
		}
		keys := benchKeyNames()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			d, err := l.Allow(keys[i%benchKeys])
			if err != nil || !d.Allowed {
				b.Fatalf("%+v %v", d, err)
			}
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		if l.downUntil.Load() != 0 {
			b.Fatal("Redis failed during the benchmark")
		}
	})
	b.Run("impl=redis_rate", func(b *testing.B) {
		s := startRedis(b)
		l := redis_rate.NewLimiter(s.client(b))
		limit := redis_rate.PerSecond(1_000_000)
		limit.Burst = 1000
		keys := benchKeyNames()
		ctx := context.Background()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r, err := l.Allow(ctx, keys[i%benchKeys], limit)
			if err != nil || r.Allowed != 1 {
				b.Fatalf("%+v %v", r, err)
			}
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
}
