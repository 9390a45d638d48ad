// Package bench compares sluice with the overload-protection libraries a Go
// gRPC service would otherwise pick, on the same workloads and measured the
// same way.
//
// It is a module of its own, github.com/sluice-go/sluice/bench, so that the
// peers it imports never become dependencies of sluice itself; its go.mod
// replaces sluice with the checkout it lives in.
//
// # Peers
//
// Each peer is wrapped in a Guard, a non-blocking admission check, and
// listed by Peers:
//
//	sluice      limiter.Limiter with an AIMD algorithm (see NewSluice)
//	failsafe    failsafe-go's adaptivelimiter.AdaptiveLimiter
//	gozero      go-zero's load.Shedder from NewAdaptiveShedder
//	kratos      Kratos aegis's bbr.BBR from NewLimiter
//	xsemaphore  golang.org/x/sync/semaphore.Weighted of a fixed size
//	chan        a buffered channel of a fixed size
//
// The adaptive peers run with their defaults, as a user who imports them
// and calls their constructor without options would run them. The single
// exception is sluice's AIMD floor, explained on NewSluice. The two static
// semaphores are baselines: the cheapest way to bound concurrency, with no
// adaptation at all.
//
// Adapters also map a finished call's error to the signal each peer
// expects, the way that peer's own server interceptor or middleware (for
// failsafe, its policy executor) does; see each adapter's Admit.
//
// # Benchmarks
//
// BenchmarkAcquireRelease and BenchmarkAcquireReleaseParallel time one
// admission and its release below the limit, serially and from every
// core. They call each library directly rather than through Guard, whose
// finish closure allocates and would add the same noise to every peer.
// Run them with
//
//	go test -run '^$' -bench AcquireRelease -benchmem -count 5 ./...
//
// and compare with benchstat.
//
// BenchmarkUnaryOverhead times a whole unary gRPC call over bufconn: bare,
// with sluice's server and client interceptors, and with failsafe-go's
// (failsafegrpc around a default adaptive limiter on each side).
//
// # Overload comparison
//
// TestOverloadComparison runs the load profile of `make demo` (0.5×, 2×,
// 5×, 5× on half the capacity, then 1×) against a real gRPC server on
// 127.0.0.1 whose handler calls a simulated FIFO backend, once unprotected,
// once with sluice's server interceptors and their defaults, and once per
// other peer through a server interceptor built from its Guard. It takes
// about 3 minutes, so it is skipped unless run with -overload or
// SLUICE_BENCH_OVERLOAD=1; it prints a markdown table per phase. `make
// bench` at the repository root runs all of the above and writes
// bench-out/; RESULTS.md records a run.
//
// # Side effects of the peers
//
// Linking go-zero's load package and Kratos's bbr package starts
// background goroutines at init, whether or not a shedder is built: CPU
// samplers for both, and for go-zero a signal handler for SIGUSR1, SIGUSR2,
// SIGTERM and SIGINT. go-zero's init also runs automaxprocs, which may
// change GOMAXPROCS inside a container with a CPU quota. Every benchmark
// binary of this module carries them, sluice's included.
package bench
