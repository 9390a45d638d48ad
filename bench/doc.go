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
// # Overload matrix
//
// TestOverloadMatrix measures sluice's defaults beside failsafe-go's
// adaptivelimiter defaults over a grid of scenarios on real gRPC over
// 127.0.0.1: offered load from 0.8× to 5× on FIFO and processor-sharing
// backends of 16 workers (S = 20 ms, and 100 ms at 1× and 2×), a capacity
// step C → C/2 → C with the time to recover from each change, a handler
// that refuses 3% of calls itself with RESOURCE_EXHAUSTED, exponential
// service times at 2×, and both libraries on the client side in front of
// an unprotected server (failsafe-go through failsafegrpc's client
// interceptor). Unprotected and a static limit of C+8 frame the FIFO load
// scenarios. Each figure of its markdown table is the median of
// -matrix.reps runs, and the notes name the worst run's goodput and p99
// (a median of 3 hid a run in 3 that collapsed); -matrix.scale shortens
// the 6 s phases. It is skipped
// unless run with -matrix or SLUICE_BENCH_MATRIX=1, and `make
// bench-overload` runs it (about 18 minutes) into
// bench-out/overload-matrix.md. Its latency-shape scenarios, whose names
// start with "shape", run only when -matrix.run names them (`make
// bench-shapes`, about 39 minutes): exponential, bimodal and lognormal
// service times from 0.5× to 5×, the quota on bimodal and lognormal
// times, and two methods of different speeds on one pool behind one
// service limiter, each beside a static C+8 and summarized against issue
// 29's targets. TestOverloadMatrixSmoke runs two half-second scenarios
// (one of them the two methods) in every test pass, with no performance
// assertion, so that the instrument keeps working.
//
// # Tenants
//
// TestTenants measures interceptor.WithFairShare on the overload
// matrix's rig (the same backends, server, loopback connection and
// deadline), every call naming its tenant in the metadata x-tenant: a
// heavy tenant at 2.5× beside four light ones at 0.1× each (five loadgen
// runs side by side over one connection), a tenant alone at 2×, and one
// run at 2× whose calls each name one of 10,000 tenants drawn from a Zipf
// distribution (s = 1.1), on FIFO and processor sharing. Each runs with
// sluice's defaults, sluice's fair share keyed by x-tenant and a static
// C+8, and failsafe-go's defaults beside the light tenants. Its tables
// give, as medians of -tenants.reps runs of 6 s (× -tenants.scale, the
// first third left out), the light tenants' share of calls answered OK in
// time and their p99, the heavy tenant's share, goodput against the
// ideal, rejections, the 100 lightest Zipf tenants' share and the heap
// after the Zipf runs, and judge the fair-share rows against the issue's
// targets. It is skipped unless run with -tenants or
// SLUICE_BENCH_TENANTS=1; `make bench-tenants` runs it (about 6 minutes)
// into bench-out/tenants.md, and `make bench-overload` after the matrix.
// TestTenantsSmoke runs a second of the tenants scenario with the fair
// share and half a second of the Zipf one in every test pass, with no
// performance assertion.
//
// # Virtual time
//
// Three measurements run sluice's limiter alone against simulated
// backends in the virtual time of testing/synctest, in seconds of wall
// time, each skipped unless its flag is set: TestFrontier (-frontier,
// `make frontier`) and TestShapes (-shapes, `make shapes`) at the
// matrix's C = 16, S = 20 ms, and TestStarts (-starts, `make starts`),
// fresh limiters from their first call at C = 4, S = 2 ms, at C = 16,
// S = 20 ms and at C = 64, S = 100 ms on every latency shape and load,
// beside a fixed C+8: the sizes and cold starts the rule was not tuned
// on.
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
