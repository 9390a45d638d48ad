package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/internal/testbed/overload"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// The overload comparison runs the load profile of `make demo` against a
// real gRPC server once per peer. It takes about 3 minutes, so it only
// runs when asked:
//
//	go test -run TestOverloadComparison -overload -v [-overload.out FILE]
//
// or with SLUICE_BENCH_OVERLOAD=1 in the environment. `make bench` runs it.
var (
	overloadFlag  = flag.Bool("overload", false, "run TestOverloadComparison (about 3 minutes); or set "+overloadEnv+"=1")
	overloadOut   = flag.String("overload.out", "", "also write the overload comparison's markdown report to this file")
	overloadPeers = flag.String("overload.peers", "", "comma-separated peers of the overload comparison (default: all)")
	overloadScale = flag.Float64("overload.scale", 1, "multiply every phase of the overload comparison by this")
)

const overloadEnv = "SLUICE_BENCH_OVERLOAD"

// The backend of the overload comparison: C FIFO workers, each call taking
// exactly S, so C/S = 400 calls per second. At 5× that (2000 calls per
// second through a real gRPC stack, client and server in one process) the
// two cores stay far from saturated; the report gives the CPU each run
// used, so that a reader can check.
const (
	overloadC        = 16
	overloadS        = 40 * time.Millisecond
	overloadDeadline = 10 * overloadS
	// overloadSkip is the start of each phase left out of its summary:
	// the transient after a step, and the calls that arrived in the
	// previous phase's regime.
	overloadSkip = time.Second
	overloadSeed = 1
)

// An overloadPhase is one step of the profile.
type overloadPhase struct {
	name     string
	load     float64 // offered load as a multiple of overloadC/overloadS
	capacity int     // backend workers during the phase
	duration time.Duration
}

// overloadProfile is the demo's profile, about 25 s long: light load,
// overload, heavy overload, heavy overload on half the capacity, and
// nominal load once the capacity is back.
func overloadProfile(scale float64) []overloadPhase {
	d := func(s float64) time.Duration { return time.Duration(s * scale * float64(time.Second)) }
	return []overloadPhase{
		{"0.5×", 0.5, overloadC, d(4)},
		{"2×", 2, overloadC, d(5)},
		{"5×", 5, overloadC, d(6)},
		{"5×, capacity halved", 5, overloadC / 2, d(5)},
		{"1×, capacity restored", 1, overloadC, d(5)},
	}
}

func (p overloadPhase) rate() float64         { return p.load * overloadC / overloadS.Seconds() }
func (p overloadPhase) capacityRate() float64 { return float64(p.capacity) / overloadS.Seconds() }

// A protection is one row of the comparison: how a server is protected.
type protection struct {
	name string
	// server returns the options of a fresh protected server, a function
	// reporting its current concurrency limit (nil if it has none), and a
	// function to call when the run is over.
	server func() (opts []grpc.ServerOption, limit func() int, done func(), err error)
}

// protections lists the rows: no protection, sluice's server interceptors
// with their defaults, then every other peer of Peers in its order, each
// through guardInterceptor.
func protections() []protection {
	out := []protection{
		{"unprotected", func() ([]grpc.ServerOption, func() int, func(), error) {
			return nil, nil, func() {}, nil
		}},
		{"sluice", func() ([]grpc.ServerOption, func() int, func(), error) {
			s, err := interceptor.NewServer() // the defaults: no options
			if err != nil {
				return nil, nil, nil, err
			}
			limit := func() int {
				if ls := s.Limiters(); len(ls) > 0 {
					return ls[0].Limit
				}
				return -1
			}
			return s.ServerOptions(), limit, func() { _ = s.Close() }, nil
		}},
	}
	for _, p := range Peers() {
		if p.Name == "sluice" {
			continue // the Guard of micro benchmarks, with its raised floor
		}
		out = append(out, protection{p.Name, func() ([]grpc.ServerOption, func() int, func(), error) {
			g := p.New()
			var limit func() int
			switch g := g.(type) {
			case *Failsafe:
				limit = g.Limiter.Limit
			case *XSemaphore, *Chan:
				limit = func() int { return StaticLimit }
			}
			return []grpc.ServerOption{grpc.ChainUnaryInterceptor(guardInterceptor(g))}, limit, func() {}, nil
		}})
	}
	return out
}

// guardInterceptor is the unary server interceptor of a Guard: a rejected
// call fails with RESOURCE_EXHAUSTED without reaching its handler, and an
// admitted one reports the handler's error to the Guard when it returns.
func guardInterceptor(g Guard) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		finish, err := g.Admit(ctx)
		if err != nil {
			return nil, status.Error(codes.ResourceExhausted, err.Error())
		}
		resp, err := handler(ctx, req)
		finish(err)
		return resp, err
	}
}

// An overloadRun is what one row's run produced.
type overloadRun struct {
	name    string
	report  *loadgen.Report
	limits  []limitSample // nil for a protection without a limit
	cpu     time.Duration // process CPU time during the run
	maxLag  time.Duration // worst timer lag seen during the run
	elapsed time.Duration
}

type limitSample struct {
	at    time.Duration // since the start of the run
	limit int
}

func overloadEnabled() bool { return *overloadFlag || os.Getenv(overloadEnv) == "1" }

func TestOverloadComparison(t *testing.T) {
	if !overloadEnabled() {
		t.Skipf("the overload comparison takes about 3 minutes: run it with -overload or %s=1 (make bench does)", overloadEnv)
	}
	var want []string
	if *overloadPeers != "" {
		want = strings.Split(*overloadPeers, ",")
	}
	phases := overloadProfile(*overloadScale)
	var runs []overloadRun
	for _, p := range protections() {
		if want != nil && !slices.Contains(want, p.name) {
			continue
		}
		t.Logf("%s: running the profile", p.name)
		r, err := runOverload(context.Background(), p, phases)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		t.Logf("%s: %d calls in %.1f s, %.2f cores of CPU, worst timer lag %.1f ms",
			p.name, len(r.report.Calls), r.elapsed.Seconds(),
			r.cpu.Seconds()/r.elapsed.Seconds(), float64(r.maxLag)/float64(time.Millisecond))
		runs = append(runs, r)
	}
	var md strings.Builder
	writeOverloadReport(&md, phases, runs)
	fmt.Print(md.String())
	if *overloadOut != "" {
		if err := os.WriteFile(*overloadOut, []byte(md.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range runs {
		for i := range phases {
			if f := r.report.Phase(i, 0).Failed; f > 0 {
				t.Errorf("%s, %s: %d calls failed other than by rejection or deadline", r.name, phases[i].name, f)
			}
		}
	}
}

// TestOverloadEngine runs the comparison's machinery for two rows on a
// profile fifty times shorter, so that plain go test covers it.
func TestOverloadEngine(t *testing.T) {
	phases := overloadProfile(0.02)
	var runs []overloadRun
	for _, p := range protections() {
		if p.name != "sluice" && p.name != "chan" {
			continue
		}
		r, err := runOverload(context.Background(), p, phases)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		if len(r.report.Calls) == 0 {
			t.Fatalf("%s: no calls", p.name)
		}
		for _, c := range r.report.Calls {
			if c.Result == loadgen.Failed {
				t.Fatalf("%s: a call failed: %+v", p.name, c)
			}
		}
		runs = append(runs, r)
	}
	var md strings.Builder
	writeOverloadReport(&md, phases, runs)
	for _, p := range phases {
		if !strings.Contains(md.String(), "### "+p.name) {
			t.Errorf("report has no table for phase %q:\n%s", p.name, md.String())
		}
	}
}

// runOverload runs phases against a fresh backend and a fresh server
// protected by p, with a plain gRPC client over TCP on 127.0.0.1.
func runOverload(ctx context.Context, p protection, phases []overloadPhase) (overloadRun, error) {
	be, err := backend.New("fifo", overloadC, overloadS, backend.Constant, 1)
	if err != nil {
		return overloadRun{}, err
	}
	sopts, limit, done, err := p.server()
	if err != nil {
		return overloadRun{}, err
	}
	defer done()

	srv := newRigServer(sopts)
	testpb.RegisterTestServiceServer(srv, overload.Service(be))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return overloadRun{}, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	defer func() {
		srv.Stop()
		wg.Wait()
	}()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return overloadRun{}, err
	}
	defer conn.Close()
	if err := overload.Connect(ctx, conn); err != nil {
		return overloadRun{}, err
	}
	client := testpb.NewTestServiceClient(conn)

	lp := make([]loadgen.Phase, len(phases))
	for i, ph := range phases {
		lp[i] = loadgen.Phase{Name: ph.name, Duration: ph.duration, Rate: ph.rate(), Start: func() {
			if be.Capacity() != ph.capacity {
				_ = be.SetCapacity(ph.capacity) // >= 1: cannot fail
			}
		}}
	}

	start := time.Now()
	stop := make(chan struct{})
	var (
		bg     sync.WaitGroup
		limits []limitSample
		maxLag time.Duration
	)
	if limit != nil {
		bg.Go(func() { limits = sampleLimit(start, limit, stop) })
	}
	bg.Go(func() { maxLag = watchLag(stop) })
	cpu0 := overload.ProcessCPU()
	rep, err := loadgen.Run(ctx, loadgen.Config{
		Phases:   lp,
		Deadline: overloadDeadline,
		Seed:     overloadSeed,
		Call: func(ctx context.Context) error {
			_, err := client.Unary(ctx, &testpb.UnaryRequest{})
			return err
		},
		Classify: overload.Classify,
	})
	cpu := overload.ProcessCPU() - cpu0
	close(stop)
	bg.Wait()
	if err != nil {
		return overloadRun{}, err
	}
	return overloadRun{name: p.name, report: rep, limits: limits, cpu: cpu, maxLag: maxLag, elapsed: time.Since(start)}, nil
}

// sampleLimit records limit every 100 ms until stop is closed.
func sampleLimit(start time.Time, limit func() int, stop <-chan struct{}) []limitSample {
	var out []limitSample
	tk := time.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return out
		case now := <-tk.C:
			out = append(out, limitSample{now.Sub(start), limit()})
		}
	}
}

// watchLag returns the worst lateness of a 10 ms timer until stop is
// closed (overload.LagMonitor): how far behind the machine let the process
// fall. The backend's service times and the arrivals are timers too, so a
// large lag means the run measured the machine rather than the peer.
func watchLag(stop <-chan struct{}) time.Duration {
	m := overload.StartLagMonitor(time.Now())
	<-stop
	return slices.Max(append(m.Stop(), 0))
}

// writeOverloadReport writes the settings, one table per phase and one of
// the runs themselves, in markdown.
func writeOverloadReport(w io.Writer, phases []overloadPhase, runs []overloadRun) {
	total := time.Duration(0)
	for _, p := range phases {
		total += p.duration
	}
	fmt.Fprintf(w, "## Overload comparison\n\n")
	fmt.Fprintf(w, "FIFO backend of C = %d workers, constant service time S = %v (capacity %.0f calls/s); "+
		"open-loop Poisson arrivals (seed %d, the same for every row) from a plain gRPC client over TCP on 127.0.0.1, "+
		"deadline %v (10·S) per call; a fresh server, backend and peer for each row; %v per row; %s, %d cores (GOMAXPROCS %d).\n\n",
		overloadC, overloadS, overloadC/overloadS.Seconds(), overloadSeed, overloadDeadline, total,
		runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "Each table counts the calls that arrived in the phase, leaving out its first %v (half of a shorter phase). "+
		"Goodput is successes within the deadline per second; ideal is min(offered, capacity). "+
		"p99 is of the successful calls. Limit is the mean concurrency limit over the same stretch, where the peer has one.\n\n",
		overloadSkip)
	start := time.Duration(0)
	for i, p := range phases {
		skip := min(overloadSkip, p.duration/2)
		from, to := start+skip, start+p.duration
		start = to
		fmt.Fprintf(w, "### %s\n\n", p.name)
		fmt.Fprintf(w, "Offered %.0f calls/s, capacity %.0f calls/s (C = %d).\n\n", p.rate(), p.capacityRate(), p.capacity)
		fmt.Fprintln(w, "| peer | goodput / ideal | p99 | p99 / S | rejected | deadline exceeded | limit |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
		for _, r := range runs {
			s := r.report.Phase(i, skip)
			ideal := min(s.Offered, p.capacityRate())
			share := func(n int) float64 {
				if s.Calls == 0 {
					return 0
				}
				return 100 * float64(n) / float64(s.Calls)
			}
			good := 0.0
			if ideal > 0 {
				good = 100 * s.Goodput / ideal
			}
			fmt.Fprintf(w, "| %s | %.1f %% | %s | %s | %.1f %% | %.1f %% | %s |\n",
				r.name, good, fmtMs(s.P99), fmtTimesS(s.P99), share(s.Rejected), share(s.Deadline), meanLimit(r.limits, from, to))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "### The runs\n\n")
	fmt.Fprintf(w, "CPU is the process's (client, server and backend together) over the run, in cores; "+
		"timer lag is the worst lateness of a 10 ms timer during the run.\n\n")
	fmt.Fprintln(w, "| peer | calls | wall | CPU | worst timer lag |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	for _, r := range runs {
		fmt.Fprintf(w, "| %s | %d | %.1f s | %.2f | %.1f ms |\n", r.name, len(r.report.Calls), r.elapsed.Seconds(),
			r.cpu.Seconds()/r.elapsed.Seconds(), float64(r.maxLag)/float64(time.Millisecond))
	}
	fmt.Fprintln(w)
}

// meanLimit is the mean of the samples taken in [from, to), or "-".
func meanLimit(samples []limitSample, from, to time.Duration) string {
	sum, n := 0, 0
	for _, s := range samples {
		if s.at >= from && s.at < to && s.limit >= 0 {
			sum += s.limit
			n++
		}
	}
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(sum)/float64(n))
}

func fmtMs(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func fmtTimesS(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(d)/float64(overloadS))
}
