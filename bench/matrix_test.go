package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/limitload"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/internal/testbed/overload"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// The overload matrix runs a grid of scenarios (offered load, backend kind,
// service time, a capacity step, a handler with its own quota, noisy
// service times, and the client side) over real gRPC on loopback TCP, once
// per protection: sluice's defaults and failsafe-go's adaptivelimiter with
// its defaults, and for some scenarios no protection and a static limit.
// Every number is the median of -matrix.reps repetitions; the notes add
// the worst repetition's goodput and p99. At the defaults
// it takes about 18 minutes, so it only runs when asked:
//
//	go test -run TestOverloadMatrix -matrix -v [-matrix.out FILE]
//
// or with SLUICE_BENCH_MATRIX=1 in the environment. `make bench-overload`
// runs it. The latency-shape scenarios (shapeScenarios) run only when
// -matrix.run names them; `make bench-shapes` runs them all.
// TestOverloadMatrixSmoke runs two short scenarios in every test pass so
// that the machinery keeps working.
var (
	matrixFlag     = flag.Bool("matrix", false, "run TestOverloadMatrix (about 18 minutes at the defaults); or set "+matrixEnv+"=1")
	matrixOut      = flag.String("matrix.out", "", "also write the overload matrix's markdown report to this file")
	matrixReps     = flag.Int("matrix.reps", 3, "repetitions of every run of the overload matrix; the report gives medians")
	matrixScale    = flag.Float64("matrix.scale", 1, "multiply every phase of the overload matrix (6 s at 1) by this")
	matrixOnly     = flag.String("matrix.run", "", "regular expression: run only the scenarios of the overload matrix whose name matches")
	matrixFrontier = flag.Bool("matrix.frontier", false, "add the unprotected and static rows to every server-side scenario, not only to the FIFO load scenarios at S (20 ms unless -matrix.size)")
	matrixCommit   = flag.String("matrix.commit", "", "the commit the overload matrix runs on, for its report")
	matrixSize     = flag.String("matrix.size", "", "C,S: the backends' workers and service time, e.g. 64,100ms (default 16,20ms); the slow scenarios take 5·S")
	matrixSkipFlag = flag.Duration("matrix.skip", matrixSkip, "the start of each phase left out of its summary (warm-up), before -matrix.scale; 0 counts a fresh server's first calls")
)

const matrixEnv = "SLUICE_BENCH_MATRIX"

// The matrix's size: C workers serving calls of S (mean S for the other
// shapes), set by -matrix.size before the scenarios are built; the slow
// scenarios take matrixSlowS = 5·S.
var (
	matrixC     = 16
	matrixS     = 20 * time.Millisecond
	matrixSlowS = 5 * matrixS
)

// setMatrixSize applies a -matrix.size of "C,S".
func setMatrixSize(size string) error {
	if size == "" {
		return nil
	}
	sz, err := parseSize("-matrix.size", size)
	if err != nil {
		return err
	}
	matrixC, matrixS, matrixSlowS = sz.c, sz.s, 5*sz.s
	return nil
}

// A size is a downstream: c workers serving calls of mean s.
type size struct {
	c int
	s time.Duration
}

// parseSize parses "C,S" (e.g. 64,100ms), the value of the flag named.
func parseSize(flagName, v string) (size, error) {
	cs, ss, ok := strings.Cut(v, ",")
	c, errC := strconv.Atoi(strings.TrimSpace(cs))
	s, errS := time.ParseDuration(strings.TrimSpace(ss))
	if !ok || errC != nil || errS != nil || c < 2 || s <= 0 {
		return size{}, fmt.Errorf("%s %q: want C,S with C ≥ 2 workers and S > 0, e.g. 64,100ms", flagName, v)
	}
	return size{c, s}, nil
}

// parseSizes parses sizes "C,S" separated by spaces, the value of the
// flag named.
func parseSizes(flagName, v string) ([]size, error) {
	var out []size
	for _, f := range strings.Fields(v) {
		sz, err := parseSize(flagName, f)
		if err != nil {
			return nil, err
		}
		out = append(out, sz)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s %q: want one or more C,S separated by spaces, e.g. '8,200ms 32,50ms'", flagName, v)
	}
	return out, nil
}

// shapeDists are the latency shapes make shapes and make starts run by
// default: the five issue 29 names. -shapes.dists and -starts.dists pick
// others (uniform, pareto).
const shapeDists = "constant,exponential,bimodal,lognormal,methods"

// parseDists parses a comma-separated list of latency shapes.
func parseDists(flagName, v string) ([]backend.Dist, error) {
	var out []backend.Dist
	for _, f := range strings.Split(v, ",") {
		d, err := backend.ParseDist(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", flagName, v, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// matrixStatic is the static row's limit: told C, it admits C + 8.
func matrixStatic() int { return matrixC + 8 }

// sName names a service time in a scenario's name, as S=20ms.
func sName(s time.Duration) string { return "S=" + s.String() }

// The matrix's other constants. Phases are matrixPhase × -matrix.scale
// long; the first matrixSkip of each (scaled alike; -matrix.skip sets
// another) is left out of its summary.
const (
	matrixPhase = 6 * time.Second
	matrixSkip  = time.Second
	// matrixQuota is the share of calls the quota scenario's handler
	// refuses at once with RESOURCE_EXHAUSTED.
	matrixQuota = 0.03
	// quotaMessage marks the handler's own refusals, so that the client
	// can tell them from a limiter's.
	quotaMessage = "bench: quota exceeded"
)

// A matrixStage is one phase of a scenario.
type matrixStage struct {
	load     float64 // offered load as a multiple of C/S
	capacity int     // backend workers
}

// A scenario is one row group of the matrix.
type scenario struct {
	name    string
	kind    string // backend: "fifo" or "ps"
	service time.Duration
	dist    backend.Dist
	stages  []matrixStage
	// quota is the share of calls the handler refuses before any backend
	// work; 0 for none.
	quota float64
	// client puts the protection in the client, in front of an
	// unprotected server.
	client bool
	// step measures the recovery after each change of stage and
	// summarizes the stages after the first without a warm-up skip.
	step bool
	// frontier adds the unprotected and static rows; static adds only
	// the static one.
	frontier, static bool
	// shape puts the scenario in the latency-shape group, which runs
	// only when -matrix.run names it (make bench-shapes).
	shape bool
	// methods serves two methods of one service, a fast and a slow one,
	// from one backend pool (see methodsService) instead of Unary.
	methods bool
}

// The two-methods scenarios: 80 % of calls to a method taking S/4 and 20 %
// to one taking 4·S, a mix of mean S (0.8/4 + 0.2·4 = 1) and coefficient
// of variation 1.5, both served by one pool of C workers behind one
// service entry of sluice (and one failsafe-go or static limiter). One
// pool because the methods of one service share what limits it (its
// database's connections, its process's CPU): that pool is what a
// service-wide limit protects. Two pools would call for a limit per
// method, sluice's default.
const (
	methodsService = "bench.v1.Shop"
	methodsSlowFor = 0.2 // share of calls to the slow method
)

// methodsFast and methodsSlow are the two methods' service times.
func methodsFast() time.Duration { return matrixS / 4 }
func methodsSlow() time.Duration { return 4 * matrixS }

// scenarios lists the matrix in the order of its report.
func scenarios() []scenario {
	var out []scenario
	one := func(load float64) []matrixStage { return []matrixStage{{load, matrixC}} }
	for _, kind := range []string{"fifo", "ps"} {
		for _, load := range []float64{0.8, 1, 2, 5} {
			out = append(out, scenario{
				name: fmt.Sprintf("%s %g× %s", kind, load, sName(matrixS)), kind: kind, service: matrixS,
				stages: one(load), frontier: kind == "fifo",
			})
		}
		for _, load := range []float64{1, 2} {
			out = append(out, scenario{
				name: fmt.Sprintf("%s %g× %s", kind, load, sName(matrixSlowS)), kind: kind, service: matrixSlowS, stages: one(load),
			})
		}
	}
	for _, kind := range []string{"fifo", "ps"} {
		out = append(out, scenario{
			name: kind + " step C→C/2→C at 1.5×", kind: kind, service: matrixS, step: true,
			stages: []matrixStage{{1.5, matrixC}, {1.5, matrixC / 2}, {1.5, matrixC}},
		})
	}
	for _, d := range []backend.Dist{backend.Constant, backend.Exponential} {
		out = append(out, scenario{
			name: fmt.Sprintf("quota 3%% fifo 0.7× %s %s", d, sName(matrixS)), kind: "fifo", service: matrixS, dist: d,
			stages: one(0.7), quota: matrixQuota,
		})
	}
	// Processor sharing keeps noisy RTTs noisy under load (a queue slows
	// every call alike), which hides the queue from the probes: a cold
	// start there once kept the limit near 3 C.
	for _, kind := range []string{"fifo", "ps"} {
		out = append(out, scenario{
			name: "noisy " + kind + " 2× exponential " + sName(matrixS), kind: kind, service: matrixS, dist: backend.Exponential, stages: one(2),
		})
	}
	for _, load := range []float64{2, 5} {
		out = append(out, scenario{
			name: fmt.Sprintf("client side %g× fifo %s", load, sName(matrixS)), kind: "fifo", service: matrixS,
			stages: one(load), client: true, frontier: true,
		})
	}
	return append(out, shapeScenarios()...)
}

// shapeScenarios are the latency-shape group (issue 29): every load from
// 0.5× to 5× on both backends for exponential, bimodal and lognormal
// service times, and 0.5× for constant ones (the plain load scenarios
// above are its 0.8× to 5×); the quota scenario on bimodal and lognormal
// times (the one above has constant and exponential); and two methods of
// different speeds behind one service limiter. Each runs sluice,
// failsafe-go and the static limit. Their names start with "shape " and
// then the shape's name, so that -matrix.run selects them (shape,
// bimodal, lognormal, methods).
func shapeScenarios() []scenario {
	var out []scenario
	one := func(load float64) []matrixStage { return []matrixStage{{load, matrixC}} }
	for _, d := range []backend.Dist{backend.Constant, backend.Exponential, backend.Bimodal, backend.Lognormal} {
		loads := []float64{0.5, 0.8, 1, 2, 5}
		if d == backend.Constant {
			loads = loads[:1]
		}
		for _, kind := range []string{"fifo", "ps"} {
			for _, load := range loads {
				out = append(out, scenario{
					name: fmt.Sprintf("shape %s %s %g× %s", d, kind, load, sName(matrixS)), kind: kind, service: matrixS, dist: d,
					stages: one(load), static: true, shape: true,
				})
			}
		}
	}
	for _, d := range []backend.Dist{backend.Bimodal, backend.Lognormal} {
		out = append(out, scenario{
			name: fmt.Sprintf("shape %s quota 3%% fifo 0.7× %s", d, sName(matrixS)), kind: "fifo", service: matrixS, dist: d,
			stages: one(0.7), quota: matrixQuota, static: true, shape: true,
		})
	}
	for _, kind := range []string{"fifo", "ps"} {
		for _, load := range []float64{0.8, 1, 2, 5} {
			out = append(out, scenario{
				name: fmt.Sprintf("shape methods %s %g× S/4+4·S", kind, load), kind: kind, service: matrixS,
				stages: one(load), methods: true, static: true, shape: true,
			})
		}
	}
	return out
}

// rate is the arrival rate of stage st.
func (sc scenario) rate(st matrixStage) float64 {
	return st.load * float64(matrixC) / sc.service.Seconds()
}

// capacityRate is the rate stage st's backend can serve.
func (sc scenario) capacityRate(st matrixStage) float64 {
	return float64(st.capacity) / sc.service.Seconds()
}

// A matrixProtection is one row of a scenario. build returns the options
// of a fresh server (server side) or client connection (client side) for
// scenario sc, a function reporting the live limit (nil if there is none),
// and a function to call when the run is over.
type matrixProtection struct {
	name     string
	frontier bool // one of the unprotected and static rows
	static   bool // the static row
	build    func(sc scenario) (sopts []grpc.ServerOption, dopts []grpc.DialOption, limit func() int, done func(), err error)
}

func sluiceLimit(ls func() []interceptor.LimiterState) func() int {
	return func() int {
		if s := ls(); len(s) > 0 {
			return s[0].Limit
		}
		return -1
	}
}

// sluiceServer builds a server-side row of sluice: the ServerOptions of
// interceptor.NewServer(opts...), its first limiter's live limit and its
// Close.
func sluiceServer(opts ...interceptor.ServerOption) ([]grpc.ServerOption, []grpc.DialOption, func() int, func(), error) {
	s, err := interceptor.NewServer(opts...)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return s.ServerOptions(), nil, sluiceLimit(s.Limiters), func() { _ = s.Close() }, nil
}

var unprotected = matrixProtection{"unprotected", true, false, func(scenario) ([]grpc.ServerOption, []grpc.DialOption, func() int, func(), error) {
	return nil, nil, nil, func() {}, nil
}}

// serverProtections are the rows of a server-side scenario.
func serverProtections() []matrixProtection {
	return []matrixProtection{
		unprotected,
		{staticRow(), true, true, func(scenario) ([]grpc.ServerOption, []grpc.DialOption, func() int, func(), error) {
			g := NewChan(matrixStatic())
			return []grpc.ServerOption{grpc.ChainUnaryInterceptor(guardInterceptor(g))}, nil,
				func() int { return matrixStatic() }, func() {}, nil
		}},
		{"sluice defaults", false, false, func(sc scenario) ([]grpc.ServerOption, []grpc.DialOption, func() int, func(), error) {
			var opts []interceptor.ServerOption // nothing tuned
			if sc.methods {
				// One limiter for the service, as the README shows
				// it, rather than the default limiter per method.
				opts = append(opts, interceptor.WithMethod("/"+methodsService+"/", interceptor.Limit{}))
			}
			return sluiceServer(opts...)
		}},
		{"failsafe defaults", false, false, func(scenario) ([]grpc.ServerOption, []grpc.DialOption, func() int, func(), error) {
			g := NewFailsafe()
			return []grpc.ServerOption{grpc.ChainUnaryInterceptor(guardInterceptor(g))}, nil, g.Limiter.Limit, func() {}, nil
		}},
	}
}

// clientProtections are the rows of a client-side scenario.
func clientProtections() []matrixProtection {
	return []matrixProtection{
		unprotected,
		{"sluice client defaults", false, false, func(scenario) ([]grpc.ServerOption, []grpc.DialOption, func() int, func(), error) {
			c, err := interceptor.NewClient() // nothing tuned
			if err != nil {
				return nil, nil, nil, nil, err
			}
			return nil, c.DialOptions(), sluiceLimit(c.Limiters), func() { _ = c.Close() }, nil
		}},
		{"failsafe client defaults", false, false, func(scenario) ([]grpc.ServerOption, []grpc.DialOption, func() int, func(), error) {
			// failsafe-go's own client-side use: its gRPC client
			// interceptor around a default adaptive limiter, as
			// failsafegrpc documents it. A rejection comes back as
			// adaptivelimiter.ErrExceeded, not as a gRPC status.
			l := adaptivelimiter.NewWithDefaults[any]()
			return nil, []grpc.DialOption{grpc.WithChainUnaryInterceptor(failsafegrpc.NewUnaryClientInterceptor[any](l))}, l.Limit, func() {}, nil
		}},
	}
}

// protectionsFor lists the rows of sc: the frontier rows only when sc asks
// for them or allFrontier is set.
func protectionsFor(sc scenario, allFrontier bool) []matrixProtection {
	ps := serverProtections()
	if sc.client {
		ps = clientProtections()
	}
	return slices.DeleteFunc(ps, func(p matrixProtection) bool {
		return p.frontier && !sc.frontier && !allFrontier && !(p.static && sc.static)
	})
}

// registerMethods registers methodsService on srv: its Fast and Slow
// methods take testpb's UnaryRequest and UnaryResponse and hold one
// backend call of methodsFast and methodsSlow. A hand-written ServiceDesc
// gives a second method of the same request type without a new proto.
func registerMethods(srv *grpc.Server, be backend.Backend) {
	method := func(name string, d time.Duration) grpc.MethodDesc {
		full := "/" + methodsService + "/" + name
		serve := func(ctx context.Context, _ any) (any, error) {
			if err := be.DoFor(ctx, d); err != nil {
				return nil, err
			}
			return &testpb.UnaryResponse{}, nil
		}
		return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			req := new(testpb.UnaryRequest)
			if err := dec(req); err != nil {
				return nil, err
			}
			if ic == nil {
				return serve(ctx, req)
			}
			return ic(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, serve)
		}}
	}
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: methodsService,
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{method("Fast", methodsFast()), method("Slow", methodsSlow())},
	}, struct{}{})
}

// methodsCall returns the loadgen call of the two-methods scenarios: the
// slow method for a methodsSlowFor share of calls, drawn from a seeded
// generator, the fast one otherwise.
func methodsCall(conn *grpc.ClientConn, seed uint64) func(context.Context) error {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 5))
	return func(ctx context.Context) error {
		mu.Lock()
		slow := rng.Float64() < methodsSlowFor
		mu.Unlock()
		name := "Fast"
		if slow {
			name = "Slow"
		}
		return conn.Invoke(ctx, "/"+methodsService+"/"+name, &testpb.UnaryRequest{}, new(testpb.UnaryResponse))
	}
}

// quotaService wraps svc so that a share of its calls, drawn from a seeded
// generator, fail at once with RESOURCE_EXHAUSTED and quotaMessage.
func quotaService(svc *testpb.Service, share float64, seed uint64) *testpb.Service {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 3))
	inner := svc.UnaryFunc
	return &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		mu.Lock()
		refuse := rng.Float64() < share
		mu.Unlock()
		if refuse {
			return nil, status.Error(codes.ResourceExhausted, quotaMessage)
		}
		return inner(ctx, req)
	}}
}

// A matrixRun is what one run of one scenario with one protection
// produced.
type matrixRun struct {
	report  *loadgen.Report
	limits  []limitSample
	cpu     time.Duration // process CPU time during the run
	maxLag  time.Duration
	failed  int64 // calls that failed other than by rejection, deadline or the handler's quota
	phase   time.Duration
	skip    time.Duration
	service time.Duration
}

// runScenario runs sc once with p on a fresh backend, server and client
// connection over TCP on 127.0.0.1, each phase lasting phase.
func runScenario(ctx context.Context, sc scenario, p matrixProtection, phase, skip time.Duration, seed uint64) (matrixRun, error) {
	rg, err := startRig(ctx, sc, p, seed)
	if err != nil {
		return matrixRun{}, err
	}
	defer rg.close()
	client := testpb.NewTestServiceClient(rg.conn)
	call := func(ctx context.Context) error {
		_, err := client.Unary(ctx, &testpb.UnaryRequest{})
		return err
	}
	if sc.methods {
		call = methodsCall(rg.conn, seed)
	}

	lp := make([]loadgen.Phase, len(sc.stages))
	for i, st := range sc.stages {
		lp[i] = loadgen.Phase{Name: fmt.Sprint(i), Duration: phase, Rate: sc.rate(st), Start: func() {
			if rg.be.Capacity() != st.capacity {
				_ = rg.be.SetCapacity(st.capacity) // >= 1: cannot fail
			}
		}}
	}

	var failed atomic.Int64
	var rep *loadgen.Report
	obs, err := observeRun(rg.limit, func() (err error) {
		rep, err = loadgen.Run(ctx, loadgen.Config{
			Phases:   lp,
			Deadline: 10 * sc.service,
			Seed:     seed,
			Call:     call,
			Classify: countingClassify(&failed),
		})
		return err
	})
	if err != nil {
		return matrixRun{}, err
	}
	return matrixRun{report: rep, limits: obs.limits, cpu: obs.cpu, maxLag: obs.maxLag, failed: failed.Load(),
		phase: phase, skip: skip, service: sc.service}, nil
}

// A rig is what a run of sc drives: a fresh backend, a gRPC server on
// 127.0.0.1 with protection p's options around overload.Service (and the
// quota and methods of sc), and a client connection to it, ready. limit
// reports p's live limit (nil if it has none); close tears it all down.
type rig struct {
	be    backend.Backend
	conn  *grpc.ClientConn
	limit func() int
	close func()
}

// newRigServer is a gRPC server whose Stop waits for its handlers: a
// backend finishes a call its client gave up on, and goleak would find it
// at the end of the run.
func newRigServer(sopts []grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append(sopts, grpc.WaitForHandlers(true))...)
}

// startRig builds the rig of one run of sc with p.
func startRig(ctx context.Context, sc scenario, p matrixProtection, seed uint64) (_ *rig, err error) {
	be, err := backend.New(sc.kind, matrixC, sc.service, sc.dist, seed)
	if err != nil {
		return nil, err
	}
	sopts, dopts, limit, done, err := p.build(sc)
	if err != nil {
		return nil, err
	}
	// Torn down in the reverse order of building, on error too.
	var undo []func()
	undo = append(undo, done)
	closeAll := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	if sc.client {
		sopts = nil
	} else {
		dopts = nil
	}

	svc := overload.Service(be)
	if sc.quota > 0 {
		svc = quotaService(svc, sc.quota, seed)
	}
	srv := newRigServer(sopts)
	testpb.RegisterTestServiceServer(srv, svc)
	if sc.methods {
		registerMethods(srv, be)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	undo = append(undo, func() {
		srv.Stop()
		wg.Wait()
	})

	conn, err := grpc.NewClient(lis.Addr().String(), append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = conn.Close() })
	if err := overload.Connect(ctx, conn); err != nil {
		return nil, err
	}
	return &rig{be: be, conn: conn, limit: limit, close: closeAll}, nil
}

// classifyCall maps a call's error to its Result, and reports whether the
// call failed other than by rejection, deadline or the handler's quota.
func classifyCall(err error) (r loadgen.Result, failed bool) {
	if s, _ := status.FromError(err); s.Code() == codes.ResourceExhausted && s.Message() == quotaMessage {
		return loadgen.Failed, false // counted apart from real failures
	}
	if errors.Is(err, adaptivelimiter.ErrExceeded) {
		return loadgen.Rejected, false // failsafegrpc's client interceptor
	}
	r = overload.Classify(err)
	return r, r == loadgen.Failed
}

// countingClassify is classifyCall for loadgen, counting real failures in
// failed.
func countingClassify(failed *atomic.Int64) func(error) loadgen.Result {
	return func(err error) loadgen.Result {
		r, f := classifyCall(err)
		if f {
			failed.Add(1)
		}
		return r
	}
}

// runObservation is what observeRun saw around a run.
type runObservation struct {
	limits      []limitSample
	cpu, maxLag time.Duration
}

// observeRun calls run, sampling limit (when not nil) every 100 ms and the
// timer lag meanwhile, and measuring the process's CPU time.
func observeRun(limit func() int, run func() error) (runObservation, error) {
	start := time.Now()
	stop := make(chan struct{})
	var (
		bg  sync.WaitGroup
		obs runObservation
	)
	if limit != nil {
		bg.Go(func() { obs.limits = sampleLimit(start, limit, stop) })
	}
	bg.Go(func() { obs.maxLag = watchLag(stop) })
	cpu0 := overload.ProcessCPU()
	err := run()
	obs.cpu = overload.ProcessCPU() - cpu0
	close(stop)
	bg.Wait()
	return obs, err
}

// matrixMetrics are the figures of one run, as reported. NaN means "not
// applicable"; +Inf as a recovery time means no window qualified.
type matrixMetrics struct {
	goodRatio          float64 // goodput / ideal
	p50, p99           float64 // ms, of the successes within the deadline
	rejected, deadline float64 // % of the calls
	refused            float64 // % of the calls the handler refused (quota)
	limitMean          float64
	limitMax           float64
	cpu                float64 // process CPU seconds over the run
	lag                float64 // ms, worst timer lag
	recoverDown        float64 // s after the capacity drop
	recoverUp          float64 // s after the capacity comes back
	good               int     // successes within the deadline in the summary
}

// measure computes the metrics of run r of sc. A step scenario is
// summarized from the first change of stage to the end without a skip;
// any other from the first skip of its only stage to its end.
func measure(sc scenario, r matrixRun) matrixMetrics {
	from := r.skip
	if sc.step {
		from = r.phase
	}
	to := r.phase * time.Duration(len(sc.stages))
	w := arrivalWindow(sc, r, from, to)
	m := matrixMetrics{
		goodRatio: w.goodRatio(),
		p50:       ms(w.p50), p99: ms(w.p99),
		rejected: w.share(w.rejected), deadline: w.share(w.deadline), refused: w.share(w.refused),
		cpu: r.cpu.Seconds(), lag: ms(r.maxLag),
		limitMean: math.NaN(), limitMax: math.NaN(), recoverDown: math.NaN(), recoverUp: math.NaN(),
		good: w.good,
	}
	if r.limits != nil {
		sum, n := 0, 0
		for _, s := range r.limits {
			if s.at >= from && s.at < to && s.limit >= 0 {
				sum += s.limit
				n++
				m.limitMax = max(nanToInf(m.limitMax), float64(s.limit))
			}
		}
		if n > 0 {
			m.limitMean = float64(sum) / float64(n)
		}
	}
	if sc.step {
		m.recoverDown = recovery(sc, r, 1)
		m.recoverUp = recovery(sc, r, 2)
	}
	return m
}

func nanToInf(f float64) float64 {
	if math.IsNaN(f) {
		return math.Inf(-1)
	}
	return f
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// A window counts the calls that arrived in a stretch of a run.
type window struct {
	calls, good, rejected, deadline, refused int
	ideal                                    float64 // calls the backend could have served well
	p50, p99                                 time.Duration
}

func (w window) share(n int) float64 {
	if w.calls == 0 {
		return 0
	}
	return 100 * float64(n) / float64(w.calls)
}

func (w window) goodRatio() float64 {
	if w.ideal <= 0 {
		return math.NaN()
	}
	return float64(w.good) / w.ideal
}

// arrivalWindow counts the calls of r that arrived in [from, to). The
// ideal is, stage by stage, the smaller of the calls that arrived and
// the calls the stage's capacity serves in the time.
func arrivalWindow(sc scenario, r matrixRun, from, to time.Duration) window {
	var w window
	arrived := make([]int, len(sc.stages))
	var lat []time.Duration
	deadline := r.report.Config.Deadline
	for _, c := range r.report.Calls {
		if c.Arrival < from || c.Arrival >= to {
			continue
		}
		w.calls++
		arrived[c.Phase]++
		switch {
		case c.Good(deadline):
			w.good++
			lat = append(lat, c.Latency)
		case c.Result == loadgen.OK || c.Result == loadgen.DeadlineExceeded:
			w.deadline++
		case c.Result == loadgen.Rejected:
			w.rejected++
		default:
			w.refused++ // the handler's quota; real failures are counted in matrixRun.failed
		}
	}
	for i, st := range sc.stages {
		s, e := r.phase*time.Duration(i), r.phase*time.Duration(i+1)
		overlap := min(e, to) - max(s, from)
		if overlap <= 0 {
			continue
		}
		w.ideal += min(float64(arrived[i]), sc.capacityRate(st)*overlap.Seconds())
	}
	w.p50, w.p99 = loadgen.Percentile(lat, 0.50), loadgen.Percentile(lat, 0.99)
	return w
}

// recovery returns the seconds from the start of stage i to the start of
// the first 1 s window, sliding by 100 ms within the stage, whose calls
// reached 90% of the ideal goodput with a p99 of at most 3·S; +Inf if none
// did.
func recovery(sc scenario, r matrixRun, i int) float64 {
	start, end := r.phase*time.Duration(i), r.phase*time.Duration(i+1)
	for at := start; at+time.Second <= end; at += 100 * time.Millisecond {
		w := arrivalWindow(sc, r, at, at+time.Second)
		if w.ideal > 0 && float64(w.good) >= 0.9*w.ideal && w.p99 <= 3*sc.service {
			return (at - start).Seconds()
		}
	}
	return math.Inf(1)
}

// median returns the median of the values that are not NaN, or NaN.
func median(xs []float64) float64 {
	xs = slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	if math.IsInf(xs[n/2], 1) {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// medianMetrics takes the median of each figure over reps separately.
func medianMetrics(reps []matrixMetrics) matrixMetrics {
	f := func(get func(matrixMetrics) float64) float64 {
		xs := make([]float64, len(reps))
		for i, r := range reps {
			xs[i] = get(r)
		}
		return median(xs)
	}
	return matrixMetrics{
		goodRatio:   f(func(m matrixMetrics) float64 { return m.goodRatio }),
		p50:         f(func(m matrixMetrics) float64 { return m.p50 }),
		p99:         f(func(m matrixMetrics) float64 { return m.p99 }),
		rejected:    f(func(m matrixMetrics) float64 { return m.rejected }),
		deadline:    f(func(m matrixMetrics) float64 { return m.deadline }),
		refused:     f(func(m matrixMetrics) float64 { return m.refused }),
		limitMean:   f(func(m matrixMetrics) float64 { return m.limitMean }),
		limitMax:    f(func(m matrixMetrics) float64 { return m.limitMax }),
		cpu:         f(func(m matrixMetrics) float64 { return m.cpu }),
		lag:         f(func(m matrixMetrics) float64 { return m.lag }),
		recoverDown: f(func(m matrixMetrics) float64 { return m.recoverDown }),
		recoverUp:   f(func(m matrixMetrics) float64 { return m.recoverUp }),
		good:        int(f(func(m matrixMetrics) float64 { return float64(m.good) })),
	}
}

// A matrixRow is one line of the report.
type matrixRow struct {
	sc   scenario
	prot string
	reps []matrixMetrics
}

// matrixSettings describe a whole matrix run for its report.
type matrixSettings struct {
	reps        int
	phase, skip time.Duration
	commit      string
	elapsed     time.Duration
	load        [2]string // the machine's load average at the start and the end
	failedCalls int64
}

// runMatrix runs every scenario of scs with each of its protections, reps
// times over (repetition outermost, so that a disturbance of the machine
// spreads over the rows), and returns the rows in report order.
func runMatrix(ctx context.Context, t testing.TB, scs []scenario, reps int, phase, skip time.Duration, allFrontier bool) ([]matrixRow, int64, error) {
	var rows []matrixRow
	index := map[[2]string]int{}
	for _, sc := range scs {
		for _, p := range protectionsFor(sc, allFrontier) {
			index[[2]string{sc.name, p.name}] = len(rows)
			rows = append(rows, matrixRow{sc: sc, prot: p.name})
		}
	}
	var failed int64
	for rep := range reps {
		for _, sc := range scs {
			for _, p := range protectionsFor(sc, allFrontier) {
				r, err := runScenario(ctx, sc, p, phase, skip, uint64(rep+1))
				if err != nil {
					return nil, 0, fmt.Errorf("%s, %s: %w", sc.name, p.name, err)
				}
				failed += r.failed
				m := measure(sc, r)
				t.Logf("rep %d/%d | %s | %s | goodput/ideal %.2f | p99 %.0f ms | rejected %.1f %% | deadline %.1f %% | CPU %.1f s | lag %.0f ms | load average %s",
					rep+1, reps, sc.name, p.name, m.goodRatio, m.p99, m.rejected, m.deadline, m.cpu, m.lag, overload.LoadAverage())
				if r.failed > 0 {
					t.Logf("  %d calls failed other than by rejection, deadline or quota", r.failed)
				}
				i := index[[2]string{sc.name, p.name}]
				rows[i].reps = append(rows[i].reps, m)
			}
		}
	}
	return rows, failed, nil
}

// selectScenarios returns the scenarios of scs whose name matches the
// regular expression only; with only empty, those outside the shape group,
// which is long enough to run apart (make bench-shapes).
func selectScenarios(scs []scenario, only string) ([]scenario, error) {
	if only == "" {
		return slices.DeleteFunc(scs, func(sc scenario) bool { return sc.shape }), nil
	}
	re, err := regexp.Compile(only)
	if err != nil {
		return nil, fmt.Errorf("-matrix.run: %w", err)
	}
	scs = slices.DeleteFunc(scs, func(sc scenario) bool { return !re.MatchString(sc.name) })
	if len(scs) == 0 {
		return nil, fmt.Errorf("-matrix.run %q matches no scenario", only)
	}
	return scs, nil
}

func matrixEnabled() bool { return *matrixFlag || os.Getenv(matrixEnv) == "1" }

func TestOverloadMatrix(t *testing.T) {
	if !matrixEnabled() {
		t.Skipf("the overload matrix takes about 18 minutes: run it with -matrix or %s=1 (make bench-overload does)", matrixEnv)
	}
	if *matrixReps < 1 || *matrixScale <= 0 {
		t.Fatalf("-matrix.reps is %d and -matrix.scale %g: need at least 1 repetition and a positive scale", *matrixReps, *matrixScale)
	}
	if err := setMatrixSize(*matrixSize); err != nil {
		t.Fatal(err)
	}
	scs, err := selectScenarios(scenarios(), *matrixOnly)
	if err != nil {
		t.Fatal(err)
	}
	phase := time.Duration(*matrixScale * float64(matrixPhase))
	if *matrixSkipFlag < 0 || *matrixSkipFlag >= matrixPhase {
		t.Fatalf("-matrix.skip %v: must be in [0, %v)", *matrixSkipFlag, matrixPhase)
	}
	skip := time.Duration(*matrixScale * float64(*matrixSkipFlag))
	start, load0 := time.Now(), overload.LoadAverage()
	rows, failed, err := runMatrix(context.Background(), t, scs, *matrixReps, phase, skip, *matrixFrontier)
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	writeMatrixReport(&md, rows, matrixSettings{
		reps: *matrixReps, phase: phase, skip: skip, commit: *matrixCommit, elapsed: time.Since(start),
		failedCalls: failed, load: [2]string{load0, overload.LoadAverage()},
	})
	fmt.Print(md.String())
	if *matrixOut != "" {
		if err := os.WriteFile(*matrixOut, []byte(md.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if failed > 0 {
		t.Errorf("%d calls failed other than by rejection, deadline or the handler's quota", failed)
	}
}

// TestOverloadMatrixSmoke runs one scenario of the matrix for half a second
// per protection, so that plain go test keeps the instrument working. It
// asserts no performance, only that every protection gets a row with some
// goodput.
func TestOverloadMatrixSmoke(t *testing.T) {
	plain := scenario{name: "smoke fifo 2× S=20ms", kind: "fifo", service: matrixS,
		stages: []matrixStage{{2, matrixC}}, frontier: true}
	// The two-methods shape: its own service, one sluice limiter for it.
	methods := scenario{name: "shape smoke methods fifo 2× S/4+4·S", kind: "fifo", service: matrixS,
		stages: []matrixStage{{2, matrixC}}, methods: true, static: true, shape: true}
	rows, failed, err := runMatrix(context.Background(), t, []scenario{plain, methods}, 1, 500*time.Millisecond, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if failed > 0 {
		t.Errorf("%d calls failed other than by rejection or deadline", failed)
	}
	var md strings.Builder
	writeMatrixReport(&md, rows, matrixSettings{reps: 1, phase: 500 * time.Millisecond})
	for _, sc := range []scenario{plain, methods} {
		for _, p := range protectionsFor(sc, false) {
			i := slices.IndexFunc(rows, func(r matrixRow) bool { return r.sc.name == sc.name && r.prot == p.name })
			if i < 0 {
				t.Errorf("%s: no row for %s", sc.name, p.name)
				continue
			}
			if g := rows[i].reps[0].good; g == 0 {
				t.Errorf("%s, %s: no call succeeded within its deadline", sc.name, p.name)
			}
			if !strings.Contains(md.String(), "| "+sc.name+" | "+p.name+" |") {
				t.Errorf("the report has no line for %s, %s:\n%s", sc.name, p.name, md.String())
			}
		}
	}
	if !strings.Contains(md.String(), "| "+methods.name+" | ") || !strings.Contains(md.String(), "### Latency shapes") {
		t.Errorf("the report has no shape summary for %s:\n%s", methods.name, md.String())
	}
}

// TestShapeSelection: the shape group stays out of the default run, and
// TestSetMatrixSize: -matrix.size sets the backends' C and S, which the
// scenarios' names, rates and static limit follow; the default names are
// those the Makefile and bench/RESULTS.md use.
func TestSetMatrixSize(t *testing.T) {
	c0, s0, slow0 := matrixC, matrixS, matrixSlowS
	t.Cleanup(func() { matrixC, matrixS, matrixSlowS = c0, s0, slow0 })
	names := func() []string {
		var out []string
		for _, sc := range scenarios() {
			out = append(out, sc.name)
		}
		return out
	}
	require.NoError(t, setMatrixSize(""))
	assert.Contains(t, names(), "ps 5× S=20ms")
	assert.Contains(t, names(), "fifo 2× S=100ms")
	assert.Equal(t, "static C+8 (24)", staticRow())

	require.NoError(t, setMatrixSize("64, 100ms"))
	assert.Contains(t, names(), "ps 5× S=100ms")
	assert.Contains(t, names(), "fifo 2× S=500ms")
	assert.Equal(t, "static C+8 (72)", staticRow())
	assert.InDelta(t, 3200, scenario{service: matrixS}.rate(matrixStage{load: 5}), 1e-9)
	assert.Equal(t, 25*time.Millisecond, methodsFast())

	for _, bad := range []string{"64", "x,20ms", "1,20ms", "16,0s", "16,-1ms", "16,fast"} {
		assert.ErrorContains(t, setMatrixSize(bad), "-matrix.size", bad)
		assert.ErrorContains(t, setMatrixSize(bad), "want C,S", bad)
	}
}

// TestParseSizes: -starts.sizes and -shapes.size take the sizes of
// -matrix.size, several separated by spaces, and name the flag when wrong.
func TestParseSizes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []size
		err  string
	}{
		{in: "16,20ms", want: []size{{16, 20 * time.Millisecond}}},
		{in: " 8,200ms  32,50ms ", want: []size{{8, 200 * time.Millisecond}, {32, 50 * time.Millisecond}}},
		{in: "", err: "want one or more C,S"},
		{in: "   ", err: "want one or more C,S"},
		{in: "8,200ms 32", err: `"32": want C,S`},
		{in: "8;200ms", err: "want C,S"},
		{in: "1,1ms", err: "C ≥ 2"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSizes("-starts.sizes", tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				assert.ErrorContains(t, err, "-starts.sizes")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// -matrix.run picks it whole or by shape.
func TestShapeSelection(t *testing.T) {
	all := scenarios()
	names := map[string]bool{}
	for _, sc := range all {
		if names[sc.name] {
			t.Errorf("two scenarios named %q", sc.name)
		}
		names[sc.name] = true
	}
	count := func(only string, want func(scenario) bool) {
		t.Helper()
		got, err := selectScenarios(slices.Clone(all), only)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, sc := range all {
			if want(sc) {
				n++
			}
		}
		if len(got) != n || n == 0 {
			t.Errorf("-matrix.run %q picked %d scenarios, want %d", only, len(got), n)
		}
		for _, sc := range got {
			if !want(sc) {
				t.Errorf("-matrix.run %q picked %q", only, sc.name)
			}
		}
	}
	count("", func(sc scenario) bool { return !sc.shape })
	count("shape", func(sc scenario) bool { return sc.shape })
	count("bimodal", func(sc scenario) bool { return sc.dist == backend.Bimodal })
	count("lognormal", func(sc scenario) bool { return sc.dist == backend.Lognormal })
	count("methods", func(sc scenario) bool { return sc.methods })
	for _, sc := range all {
		if sc.shape && !slices.ContainsFunc(protectionsFor(sc, false), func(p matrixProtection) bool { return p.name == staticRow() }) {
			t.Errorf("%s has no static row", sc.name)
		}
	}
	if _, err := selectScenarios(all, "no such shape"); err == nil {
		t.Error("a -matrix.run that matches nothing is not an error")
	}
}

// TestShapeVerdict: sluice's row of a shape scenario is judged against
// issue 29's target for its load, relative to the static row.
func TestShapeVerdict(t *testing.T) {
	at := func(load float64, quota float64) scenario {
		return scenario{service: matrixS, stages: []matrixStage{{load, matrixC}}, quota: quota}
	}
	static := matrixMetrics{goodRatio: 0.97, p99: 40, rejected: 30}
	tests := []struct {
		name   string
		sc     scenario
		sluice matrixMetrics
		want   string
	}{
		{"light load, nothing rejected", at(0.5, 0), matrixMetrics{goodRatio: 1, p99: 20}, "met"},
		{"light load, rejections", at(0.8, 0), matrixMetrics{goodRatio: 0.99, p99: 20, rejected: 0.2}, "missed: 0.20 % rejected > 0.1 %"},
		{"quota, within", at(0.7, 0.03), matrixMetrics{goodRatio: 0.99, rejected: 0.4}, "met"},
		{"quota, collapse", at(0.7, 0.03), matrixMetrics{goodRatio: 0.43, rejected: 58}, "missed: 58.00 % rejected > 0.5 %"},
		{"1×, within 2 %", at(1, 0), matrixMetrics{goodRatio: 0.955, p99: 90}, "met"},
		{"1×, behind", at(1, 0), matrixMetrics{goodRatio: 0.27, p99: 30}, "missed: goodput 0.270 < C+8's 0.970 − 0.02"},
		{"2×, on the frontier", at(2, 0), matrixMetrics{goodRatio: 0.965, p99: 44}, "met"},
		{"5×, slow and short", at(5, 0), matrixMetrics{goodRatio: 0.9, p99: 60},
			"missed: goodput 0.900 < C+8's 0.970 − 0.01; p99 3.00·S > 1.1 × C+8's 2.00·S"},
		{"5×, no success", at(5, 0), matrixMetrics{goodRatio: 0, p99: math.NaN()},
			"missed: goodput 0.000 < C+8's 0.970 − 0.01; p99 NaN·S > 1.1 × C+8's 2.00·S"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := shapeVerdict(tt.sc, map[string]matrixMetrics{sluiceRow: tt.sluice, failsafeRow: {}, staticRow(): static})
			if got != tt.want {
				t.Errorf("shapeVerdict = %q, want %q", got, tt.want)
			}
		})
	}
	if got := shapeVerdict(at(2, 0), map[string]matrixMetrics{sluiceRow: static}); got != "-" {
		t.Errorf("without a static row: %q, want -", got)
	}
	// Above ideal a limit counts fast calls while slow ones overrun: the
	// static row's 104 % counts as 100 %.
	above := shapeVerdict(at(2, 0), map[string]matrixMetrics{sluiceRow: {goodRatio: 0.995, p99: 40}, failsafeRow: {}, staticRow(): {goodRatio: 1.04, p99: 40}})
	if above != "met" {
		t.Errorf("shapeVerdict above ideal = %q, want met", above)
	}
}

// writeMatrixReport writes the settings and one markdown table of every
// scenario × protection, each figure the median over the repetitions.
func writeMatrixReport(w io.Writer, rows []matrixRow, s matrixSettings) {
	fmt.Fprintf(w, "## Overload matrix\n\n")
	commit := s.commit
	if commit == "" {
		commit = "unknown"
	}
	fmt.Fprintf(w, "Commit %s; %s, %d cores (GOMAXPROCS %d); %d repetition(s), each figure the median over them; "+
		"phases of %v, the first %v of each left out of the summary (warm-up), except in the step scenarios; took %.1f min",
		commit, runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0), s.reps, s.phase, s.skip, s.elapsed.Minutes())
	if s.load[0] != "" {
		// A busy machine starves client and server alike: every row,
		// the static one included, then loses goodput to deadlines.
		fmt.Fprintf(w, "; the machine's 1-minute load average was %s at the start and %s at the end (the log gives it per run)", s.load[0], s.load[1])
	}
	fmt.Fprintf(w, ".\n\n")
	fmt.Fprintf(w, "Real gRPC over TCP on 127.0.0.1, client and server in one process, a fresh backend, server and connection "+
		"for every run; open-loop Poisson arrivals (seeded by repetition, the same for every protection); deadline 10·S per call. "+
		"Backends of C = %d workers: fifo (C workers behind an unbounded queue) or ps (processor sharing: all calls progress at "+
		"C/n of full speed). Service time S is constant unless the scenario names another shape of mean S (see the latency shapes below). Load is a multiple of C/S.\n\n", matrixC)
	fmt.Fprintf(w, "Protections: *sluice defaults* is `interceptor.NewServer()` with no option; *failsafe defaults* is "+
		"failsafe-go's `adaptivelimiter.NewWithDefaults()` through a unary interceptor (rejection = RESOURCE_EXHAUSTED); "+
		"*static C+8* is a semaphore admitting %d calls, no queue (the frontier a limit that knows C reaches); "+
		"*unprotected* has no limit. The client-side scenarios put `interceptor.NewClient()`'s DialOptions, or failsafegrpc's "+
		"unary client interceptor around `adaptivelimiter.NewWithDefaults()`, in front of an unprotected server. The unprotected and static rows run only "+
		"in the FIFO load scenarios at S = %v (unprotected also in the client-side ones, static also in the shape ones) unless -matrix.frontier is set.\n\n", matrixStatic(), matrixS)
	fmt.Fprintf(w, "Goodput is the calls that succeeded within their deadline; ideal is min(offered, C/S) (per stage in the step "+
		"scenarios, counted over the calls that arrived in the summarized stretch, so that it can pass 100 %% by a little when "+
		"calls arrive unevenly). p50 and p99 are of those successes. "+
		"Rejected and deadline exceeded are shares of the calls that arrived; in the quota scenarios the handler's own "+
		"RESOURCE_EXHAUSTED answers are not in *rejected* but in the notes, so *rejected* is what the limiter refused "+
		"beyond them (target ≤ 0.5 %%). Limit is the live concurrency limit sampled every 100 ms. CPU is the whole "+
		"process's (client, server and backend), in seconds per run; lag is the worst lateness of a 10 ms timer, "+
		"a check that the machine kept up. Step scenarios are summarized from the drop to the end, and recovery is the time from "+
		"a capacity change to the first 1 s window (sliding by 100 ms) with goodput ≥ 90 %% of ideal and p99 ≤ 3·S; "+
		"\"never\" means no window within the stage. With more than one repetition the notes also give the worst of them: "+
		"the lowest goodput and the highest p99 of any one run, since a median of 3 hides a run that collapsed.\n\n")
	fmt.Fprintln(w, "| scenario | protection | goodput / ideal | p50 | p99 | p50 / S | p99 / S | rejected | deadline exceeded | limit mean | limit max | CPU | lag | notes |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rows {
		if len(r.reps) == 0 {
			continue
		}
		m := medianMetrics(r.reps)
		var notes []string
		if r.sc.step {
			notes = append(notes, "recovery ↓ "+fmtRecovery(m.recoverDown)+", ↑ "+fmtRecovery(m.recoverUp))
		}
		if r.sc.quota > 0 {
			verdict := "met"
			if m.rejected > 0.5 {
				verdict = "missed"
			}
			notes = append(notes, fmt.Sprintf("handler refused %.1f %%; limiter rejected %.1f %% beyond them (target ≤ 0.5 %%: %s)",
				m.refused, m.rejected, verdict))
		}
		S := ms(r.sc.service)
		if worst := worstNote(r.reps, S); worst != "" {
			notes = append(notes, worst)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %.1f %% | %.1f %% | %s | %s | %.1f s | %.0f ms | %s |\n",
			r.sc.name, r.prot, fmtRatio(m.goodRatio), fmtNum(m.p50, " ms"), fmtNum(m.p99, " ms"),
			fmtNum(m.p50/S, ""), fmtNum(m.p99/S, ""), m.rejected, m.deadline,
			fmtNum(m.limitMean, ""), fmtNum(m.limitMax, ""), m.cpu, m.lag, strings.Join(notes, "; "))
	}
	fmt.Fprintln(w)
	writeShapeSummary(w, rows)
	if s.failedCalls > 0 {
		fmt.Fprintf(w, "%d calls failed other than by rejection, deadline or the handler's quota: the run is suspect.\n\n", s.failedCalls)
	}
}

// The rows a shape summary compares, by protection name.
const (
	sluiceRow   = "sluice defaults"
	failsafeRow = "failsafe defaults"
)

// staticRow is the static row's name.
func staticRow() string { return fmt.Sprintf("static C+8 (%d)", matrixStatic()) }

// writeShapeSummary writes, when rows has shape scenarios, one line per
// such scenario with sluice, failsafe-go and the static limit side by side
// and sluice's row judged against issue 29's targets.
func writeShapeSummary(w io.Writer, rows []matrixRow) {
	type trio struct {
		sc scenario
		by map[string]matrixMetrics
	}
	var order []string
	byName := map[string]*trio{}
	for _, r := range rows {
		if !r.sc.shape || len(r.reps) == 0 {
			continue
		}
		t := byName[r.sc.name]
		if t == nil {
			t = &trio{sc: r.sc, by: map[string]matrixMetrics{}}
			byName[r.sc.name] = t
			order = append(order, r.sc.name)
		}
		t.by[r.prot] = medianMetrics(r.reps)
	}
	if len(order) == 0 {
		return
	}
	fmt.Fprintf(w, "### Latency shapes\n\n")
	fmt.Fprintf(w, "The shape scenarios above side by side, each cell sluice · failsafe-go · static C+8 (medians). "+
		"Service times: constant, exponential (cv 1), bimodal (S/3 for 90 %% of calls, 7·S for 10 %%, cv 2), lognormal "+
		"(σ 1.2, cv 1.8; 0.6 %% of calls need more than the 10·S deadline even alone), all of mean S = %v; "+
		"*methods* is 80 %% of calls to a method taking S/4 and 20 %% to one taking 4·S (mean S, cv 1.5) on one pool "+
		"of C workers, behind one limiter for the service (`WithMethod(\"/%s/\", Limit{})` for sluice). "+
		"*Rejected* leaves out the handler's own refusals in the quota rows. The last column judges sluice against "+
		"issue 29's targets: ≤ 0.1 %% rejected below 1×, ≤ 0.5 %% beyond the handler's own with the quota, goodput "+
		"≥ static − 0.02 at 1×, goodput ≥ static − 0.01 and p99 ≤ 1.1 × static's at 2× and 5×, goodput capped "+
		"at 1 of ideal as make shapes caps it (above it a limit counts fast calls while slow ones overrun).\n\n", matrixS, methodsService)
	fmt.Fprintln(w, "| scenario | goodput / ideal | p99 / S | rejected | sluice vs target |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---|")
	for _, name := range order {
		t := byName[name]
		cell := func(f func(matrixMetrics) string) string {
			var out []string
			for _, p := range []string{sluiceRow, failsafeRow, staticRow()} {
				m, ok := t.by[p]
				if !ok {
					out = append(out, "-")
					continue
				}
				out = append(out, f(m))
			}
			return strings.Join(out, " · ")
		}
		S := ms(t.sc.service)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", name,
			cell(func(m matrixMetrics) string { return fmtRatio(m.goodRatio) }),
			cell(func(m matrixMetrics) string { return fmtNum(m.p99/S, "") }),
			cell(func(m matrixMetrics) string { return fmt.Sprintf("%.1f %%", m.rejected) }),
			shapeVerdict(t.sc, t.by))
	}
	fmt.Fprintln(w)
}

// shapeVerdict judges sluice's medians in a shape scenario against issue
// 29's targets by the virtual-time judge, the static limit's medians being
// the frontier: "met", or "missed: " and what fell short.
func shapeVerdict(sc scenario, by map[string]matrixMetrics) string {
	sl, ok := by[sluiceRow]
	st, okStatic := by[staticRow()]
	if !ok || !okStatic {
		return "-"
	}
	S := ms(sc.service)
	shape := func(m matrixMetrics) limitload.ShapeResult {
		return limitload.ShapeResult{Good: m.goodRatio, P99: m.p99 / S, Rejected: m.rejected / 100}
	}
	if why := missesTarget(sc.stages[0].load, sc.quota > 0, shape(sl), shape(st)); why != "" {
		return "missed: " + why
	}
	return "met"
}

// worstNote describes the worst repetitions of a row, the one with the
// lowest goodput and the one with the highest p99 (in service times of S
// ms), or "" for a single repetition.
func worstNote(reps []matrixMetrics, S float64) string {
	if len(reps) < 2 {
		return ""
	}
	good, p99 := math.Inf(1), math.Inf(-1)
	for _, m := range reps {
		if !math.IsNaN(m.goodRatio) {
			good = min(good, m.goodRatio)
		}
		if !math.IsNaN(m.p99) {
			p99 = max(p99, m.p99)
		}
	}
	if math.IsInf(good, 1) {
		return ""
	}
	note := fmt.Sprintf("worst of %d: %s of ideal", len(reps), fmtRatio(good))
	if !math.IsInf(p99, -1) && p99 > 0 {
		note += ", p99 " + fmtNum(p99/S, "·S")
	}
	return note
}

func fmtRatio(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%.1f %%", 100*f)
}

// fmtNum prints f with the precision its size deserves, or "-" for NaN and
// zero (no successes).
func fmtNum(f float64, unit string) string {
	switch {
	case math.IsNaN(f) || f == 0:
		return "-"
	case f >= 100:
		return fmt.Sprintf("%.0f%s", f, unit)
	case f >= 10:
		return fmt.Sprintf("%.1f%s", f, unit)
	}
	return fmt.Sprintf("%.2f%s", f, unit)
}

func fmtRecovery(f float64) string {
	switch {
	case math.IsNaN(f):
		return "-"
	case math.IsInf(f, 1):
		return "never"
	}
	return fmt.Sprintf("%.1f s", f)
}

// TestWorstNote: the report names the worst repetition of a row, so that a
// run that collapsed shows even when the median does not.
func TestWorstNote(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		reps []matrixMetrics
		want string
	}{
		{"one repetition: nothing to add", []matrixMetrics{{goodRatio: 0.5, p99: 100}}, ""},
		{"a collapse the median hides", []matrixMetrics{{goodRatio: 0.97, p99: 100}, {goodRatio: 0.55, p99: 96}, {goodRatio: 0.96, p99: 130}},
			"worst of 3: 55.0 % of ideal, p99 6.50·S"},
		{"no success in one run", []matrixMetrics{{goodRatio: 0.97, p99: 100}, {goodRatio: 0, p99: nan}},
			"worst of 2: 0.0 % of ideal, p99 5.00·S"},
		{"no figures at all", []matrixMetrics{{goodRatio: nan, p99: nan}, {goodRatio: nan, p99: nan}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := worstNote(tt.reps, 20); got != tt.want {
				t.Errorf("worstNote = %q, want %q", got, tt.want)
			}
		})
	}
}
