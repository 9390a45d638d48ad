package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/internal/testbed/overload"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// The early rejection benchmark measures what interceptor.WithEarlyRejection
// saves: the server's CPU per call when most calls are rejected and every
// request is large. It runs the server in a child process (this test
// binary, re-executed with earlyServerEnv set), so that the CPU it reports
// is the server's alone, not the load generator's. It takes about 4
// minutes at the defaults, so it only runs when asked:
//
//	go test -run '^TestEarlyRejection$' -early -v [-early.out FILE] [-early.profile DIR]
//
// or with SLUICE_BENCH_EARLY=1 in the environment. `make bench-early` runs
// it. TestEarlyRejectionSmoke runs both servers briefly in every test pass.
var (
	earlyFlag    = flag.Bool("early", false, "run TestEarlyRejection (about 4 minutes at the defaults); or set "+earlyEnv+"=1")
	earlyReps    = flag.Int("early.reps", 5, "repetitions of every run of TestEarlyRejection; the report gives medians")
	earlyDur     = flag.Duration("early.dur", 8*time.Second, "length of each run of TestEarlyRejection")
	earlyOut     = flag.String("early.out", "", "also write TestEarlyRejection's markdown report to this file")
	earlyProfile = flag.String("early.profile", "", "directory: after the measured runs, run each server once more at 5× under the CPU profiler and write early-<server>.pprof there")
)

const (
	earlyEnv = "SLUICE_BENCH_EARLY"
	// earlyServerEnv makes the test binary act as the benchmark's server:
	// its value names the server (see earlyServers).
	earlyServerEnv = "SLUICE_BENCH_EARLY_SERVER"
	// earlyProfileEnv, if set, is the file the server child writes its
	// CPU profile to.
	earlyProfileEnv = "SLUICE_BENCH_EARLY_CPUPROFILE"

	earlyPayload = 64 << 10 // bytes of each request
	earlyLoad    = 5.0      // the overload, as a multiple of C/S
	// earlyCalibration is the load of the run that prices an admitted
	// call: low enough that nothing is rejected.
	earlyCalibration = 0.8
	earlySkip        = time.Second
)

// An earlyServer is one of the two servers compared.
type earlyServer struct {
	key  string // the value of earlyServerEnv
	name string // for the report
	opts []interceptor.ServerOption
}

var earlyServers = []earlyServer{
	{"interceptors", "`NewServer()`", nil},
	{"early", "`NewServer(WithEarlyRejection())`", []interceptor.ServerOption{interceptor.WithEarlyRejection()}},
}

func findEarlyServer(key string) (earlyServer, bool) {
	for _, s := range earlyServers {
		if s.key == key {
			return s, true
		}
	}
	return earlyServer{}, false
}

// TestEarlyRejectionServer is the server child of the early rejection
// benchmark, and skips unless earlyServerEnv is set. It serves the test
// service over sluice on a FIFO backend, prints "addr HOST:PORT" on
// stdout, answers every "stats" line on stdin with "stats CPU HANDLED
// LIMITSUM SAMPLES LIMITMAX LAG READ" (its process CPU in nanoseconds,
// the calls its handler has seen, its concurrency limit sampled every 100
// ms and the worst lateness of a 10 ms timer in nanoseconds, both since
// the previous stats, and the bytes it has read, -1 where unknown), and
// returns when stdin closes.
func TestEarlyRejectionServer(t *testing.T) {
	key := os.Getenv(earlyServerEnv)
	if key == "" {
		t.Skipf("the server child of TestEarlyRejection; runs only with %s set", earlyServerEnv)
	}
	es, ok := findEarlyServer(key)
	if !ok {
		t.Fatalf("%s=%q: want one of interceptors, early", earlyServerEnv, key)
	}
	if path := os.Getenv(earlyProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				t.Error(err)
			}
		}()
	}
	be, err := backend.New("fifo", matrixC, matrixS, backend.Constant, 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := interceptor.NewServer(es.opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	var handled atomic.Int64
	inner := overload.Service(be).UnaryFunc
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		handled.Add(1)
		return inner(ctx, req)
	}}
	srv := grpc.NewServer(s.ServerOptions()...)
	testpb.RegisterTestServiceServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	defer func() {
		srv.Stop()
		wg.Wait()
	}()

	var (
		mu                    sync.Mutex
		limitSum, n, limitMax int
		stopSampling          = make(chan struct{})
	)
	wg.Go(func() {
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tk.C:
				if ls := s.Limiters(); len(ls) > 0 {
					mu.Lock()
					limitSum, n, limitMax = limitSum+ls[0].Limit, n+1, max(limitMax, ls[0].Limit)
					mu.Unlock()
				}
			}
		}
	})
	lags := overload.StartLagMonitor(time.Now())
	defer lags.Stop()
	reported := 0 // seconds of lags whose worst went out in a stats line
	// lagSinceLast is the worst timer lag since the last stats line.
	lagSinceLast := func() time.Duration {
		worst := lags.SoFar()
		from := min(reported, len(worst))
		reported = max(len(worst)-1, 0) // the current second goes on
		return slices.Max(append(worst[from:], 0))
	}
	defer close(stopSampling) // runs before the server's wait above

	fmt.Printf("addr %s\n", lis.Addr())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "stats" {
			mu.Lock()
			fmt.Printf("stats %d %d %d %d %d %d %d\n", int64(overload.ProcessCPU()), handled.Load(), limitSum, n, limitMax, int64(lagSinceLast()), bytesRead())
			limitSum, n, limitMax = 0, 0, 0
			mu.Unlock()
		}
	}
}

// An earlyChild is a running server child.
type earlyChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr strings.Builder
}

// startEarlyChild starts the server child es, writing a CPU profile to
// profile if it is not empty, and returns it with its address.
func startEarlyChild(ctx context.Context, es earlyServer, profile string) (*earlyChild, string, error) {
	c := &earlyChild{lines: make(chan string, 16)}
	c.cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^TestEarlyRejectionServer$", "-test.count=1")
	c.cmd.Env = append(os.Environ(), earlyServerEnv+"="+es.key, earlyProfileEnv+"="+profile)
	c.cmd.Stderr = &c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, "", err
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, "", err
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	line, err := c.next("addr")
	if err != nil {
		_, _ = c.stop()
		return nil, "", err
	}
	return c, line, nil
}

// next returns the rest of the child's next stdout line that starts with
// prefix and a space, skipping others.
func (c *earlyChild) next(prefix string) (string, error) {
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				return "", fmt.Errorf("the server child ended before printing %q: %s", prefix, c.stderr.String())
			}
			if rest, found := strings.CutPrefix(l, prefix+" "); found {
				return rest, nil
			}
		case <-t.C:
			return "", fmt.Errorf("the server child printed no %q line within 30 s", prefix)
		}
	}
}

// An earlyStats is one answer of the child.
type earlyStats struct {
	at      time.Time
	cpu     time.Duration
	handled int64
	// The limit sampled since the previous answer: mean (NaN without
	// samples) and max.
	limitMean, limitMax float64
	lag                 time.Duration // the worst timer lag since the previous answer
	read                int64         // bytes the process has read (rchar), -1 where unknown
}

// bytesRead returns the bytes this process has read through system calls,
// the request bodies among them, from /proc/self/io; -1 where there is no
// such file. (Counting in a wrapped net.Conn would change how grpc-go
// reads the connection.)
func bytesRead() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

func (c *earlyChild) stats() (earlyStats, error) {
	if _, err := io.WriteString(c.stdin, "stats\n"); err != nil {
		return earlyStats{}, err
	}
	l, err := c.next("stats")
	if err != nil {
		return earlyStats{}, err
	}
	f := strings.Fields(l)
	var v [7]int64
	if len(f) == len(v) {
		for i := range v {
			if v[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
				break
			}
		}
	}
	if len(f) != len(v) || err != nil {
		return earlyStats{}, fmt.Errorf("the server child answered %q, want \"stats CPU HANDLED LIMITSUM SAMPLES LIMITMAX LAG READ\"", l)
	}
	st := earlyStats{at: time.Now(), cpu: time.Duration(v[0]), handled: v[1], limitMean: math.NaN(), limitMax: float64(v[4]),
		lag: time.Duration(v[5]), read: v[6]}
	if v[3] > 0 {
		st.limitMean = float64(v[2]) / float64(v[3])
	}
	return st, nil
}

// stop closes the child's stdin, waits for it to exit and returns the CPU
// time of its whole life.
func (c *earlyChild) stop() (time.Duration, error) {
	_ = c.stdin.Close()
	for range c.lines { // drain, so that Wait can finish
	}
	if err := c.cmd.Wait(); err != nil {
		return 0, fmt.Errorf("server child: %w: %s", err, c.stderr.String())
	}
	ps := c.cmd.ProcessState
	return ps.UserTime() + ps.SystemTime(), nil
}

// preEncoded is the client's codec: it sends the one request of the run
// from bytes encoded once, so that the load generator, which shares the
// machine with the server, does not pay 64 KiB of marshalling per call.
// Everything else goes through the proto codec. grpc-go keeps the
// content-subtype, so the server decodes with its usual codec.
type preEncoded struct {
	base encoding.CodecV2
	req  *testpb.UnaryRequest
	wire []byte
}

func newPreEncoded(req *testpb.UnaryRequest) (preEncoded, error) {
	wire, err := proto.Marshal(req)
	if err != nil {
		return preEncoded{}, err
	}
	return preEncoded{base: encoding.GetCodecV2("proto"), req: req, wire: wire}, nil
}

func (c preEncoded) Marshal(v any) (mem.BufferSlice, error) {
	if v == c.req {
		return mem.BufferSlice{mem.SliceBuffer(c.wire)}, nil
	}
	return c.base.Marshal(v)
}

func (c preEncoded) Unmarshal(data mem.BufferSlice, v any) error { return c.base.Unmarshal(data, v) }
func (c preEncoded) Name() string                                { return c.base.Name() }

// An earlyRun is what one run against one server child produced.
type earlyRun struct {
	run       matrixRun
	serverCPU time.Duration // the child's CPU over the load, idle baseline subtracted
	idle      float64       // the child's idle CPU, in cores
	handled   int64         // calls that reached the handler during the load
	lifeCPU   time.Duration // the child's CPU over its whole life
	wall      time.Duration
	clientCPU time.Duration // this process's CPU over the load: the load generator
	// The server's concurrency limit over the load: mean and max.
	limitMean, limitMax float64
	serverLag           time.Duration // the child's worst timer lag over the load
	read                int64         // bytes the child read over the load; -1 if unknown
}

func readDelta(a, b int64) int64 {
	if a < 0 || b < 0 {
		return -1
	}
	return b - a
}

// runEarly starts server child es, measures its idle CPU for a second
// (a quarter of dur if that is shorter),
// then drives load × C/S open-loop Poisson arrivals of 64 KiB requests at
// it for dur over one TCP connection on 127.0.0.1.
func runEarly(ctx context.Context, es earlyServer, load float64, dur, skip time.Duration, seed uint64, profile string) (earlyRun, error) {
	child, addr, err := startEarlyChild(ctx, es, profile)
	if err != nil {
		return earlyRun{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = child.stop()
		}
	}()
	req := &testpb.UnaryRequest{Payload: strings.Repeat("x", earlyPayload)}
	codec, err := newPreEncoded(req)
	if err != nil {
		return earlyRun{}, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec)))
	if err != nil {
		return earlyRun{}, err
	}
	defer conn.Close()
	if err := overload.Connect(ctx, conn); err != nil {
		return earlyRun{}, err
	}
	client := testpb.NewTestServiceClient(conn)
	// A few calls first: the first call of a method creates its limiter
	// and is always left to the interceptors.
	for range 4 {
		if _, err := client.Unary(ctx, req); err != nil {
			return earlyRun{}, fmt.Errorf("warm-up call: %w", err)
		}
	}

	s0, err := child.stats()
	if err != nil {
		return earlyRun{}, err
	}
	idleFor := time.NewTimer(min(time.Second, dur/4))
	<-idleFor.C
	s1, err := child.stats()
	if err != nil {
		return earlyRun{}, err
	}
	idle := float64(s1.cpu-s0.cpu) / float64(s1.at.Sub(s0.at))

	sc := earlyScenario(load)
	var failed atomic.Int64
	stop := make(chan struct{})
	var (
		bg     sync.WaitGroup
		maxLag time.Duration
	)
	bg.Go(func() { maxLag = watchLag(stop) })
	cpu0 := overload.ProcessCPU()
	rep, err := loadgen.Run(ctx, loadgen.Config{
		Phases:   []loadgen.Phase{{Name: "load", Duration: dur, Rate: sc.rate(sc.stages[0])}},
		Deadline: 10 * matrixS,
		Seed:     seed,
		Call: func(ctx context.Context) error {
			_, err := client.Unary(ctx, req)
			return err
		},
		Classify: func(err error) loadgen.Result {
			r := overload.Classify(err)
			if r == loadgen.Failed {
				failed.Add(1)
			}
			return r
		},
	})
	clientCPU := overload.ProcessCPU() - cpu0
	close(stop)
	bg.Wait()
	if err != nil {
		return earlyRun{}, err
	}
	s2, err := child.stats()
	if err != nil {
		return earlyRun{}, err
	}
	conn.Close()
	stopped = true
	life, err := child.stop()
	if err != nil {
		return earlyRun{}, err
	}
	wall := s2.at.Sub(s1.at)
	cpu := s2.cpu - s1.cpu - time.Duration(idle*float64(wall))
	return earlyRun{
		run:       matrixRun{report: rep, cpu: cpu, maxLag: maxLag, failed: failed.Load(), phase: dur, skip: skip, service: matrixS},
		serverCPU: max(cpu, 0),
		idle:      idle,
		handled:   s2.handled - s1.handled,
		clientCPU: clientCPU,
		limitMean: s2.limitMean,
		limitMax:  s2.limitMax,
		serverLag: s2.lag,
		read:      readDelta(s1.read, s2.read),
		lifeCPU:   life,
		wall:      wall,
	}, nil
}

// earlyScenario is the matrix scenario of the benchmark: FIFO, C = 16,
// S = 20 ms, at load × C/S.
func earlyScenario(load float64) scenario {
	return scenario{name: fmt.Sprintf("fifo %g× %s, 64 KiB requests", load, sName(matrixS)), kind: "fifo", service: matrixS,
		stages: []matrixStage{{load, matrixC}}}
}

// earlyMetrics are the figures of one repetition of one server.
type earlyMetrics struct {
	m             matrixMetrics // of the 5× run
	cores         float64       // the server's CPU over the 5× run, in cores
	perOffered    float64       // µs of server CPU per offered call at 5×
	perHandled    float64       // µs per call at the calibration load, where nothing is rejected
	perRejected   float64       // µs per rejected call at 5×, estimated
	idle          float64       // the server's idle CPU, in cores
	clientCores   float64       // the load generator's CPU over the 5× run, in cores
	handledRate   float64       // calls per second that reached the handler at 5×
	limitMean     float64
	limitMax      float64
	serverLag     float64 // ms
	readPerCall   float64 // KiB the server read per offered call at 5×; NaN if unknown
	calRejected   float64 // % of the calibration run's calls rejected
	offered, rejs int
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// earlyMeasure combines a calibration run and an overload run of one
// server. A rejected call's cost is what the overload run's server CPU
// has left once its handled calls are priced at the calibration run's
// CPU per handled call.
func earlyMeasure(cal, over earlyRun) earlyMetrics {
	var e earlyMetrics
	e.m = measure(earlyScenario(earlyLoad), over.run)
	e.cores = over.serverCPU.Seconds() / over.wall.Seconds()
	e.offered = len(over.run.report.Calls)
	for _, c := range over.run.report.Calls {
		if c.Result == loadgen.Rejected {
			e.rejs++
		}
	}
	e.perOffered = us(over.serverCPU) / float64(max(e.offered, 1))
	if cal.handled > 0 {
		e.perHandled = us(cal.serverCPU) / float64(cal.handled)
	}
	if e.rejs > 0 {
		e.perRejected = (us(over.serverCPU) - float64(over.handled)*e.perHandled) / float64(e.rejs)
	}
	e.idle = over.idle
	e.clientCores = over.clientCPU.Seconds() / over.wall.Seconds()
	e.handledRate = float64(over.handled) / over.wall.Seconds()
	e.limitMean, e.limitMax = over.limitMean, over.limitMax
	e.serverLag = ms(over.serverLag)
	e.readPerCall = math.NaN()
	if over.read >= 0 && e.offered > 0 {
		e.readPerCall = float64(over.read) / 1024 / float64(e.offered)
	}
	e.calRejected = measure(earlyScenario(earlyCalibration), cal.run).rejected
	return e
}

func earlyEnabled() bool { return *earlyFlag || os.Getenv(earlyEnv) == "1" }

// earlyBench runs reps repetitions of the calibration and the overload
// run of every server, the repetition outermost, and returns each
// server's metrics in the order of earlyServers.
func earlyBench(ctx context.Context, t testing.TB, reps int, dur, skip time.Duration) ([][]earlyMetrics, int64, error) {
	out := make([][]earlyMetrics, len(earlyServers))
	var failed int64
	for rep := range reps {
		for i, es := range earlyServers {
			cal, err := runEarly(ctx, es, earlyCalibration, dur, skip, uint64(rep+1), "")
			if err != nil {
				return nil, 0, fmt.Errorf("%s at %g×: %w", es.key, earlyCalibration, err)
			}
			over, err := runEarly(ctx, es, earlyLoad, dur, skip, uint64(rep+1), "")
			if err != nil {
				return nil, 0, fmt.Errorf("%s at %g×: %w", es.key, earlyLoad, err)
			}
			failed += cal.run.failed + over.run.failed
			e := earlyMeasure(cal, over)
			t.Logf("rep %d/%d | %s | goodput/ideal %.2f | p99 %.0f ms | rejected %.1f %% | deadline %.1f %% | "+
				"handled %.0f/s | limit mean %.1f max %.0f | server %.2f cores | client %.2f cores | "+
				"%.0f µs/offered | %.0f µs/handled at %g× | %.0f µs/rejected | read %.1f KiB/offered | idle %.4f cores | lag %.0f ms, server %.0f ms | child life CPU %.1f s",
				rep+1, reps, es.key, e.m.goodRatio, e.m.p99, e.m.rejected, e.m.deadline,
				e.handledRate, e.limitMean, e.limitMax, e.cores, e.clientCores,
				e.perOffered, e.perHandled, earlyCalibration, e.perRejected, e.readPerCall, e.idle, e.m.lag, e.serverLag, over.lifeCPU.Seconds())
			out[i] = append(out[i], e)
		}
	}
	return out, failed, nil
}

func TestEarlyRejection(t *testing.T) {
	if !earlyEnabled() {
		t.Skipf("the early rejection benchmark takes about 4 minutes: run it with -early or %s=1 (make bench-early does)", earlyEnv)
	}
	if *earlyReps < 1 || *earlyDur < 2*earlySkip {
		t.Fatalf("-early.reps is %d and -early.dur %v: need at least 1 repetition and runs of at least %v", *earlyReps, *earlyDur, 2*earlySkip)
	}
	ctx := context.Background()
	load0 := loadAvg()
	start := time.Now()
	res, failed, err := earlyBench(ctx, t, *earlyReps, *earlyDur, earlySkip)
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	writeEarlyReport(&md, res, *earlyReps, *earlyDur, time.Since(start), load0, loadAvg())
	fmt.Print(md.String())
	if *earlyOut != "" {
		if err := os.WriteFile(*earlyOut, []byte(md.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if failed > 0 {
		t.Errorf("%d calls failed other than by rejection or deadline", failed)
	}
	if *earlyProfile != "" {
		for _, es := range earlyServers {
			path := filepath.Join(*earlyProfile, "early-"+es.key+".pprof")
			if _, err := runEarly(ctx, es, earlyLoad, *earlyDur, earlySkip, 1, path); err != nil {
				t.Fatalf("profile of %s: %v", es.key, err)
			}
			t.Logf("CPU profile of the %s server at %g× in %s", es.key, earlyLoad, path)
		}
	}
}

// TestEarlyRejectionSmoke runs both servers at 5× for a moment each, so
// that plain go test keeps the instrument working: the server child
// starts, answers and exits, and the report has a line per server. It
// asserts no performance.
func TestEarlyRejectionSmoke(t *testing.T) {
	res, failed, err := earlyBench(context.Background(), t, 1, 300*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	if failed > 0 {
		t.Errorf("%d calls failed other than by rejection or deadline", failed)
	}
	var md strings.Builder
	writeEarlyReport(&md, res, 1, 300*time.Millisecond, 0, "", "")
	for i, es := range earlyServers {
		if res[i][0].offered == 0 {
			t.Errorf("%s: no calls offered", es.key)
		}
		if !strings.Contains(md.String(), "| "+es.name+" |") {
			t.Errorf("the report has no line for %s:\n%s", es.key, md.String())
		}
	}
}

// loadAvg returns the first three fields of /proc/loadavg, or "" where
// there is none.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// writeEarlyReport writes the settings and the table of medians in
// markdown.
func writeEarlyReport(w io.Writer, res [][]earlyMetrics, reps int, dur, elapsed time.Duration, load0, load1 string) {
	fmt.Fprintf(w, "%s, %d cores (GOMAXPROCS %d); %d repetition(s) of %v per server and load, each figure the median over them; "+
		"took %.1f min; load average (1, 5, 15 min) %s before, %s after.\n\n",
		runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0), reps, dur, elapsed.Minutes(), orDash(load0), orDash(load1))
	fmt.Fprintln(w, "| server | goodput / ideal | p99 | rejected | deadline exceeded | limit mean | server CPU | CPU / offered call | CPU / handled call (0.8×) | CPU / rejected call | read / offered call | client CPU | idle | lag client / server |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var perRej []float64
	for i, es := range earlyServers {
		get := func(f func(earlyMetrics) float64) float64 {
			xs := make([]float64, len(res[i]))
			for j, e := range res[i] {
				xs[j] = f(e)
			}
			return median(xs)
		}
		good := get(func(e earlyMetrics) float64 { return e.m.goodRatio })
		rej := get(func(e earlyMetrics) float64 { return e.perRejected })
		perRej = append(perRej, rej)
		fmt.Fprintf(w, "| %s | %s | %s | %.1f %% | %.1f %% | %s | %.2f cores | %.0f µs | %.0f µs | %.0f µs | %s | %.2f cores | %.4f cores | %.0f / %.0f ms |\n",
			es.name, fmtRatio(good), fmtNum(get(func(e earlyMetrics) float64 { return e.m.p99 }), " ms"),
			get(func(e earlyMetrics) float64 { return e.m.rejected }),
			get(func(e earlyMetrics) float64 { return e.m.deadline }),
			fmtNum(get(func(e earlyMetrics) float64 { return e.limitMean }), ""),
			get(func(e earlyMetrics) float64 { return e.cores }),
			get(func(e earlyMetrics) float64 { return e.perOffered }),
			get(func(e earlyMetrics) float64 { return e.perHandled }),
			rej,
			fmtNum(get(func(e earlyMetrics) float64 { return e.readPerCall }), " KiB"),
			get(func(e earlyMetrics) float64 { return e.clientCores }),
			get(func(e earlyMetrics) float64 { return e.idle }),
			get(func(e earlyMetrics) float64 { return e.m.lag }),
			get(func(e earlyMetrics) float64 { return e.serverLag }))
	}
	fmt.Fprintln(w)
	if len(perRej) == 2 && perRej[0] > 0 {
		fmt.Fprintf(w, "CPU per rejected call, early / interceptors only: %.2f (target ≤ 0.50).\n\n", perRej[1]/perRej[0])
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
