package bench

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/internal/testbed/overload"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// TestTenants measures interceptor.WithFairShare over real gRPC on
// loopback TCP, on the overload matrix's backends (C = 16, S = 20 ms,
// constant service times, FIFO and processor sharing) and with its rig
// (startRig): one connection per run, every call tagged with the metadata
// x-tenant naming its tenant. Three scenarios:
//
//   - tenants: a heavy tenant offering 2.5× capacity and four light ones
//     offering 0.1× each, five loadgen runs side by side over the one
//     connection;
//   - alone: a single tenant at 2×, what fairness must not cost;
//   - zipf: one loadgen run at 2× whose calls each name one of 10,000
//     tenants, drawn from a Zipf distribution, and the process's heap
//     after the run.
//
// Each runs with sluice's defaults, sluice's fair share keyed by x-tenant,
// the static C+8 (and failsafe-go's defaults in tenants). It takes about 6
// minutes at the defaults, so it only runs when asked:
//
//	go test -run '^TestTenants$' -tenants -v [-tenants.out FILE]
//
// or with SLUICE_BENCH_TENANTS=1 in the environment; `make bench-tenants`
// runs it. TestTenantsSmoke runs a short tenants run in every test pass.
var (
	tenantsFlag   = flag.Bool("tenants", false, "run TestTenants (about 6 minutes at the defaults); or set "+tenantsEnv+"=1")
	tenantsOut    = flag.String("tenants.out", "", "also write the tenants measurement's markdown report to this file")
	tenantsReps   = flag.Int("tenants.reps", 3, "repetitions of every run of the tenants measurement; the report gives medians")
	tenantsScale  = flag.Float64("tenants.scale", 1, "multiply the tenants measurement's phase (6 s at 1, the first 2 s left out) by this")
	tenantsOnly   = flag.String("tenants.run", "", "regular expression: run only the tenants scenarios whose name (e.g. \"zipf ps\") matches")
	tenantsCommit = flag.String("tenants.commit", "", "the commit the tenants measurement runs on, for its report")
)

const tenantsEnv = "SLUICE_BENCH_TENANTS"

const (
	// tenantsPhase is every run's length and tenantsSkip the warm-up
	// left out of its summary, both × -tenants.scale.
	tenantsPhase = 6 * time.Second
	tenantsSkip  = 2 * time.Second
	// tenantHeader is the metadata key naming a call's tenant, which the
	// fair-share row keys on.
	tenantHeader = "x-tenant"

	heavyLoad    = 2.5 // the heavy tenant's offered load, × C/S
	lightLoad    = 0.1 // each light tenant's
	lightTenants = 4
	aloneLoad    = 2.0
	zipfLoad     = 2.0
	zipfTenants  = 10000
	// zipfExponent is s of the Zipf distribution: the tenant of rank k
	// (1 to zipfTenants) sends a share of calls proportional to k^-s.
	zipfExponent = 1.1
	zipfLightest = 100 // the lightest tenants the zipf scenario follows
)

// fairRow is the row of sluice with fair share.
const fairRow = "sluice fair share"

// fairShare is the fair-share row: NewServer(WithFairShare(x-tenant)).
var fairShare = matrixProtection{name: fairRow, build: func(scenario) ([]grpc.ServerOption, []grpc.DialOption, func() int, func(), error) {
	return sluiceServer(interceptor.WithFairShare(callerkey.Metadata(tenantHeader)))
}}

// A tenant offers its own stream of calls, one loadgen run.
type tenant struct {
	name  string
	load  float64 // × C/S
	light bool
}

// A tenantScenario is one table row group of the tenants measurement.
type tenantScenario struct {
	name string // "tenants", "alone" or "zipf"
	kind string // backend: "fifo" or "ps"
	// tenants run side by side, each its own loadgen run.
	tenants []tenant
	// zipf > 0 replaces tenants: one run at load whose calls each name
	// one of zipf tenants, drawn from a Zipf distribution.
	zipf int
	load float64 // total offered load, × C/S
}

func (ts tenantScenario) title() string { return ts.name + " " + ts.kind }

// scenario is ts as a scenario of the overload matrix, for startRig and
// arrivalWindow: one stage at ts's total load on C workers.
func (ts tenantScenario) scenario() scenario {
	return scenario{name: ts.title(), kind: ts.kind, service: matrixS, dist: backend.Constant,
		stages: []matrixStage{{ts.load, matrixC}}}
}

// tenantScenarios lists the measurement in the order of its report.
func tenantScenarios() []tenantScenario {
	var out []tenantScenario
	kinds := []string{"fifo", "ps"}
	for _, kind := range kinds {
		ts := []tenant{{"heavy", heavyLoad, false}}
		for i := range lightTenants {
			ts = append(ts, tenant{fmt.Sprintf("light-%d", i+1), lightLoad, true})
		}
		out = append(out, tenantScenario{name: "tenants", kind: kind, tenants: ts, load: heavyLoad + lightTenants*lightLoad})
	}
	for _, kind := range kinds {
		out = append(out, tenantScenario{name: "alone", kind: kind, tenants: []tenant{{"alone", aloneLoad, false}}, load: aloneLoad})
	}
	for _, kind := range kinds {
		out = append(out, tenantScenario{name: "zipf", kind: kind, zipf: zipfTenants, load: zipfLoad})
	}
	return out
}

// tenantProtections are the rows of ts, built from the matrix's: the
// static C+8, sluice's defaults, sluice's fair share, and failsafe-go's
// defaults in the tenants scenario.
func tenantProtections(ts tenantScenario) []matrixProtection {
	var out []matrixProtection
	for _, p := range serverProtections() {
		switch {
		case p.name == staticRow():
			out = append(out, p)
		case p.name == sluiceRow:
			out = append(out, p, fairShare)
		case p.name == failsafeRow && ts.name == "tenants":
			out = append(out, p)
		}
	}
	return out
}

// A zipfCall is one call of the zipf scenario with its tenant's rank
// (0-based: 0 is the heaviest).
type zipfCall struct {
	tenant int
	call   loadgen.Call
}

// A tenantRun is what one run of a tenantScenario produced.
type tenantRun struct {
	matrixRun                   // the calls of all tenants in one report
	reports   []*loadgen.Report // one per tenant of ts.tenants, or the zipf run's only
	zipfCalls []zipfCall
	heapInuse uint64 // bytes, after the run and a GC, the server still up
}

// runTenants runs ts once with p on a fresh rig: the tenants' loadgen runs
// side by side over its one connection, each call carrying its tenant's
// name in tenantHeader.
func runTenants(ctx context.Context, ts tenantScenario, p matrixProtection, phase, skip time.Duration, seed uint64) (tenantRun, error) {
	sc := ts.scenario()
	rg, err := startRig(ctx, sc, p, seed)
	if err != nil {
		return tenantRun{}, err
	}
	defer rg.close()
	client := testpb.NewTestServiceClient(rg.conn)
	callAs := func(ctx context.Context, name string) error {
		ctx = metadata.AppendToOutgoingContext(ctx, tenantHeader, name)
		_, err := client.Unary(ctx, &testpb.UnaryRequest{})
		return err
	}
	var failed atomic.Int64
	config := func(load float64, seed uint64, call func(context.Context) error) loadgen.Config {
		return loadgen.Config{
			Phases:   []loadgen.Phase{{Name: "0", Duration: phase, Rate: sc.rate(matrixStage{load, matrixC})}},
			Deadline: 10 * sc.service,
			Seed:     seed,
			Call:     call,
			Classify: countingClassify(&failed),
		}
	}

	var run tenantRun
	obs, err := observeRun(rg.limit, func() error {
		if ts.zipf > 0 {
			rep, calls, err := runZipf(ctx, ts, config(ts.load, seed, nil), callAs, seed)
			run.reports, run.zipfCalls = []*loadgen.Report{rep}, calls
			return err
		}
		run.reports = make([]*loadgen.Report, len(ts.tenants))
		errs := make([]error, len(ts.tenants))
		var wg sync.WaitGroup
		for i, tn := range ts.tenants {
			// Each tenant its own arrivals, the same for every row.
			cfg := config(tn.load, seed*1000+uint64(i), func(ctx context.Context) error { return callAs(ctx, tn.name) })
			wg.Go(func() { run.reports[i], errs[i] = loadgen.Run(ctx, cfg) })
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	if err != nil {
		return tenantRun{}, err
	}
	// The limiter still knows the run's callers (for a second after
	// their last call): the heap holds what they cost.
	runtime.GC()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	run.heapInuse = mem.HeapInuse
	run.matrixRun = matrixRun{report: mergeReports(run.reports), limits: obs.limits, cpu: obs.cpu, maxLag: obs.maxLag,
		failed: failed.Load(), phase: phase, skip: skip, service: sc.service}
	return run, nil
}

// runZipf is the loadgen run of the zipf scenario: cfg, whose every call
// names the tenant of rank k+1 (k from 0 to ts.zipf-1) with probability
// proportional to (1+k)^-zipfExponent, drawn by math/rand/v2's Zipf from
// a generator seeded with seed. It returns loadgen's report and, apart,
// every call with its tenant (arrival measured as loadgen does, from
// just before the run starts).
func runZipf(ctx context.Context, ts tenantScenario, cfg loadgen.Config, callAs func(context.Context, string) error, seed uint64) (*loadgen.Report, []zipfCall, error) {
	names := make([]string, ts.zipf)
	for k := range names {
		names[k] = fmt.Sprintf("t%05d", k+1)
	}
	var (
		mu    sync.Mutex
		calls []zipfCall
	)
	zipf := rand.NewZipf(rand.New(rand.NewPCG(seed, 11)), zipfExponent, 1, uint64(ts.zipf-1))
	start := time.Now()
	cfg.Call = func(ctx context.Context) error {
		arrival := time.Since(start)
		mu.Lock()
		k := int(zipf.Uint64())
		mu.Unlock()
		t0 := time.Now()
		err := callAs(ctx, names[k])
		lat := time.Since(t0)
		r, _ := classifyCall(err)
		mu.Lock()
		calls = append(calls, zipfCall{k, loadgen.Call{Arrival: arrival, Latency: lat, Result: r}})
		mu.Unlock()
		return err
	}
	rep, err := loadgen.Run(ctx, cfg)
	return rep, calls, err
}

// tenantMetrics are the figures of one run. Shares are fractions (0 to
// 1), latencies in ms; NaN where they do not apply.
type tenantMetrics struct {
	total                 matrixMetrics // all calls, measured as the matrix measures a run
	lightOK, lightWorstOK float64       // the light tenants' calls answered OK in time; the lowest of one light tenant
	lightP99              float64       // of the light tenants' good calls
	heavyOK               float64
	tenantsSeen           float64 // zipf: tenants with a call in the summary
	lightestOK            float64 // zipf: the zipfLightest lightest tenants' calls answered OK in time
	heapMiB               float64
}

// okShare is the share of w's calls answered OK within their deadline.
func okShare(w window) float64 {
	if w.calls == 0 {
		return math.NaN()
	}
	return float64(w.good) / float64(w.calls)
}

// mergeReports puts the calls of reports, runs of the same phases and
// deadline, in one report.
func mergeReports(reports []*loadgen.Report) *loadgen.Report {
	out := &loadgen.Report{Config: reports[0].Config}
	for _, r := range reports {
		out.Calls = append(out.Calls, r.Calls...)
		out.Duration = max(out.Duration, r.Duration)
	}
	return out
}

// measureTenants computes the metrics of run r of ts over the calls that
// arrived from its skip to its end.
func measureTenants(ts tenantScenario, r tenantRun) tenantMetrics {
	sc := ts.scenario()
	win := func(reports ...*loadgen.Report) window {
		return arrivalWindow(sc, matrixRun{report: mergeReports(reports), phase: r.phase}, r.skip, r.phase)
	}
	nan := math.NaN()
	m := tenantMetrics{
		total:   measure(sc, r.matrixRun),
		lightOK: nan, lightWorstOK: nan, lightP99: nan, heavyOK: nan, tenantsSeen: nan, lightestOK: nan,
		heapMiB: float64(r.heapInuse) / (1 << 20),
	}
	if ts.zipf > 0 {
		seen, lightest := lightestTenants(r.zipfCalls, r.skip, r.phase, zipfLightest)
		m.tenantsSeen = float64(seen)
		rep := &loadgen.Report{Config: r.reports[0].Config}
		for _, c := range r.zipfCalls {
			if lightest[c.tenant] {
				rep.Calls = append(rep.Calls, c.call)
			}
		}
		m.lightestOK = okShare(win(rep))
		return m
	}
	var (
		light, heavy []*loadgen.Report
		lightShares  []float64
	)
	for i, tn := range ts.tenants {
		if tn.light {
			light = append(light, r.reports[i])
			lightShares = append(lightShares, okShare(win(r.reports[i])))
		} else {
			heavy = append(heavy, r.reports[i])
		}
	}
	if len(light) > 0 {
		w := win(light...)
		m.lightOK, m.lightP99, m.lightWorstOK = okShare(w), ms(w.p99), slices.Min(lightShares)
	}
	if len(heavy) > 0 {
		m.heavyOK = okShare(win(heavy...))
	}
	return m
}

// lightestTenants counts the calls of each tenant that arrived in [from,
// to) and returns how many tenants sent at least one and the n lightest of
// them: fewest calls first, ties going to the tenant of higher rank (the
// one the distribution makes rarer).
func lightestTenants(calls []zipfCall, from, to time.Duration, n int) (int, map[int]bool) {
	count := map[int]int{}
	for _, c := range calls {
		if c.call.Arrival >= from && c.call.Arrival < to {
			count[c.tenant]++
		}
	}
	ids := make([]int, 0, len(count))
	for id := range count {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b int) int {
		return cmp.Or(cmp.Compare(count[a], count[b]), cmp.Compare(b, a))
	})
	out := map[int]bool{}
	for _, id := range ids[:min(n, len(ids))] {
		out[id] = true
	}
	return len(ids), out
}

// medianTenantMetrics takes the median of each figure over reps.
func medianTenantMetrics(reps []tenantMetrics) tenantMetrics {
	f := func(get func(tenantMetrics) float64) float64 {
		xs := make([]float64, len(reps))
		for i, r := range reps {
			xs[i] = get(r)
		}
		return median(xs)
	}
	totals := make([]matrixMetrics, len(reps))
	for i, r := range reps {
		totals[i] = r.total
	}
	return tenantMetrics{
		total:        medianMetrics(totals),
		lightOK:      f(func(m tenantMetrics) float64 { return m.lightOK }),
		lightWorstOK: f(func(m tenantMetrics) float64 { return m.lightWorstOK }),
		lightP99:     f(func(m tenantMetrics) float64 { return m.lightP99 }),
		heavyOK:      f(func(m tenantMetrics) float64 { return m.heavyOK }),
		tenantsSeen:  f(func(m tenantMetrics) float64 { return m.tenantsSeen }),
		lightestOK:   f(func(m tenantMetrics) float64 { return m.lightestOK }),
		heapMiB:      f(func(m tenantMetrics) float64 { return m.heapMiB }),
	}
}

// A tenantRow is one line of the report.
type tenantRow struct {
	ts   tenantScenario
	prot string
	reps []tenantMetrics
}

// runTenantsMatrix runs every scenario of tss with each of its rows, reps
// times over (repetition outermost, as runMatrix does), and returns the
// rows in report order and the count of calls that failed other than by
// rejection or deadline.
func runTenantsMatrix(ctx context.Context, t testing.TB, tss []tenantScenario, reps int, phase, skip time.Duration,
	rowsOf func(tenantScenario) []matrixProtection) ([]tenantRow, int64, error) {
	var rows []tenantRow
	index := map[[2]string]int{}
	for _, ts := range tss {
		for _, p := range rowsOf(ts) {
			index[[2]string{ts.title(), p.name}] = len(rows)
			rows = append(rows, tenantRow{ts: ts, prot: p.name})
		}
	}
	var failed int64
	for rep := range reps {
		for _, ts := range tss {
			for _, p := range rowsOf(ts) {
				r, err := runTenants(ctx, ts, p, phase, skip, uint64(rep+1))
				if err != nil {
					return nil, 0, fmt.Errorf("%s, %s: %w", ts.title(), p.name, err)
				}
				failed += r.failed
				m := measureTenants(ts, r)
				t.Logf("rep %d/%d | %s | %s | light OK %s (worst tenant %s) | light p99 %s | heavy OK %s | lightest-%d OK %s | goodput/ideal %.3f | p99 %s | rejected %.1f %% | limit mean %s max %s | heap %.1f MiB | CPU %.1f s | lag %.0f ms | load average %s",
					rep+1, reps, ts.title(), p.name, fmtRatio(m.lightOK), fmtRatio(m.lightWorstOK), fmtNum(m.lightP99, " ms"),
					fmtRatio(m.heavyOK), zipfLightest, fmtRatio(m.lightestOK), m.total.goodRatio, fmtNum(m.total.p99, " ms"), m.total.rejected,
					fmtNum(m.total.limitMean, ""), fmtNum(m.total.limitMax, ""), m.heapMiB, m.total.cpu, m.total.lag, overload.LoadAverage())
				if r.failed > 0 {
					t.Logf("  %d calls failed other than by rejection or deadline", r.failed)
				}
				i := index[[2]string{ts.title(), p.name}]
				rows[i].reps = append(rows[i].reps, m)
			}
		}
	}
	return rows, failed, nil
}

// Targets of the fair share (the issue's), judged on its row.
const (
	lightOKTarget  = 0.99 // light tenants' and the lightest zipf tenants' calls answered OK
	lightP99Target = 2    // light tenants' p99, × S
	goodputSlack   = 0.01 // goodput / ideal below sluice's defaults'
	// aloneP99Slack is how much higher than the defaults' a lone
	// tenant's p99 may be and still count as the same (our reading of
	// "the same p99"; the median of a few runs moves by this much).
	aloneP99Slack = 1.1
)

// tenantVerdict judges the fair-share row of a scenario against the
// targets, sluice's defaults being the run without fairness; "" for the
// other rows.
func tenantVerdict(ts tenantScenario, prot string, by map[string]tenantMetrics) string {
	fair, ok := by[fairRow]
	if prot != fairRow || !ok {
		return ""
	}
	def, okDef := by[sluiceRow]
	S := ms(matrixS)
	var miss []string
	goodput := func() {
		if !okDef {
			return
		}
		if !(fair.total.goodRatio >= def.total.goodRatio-goodputSlack) {
			miss = append(miss, fmt.Sprintf("goodput %s < defaults' %s − 1 pt", fmtRatio(fair.total.goodRatio), fmtRatio(def.total.goodRatio)))
		}
	}
	switch ts.name {
	case "tenants":
		if !(fair.lightOK >= lightOKTarget) {
			miss = append(miss, fmt.Sprintf("light OK %s < 99 %%", fmtRatio(fair.lightOK)))
		}
		if !(fair.lightP99 <= lightP99Target*S) {
			miss = append(miss, fmt.Sprintf("light p99 %s·S > 2·S", fmtNum(fair.lightP99/S, "")))
		}
		goodput()
	case "alone":
		goodput()
		if okDef && !(fair.total.p99 <= aloneP99Slack*def.total.p99) {
			miss = append(miss, fmt.Sprintf("p99 %s·S > 1.1 × defaults' %s·S", fmtNum(fair.total.p99/S, ""), fmtNum(def.total.p99/S, "")))
		}
	case "zipf":
		if !(fair.lightestOK >= lightOKTarget) {
			miss = append(miss, fmt.Sprintf("lightest %d OK %s < 99 %%", zipfLightest, fmtRatio(fair.lightestOK)))
		}
	}
	if len(miss) == 0 {
		return "met"
	}
	return "missed: " + strings.Join(miss, ", ")
}

// tenantWorst names the worst repetition of a row in the figure its
// scenario is judged by, or "" for a single repetition.
func tenantWorst(ts tenantScenario, reps []tenantMetrics) string {
	if len(reps) < 2 {
		return ""
	}
	worst := func(get func(tenantMetrics) float64) float64 {
		w := math.Inf(1)
		for _, m := range reps {
			if v := get(m); !math.IsNaN(v) {
				w = min(w, v)
			}
		}
		if math.IsInf(w, 1) {
			return math.NaN()
		}
		return w
	}
	switch ts.name {
	case "tenants":
		return fmt.Sprintf("worst of %d: light OK %s, goodput %s of ideal", len(reps),
			fmtRatio(worst(func(m tenantMetrics) float64 { return m.lightOK })), fmtRatio(worst(func(m tenantMetrics) float64 { return m.total.goodRatio })))
	case "zipf":
		return fmt.Sprintf("worst of %d: lightest %d OK %s", len(reps), zipfLightest, fmtRatio(worst(func(m tenantMetrics) float64 { return m.lightestOK })))
	}
	return fmt.Sprintf("worst of %d: goodput %s of ideal", len(reps), fmtRatio(worst(func(m tenantMetrics) float64 { return m.total.goodRatio })))
}

// writeTenantsReport writes the settings and one markdown table per
// scenario, each figure the median over the repetitions.
func writeTenantsReport(w io.Writer, rows []tenantRow, s matrixSettings) {
	fmt.Fprintf(w, "## Tenants: fair share\n\n")
	commit := cmp.Or(s.commit, "unknown")
	fmt.Fprintf(w, "Commit %s; %s, %d cores (GOMAXPROCS %d); %d repetition(s), each figure the median over them; "+
		"runs of %v, the calls that arrived in the first %v left out of the summary (warm-up); took %.1f min",
		commit, runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0), s.reps, s.phase, s.skip, s.elapsed.Minutes())
	if s.load[0] != "" {
		fmt.Fprintf(w, "; the machine's 1-minute load average was %s at the start and %s at the end (the log gives it per run)", s.load[0], s.load[1])
	}
	fmt.Fprintf(w, ".\n\n")
	fmt.Fprintf(w, "The overload matrix's rig: real gRPC over TCP on 127.0.0.1, client and server in one process, a fresh backend, "+
		"server and connection for every run; backends of C = %d workers, constant service time S = %v, fifo (C workers behind an "+
		"unbounded queue) or ps (processor sharing); open-loop Poisson arrivals seeded by repetition and tenant, the same for "+
		"every row; deadline 10·S per call; load is a multiple of C/S. Every call carries its tenant's name in the metadata `%s`, "+
		"and all tenants share the run's one connection.\n\n", matrixC, matrixS, tenantHeader)
	fmt.Fprintf(w, "Scenarios: *tenants* is a heavy tenant offering %g× and %d light ones offering %g× each, each tenant its own "+
		"loadgen run, side by side; *alone* is one tenant at %g×; *zipf* is one run at %g× whose every call names one of %d "+
		"tenants, the tenant of rank k with probability ∝ k^-%g (math/rand/v2's Zipf, seeded by repetition); its lightest %d "+
		"are the tenants with the fewest calls in the summary among those with at least one (ties to the rarer rank).\n\n",
		heavyLoad, lightTenants, lightLoad, aloneLoad, zipfLoad, zipfTenants, zipfExponent, zipfLightest)
	fmt.Fprintf(w, "Rows: *sluice defaults* is `interceptor.NewServer()` with no option; *sluice fair share* is "+
		"`interceptor.NewServer(interceptor.WithFairShare(callerkey.Metadata(%q)))`; *static C+8* is a semaphore admitting %d "+
		"calls, no queue; *failsafe defaults* is failsafe-go's `adaptivelimiter.NewWithDefaults()` through a unary interceptor "+
		"(tenants scenario only).\n\n", tenantHeader, matrixStatic())
	fmt.Fprintf(w, "OK is the share of a tenant group's calls answered OK within the deadline; goodput / ideal counts all calls, "+
		"ideal being min(offered, C/S); p99 is of the calls answered OK in time; rejected is the share of all calls refused "+
		"with RESOURCE_EXHAUSTED. Limit is the live concurrency limit sampled every 100 ms over the summary (for the static row, its size). Heap is the process's HeapInuse after the run and a GC, the server and its limiter still "+
		"up. Lag is the worst lateness of a 10 ms timer, a check that the machine kept up. The last column judges the fair-share "+
		"row: tenants, light OK ≥ 99 %%, light p99 ≤ 2·S and goodput / ideal ≥ sluice defaults' − 1 pt; alone, goodput / ideal ≥ "+
		"sluice defaults' − 1 pt and p99 ≤ %g × theirs; zipf, lightest %d OK ≥ 99 %%.\n\n", aloneP99Slack, zipfLightest)

	S := ms(matrixS)
	group := func(name string) ([]tenantRow, map[string]map[string]tenantMetrics) {
		var out []tenantRow
		by := map[string]map[string]tenantMetrics{}
		for _, r := range rows {
			if r.ts.name != name || len(r.reps) == 0 {
				continue
			}
			out = append(out, r)
			if by[r.ts.kind] == nil {
				by[r.ts.kind] = map[string]tenantMetrics{}
			}
			by[r.ts.kind][r.prot] = medianTenantMetrics(r.reps)
		}
		return out, by
	}
	notes := func(r tenantRow, by map[string]map[string]tenantMetrics) string {
		return strings.Join(slices.DeleteFunc([]string{tenantVerdict(r.ts, r.prot, by[r.ts.kind]), tenantWorst(r.ts, r.reps)},
			func(s string) bool { return s == "" }), "; ")
	}
	if rs, by := group("tenants"); len(rs) > 0 {
		fmt.Fprintf(w, "### Heavy %g× and %d light %g× each\n\n", heavyLoad, lightTenants, lightLoad)
		fmt.Fprintln(w, "| backend | protection | light OK | worst light tenant OK | light p99 / S | heavy OK | goodput / ideal | p99 / S | rejected | limit mean / max | lag | verdict; notes |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
		for _, r := range rs {
			m := by[r.ts.kind][r.prot]
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %.1f %% | %s | %.0f ms | %s |\n", r.ts.kind, r.prot,
				fmtRatio(m.lightOK), fmtRatio(m.lightWorstOK), fmtNum(m.lightP99/S, ""), fmtRatio(m.heavyOK),
				fmtRatio(m.total.goodRatio), fmtNum(m.total.p99/S, ""), m.total.rejected, fmtLimit(m.total), m.total.lag, notes(r, by))
		}
		fmt.Fprintln(w)
	}
	if rs, by := group("alone"); len(rs) > 0 {
		fmt.Fprintf(w, "### One tenant alone at %g×\n\n", aloneLoad)
		fmt.Fprintln(w, "| backend | protection | goodput / ideal | p99 / S | rejected | limit mean / max | lag | verdict; notes |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---|")
		for _, r := range rs {
			m := by[r.ts.kind][r.prot]
			fmt.Fprintf(w, "| %s | %s | %s | %s | %.1f %% | %s | %.0f ms | %s |\n", r.ts.kind, r.prot,
				fmtRatio(m.total.goodRatio), fmtNum(m.total.p99/S, ""), m.total.rejected, fmtLimit(m.total), m.total.lag, notes(r, by))
		}
		fmt.Fprintln(w)
	}
	if rs, by := group("zipf"); len(rs) > 0 {
		fmt.Fprintf(w, "### %d Zipf tenants (s = %g) at %g× in all\n\n", zipfTenants, zipfExponent, zipfLoad)
		fmt.Fprintf(w, "| backend | protection | tenants seen | lightest %d OK | goodput / ideal | p99 / S | rejected | limit mean / max | heap | lag | verdict; notes |\n", zipfLightest)
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
		for _, r := range rs {
			m := by[r.ts.kind][r.prot]
			fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %s | %.1f %% | %s | %.1f MiB | %.0f ms | %s |\n", r.ts.kind, r.prot,
				m.tenantsSeen, fmtRatio(m.lightestOK), fmtRatio(m.total.goodRatio), fmtNum(m.total.p99/S, ""), m.total.rejected,
				fmtLimit(m.total), m.heapMiB, m.total.lag, notes(r, by))
		}
		fmt.Fprintln(w)
	}
	if s.failedCalls > 0 {
		fmt.Fprintf(w, "%d calls failed other than by rejection or deadline: the run is suspect.\n\n", s.failedCalls)
	}
}

// fmtLimit gives a row's mean and highest live limit.
func fmtLimit(m matrixMetrics) string {
	return fmtNum(m.limitMean, "") + " / " + fmtNum(m.limitMax, "")
}

// selectTenantScenarios returns the scenarios of tss whose title matches
// the regular expression only (all of them when only is empty).
func selectTenantScenarios(tss []tenantScenario, only string) ([]tenantScenario, error) {
	if only == "" {
		return tss, nil
	}
	re, err := regexp.Compile(only)
	if err != nil {
		return nil, fmt.Errorf("-tenants.run: %w", err)
	}
	tss = slices.DeleteFunc(tss, func(ts tenantScenario) bool { return !re.MatchString(ts.title()) })
	if len(tss) == 0 {
		return nil, fmt.Errorf("-tenants.run %q matches no scenario", only)
	}
	return tss, nil
}

func tenantsEnabled() bool { return *tenantsFlag || os.Getenv(tenantsEnv) == "1" }

func TestTenants(t *testing.T) {
	if !tenantsEnabled() {
		t.Skipf("the tenants measurement takes about 6 minutes: run it with -tenants or %s=1 (make bench-tenants does)", tenantsEnv)
	}
	if *tenantsReps < 1 || *tenantsScale <= 0 {
		t.Fatalf("-tenants.reps is %d and -tenants.scale %g: need at least 1 repetition and a positive scale", *tenantsReps, *tenantsScale)
	}
	tss, err := selectTenantScenarios(tenantScenarios(), *tenantsOnly)
	if err != nil {
		t.Fatal(err)
	}
	phase := time.Duration(*tenantsScale * float64(tenantsPhase))
	skip := time.Duration(*tenantsScale * float64(tenantsSkip))
	start, load0 := time.Now(), overload.LoadAverage()
	t.Logf("load average at the start: %s", load0)
	rows, failed, err := runTenantsMatrix(context.Background(), t, tss, *tenantsReps, phase, skip, tenantProtections)
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	writeTenantsReport(&md, rows, matrixSettings{
		reps: *tenantsReps, phase: phase, skip: skip, commit: *tenantsCommit, elapsed: time.Since(start),
		failedCalls: failed, load: [2]string{load0, overload.LoadAverage()},
	})
	t.Log("\n" + md.String())
	if *tenantsOut != "" {
		if err := os.WriteFile(*tenantsOut, []byte(md.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if failed > 0 {
		t.Errorf("%d calls failed other than by rejection or deadline", failed)
	}
}

// TestTenantsSmoke runs the tenants scenario for a second with the fair
// share on FIFO, and the zipf one for half a second, so that plain go
// test keeps the instrument working. It asserts no performance, only that
// the runs complete, every tenant gets calls through and the report has
// its lines.
func TestTenantsSmoke(t *testing.T) {
	tss := tenantScenarios()
	tenants := tss[slices.IndexFunc(tss, func(ts tenantScenario) bool { return ts.title() == "tenants fifo" })]
	zipf := tss[slices.IndexFunc(tss, func(ts tenantScenario) bool { return ts.title() == "zipf fifo" })]
	fairOnly := func(tenantScenario) []matrixProtection { return []matrixProtection{fairShare} }
	ctx := context.Background()

	rows, failed, err := runTenantsMatrix(ctx, t, []tenantScenario{tenants}, 1, time.Second, 0, fairOnly)
	if err != nil {
		t.Fatal(err)
	}
	zrows, zfailed, err := runTenantsMatrix(ctx, t, []tenantScenario{zipf}, 1, 500*time.Millisecond, 0, fairOnly)
	if err != nil {
		t.Fatal(err)
	}
	if failed+zfailed > 0 {
		t.Errorf("%d calls failed other than by rejection or deadline", failed+zfailed)
	}
	if len(rows) != 1 || len(zrows) != 1 {
		t.Fatalf("%d and %d rows, want one each", len(rows), len(zrows))
	}
	// Every tenant got calls through: the worst light tenant too.
	m := rows[0].reps[0]
	for name, ok := range map[string]float64{"heavy": m.heavyOK, "worst light": m.lightWorstOK} {
		if !(ok > 0) {
			t.Errorf("tenants, %s: no call answered OK in time (OK share %v)", name, ok)
		}
	}
	if zm := zrows[0].reps[0]; !(zm.total.goodRatio > 0) || !(zm.tenantsSeen > 0) {
		t.Errorf("zipf: goodput / ideal %v with %v tenants seen", zm.total.goodRatio, zm.tenantsSeen)
	}
	var md strings.Builder
	writeTenantsReport(&md, append(rows, zrows...), matrixSettings{reps: 1, phase: time.Second})
	for _, line := range []string{"| fifo | " + fairRow + " | ", "### Heavy", "### 10000 Zipf"} {
		if strings.Count(md.String(), line) == 0 {
			t.Errorf("the report has no %q:\n%s", line, md.String())
		}
	}
}

// TestLightestTenants: the lightest tenants are those with the fewest
// calls in the window, among those with any, ties to the higher rank.
func TestLightestTenants(t *testing.T) {
	at := func(tenant int, arrival time.Duration) zipfCall {
		return zipfCall{tenant, loadgen.Call{Arrival: arrival}}
	}
	s := time.Second
	calls := []zipfCall{
		at(0, s), at(0, s), at(0, s),
		at(1, s), at(1, s),
		at(2, s), at(2, 0), at(2, 0), // two calls before the window
		at(3, s),
		at(4, 0), // outside the window: not seen
	}
	seen, got := lightestTenants(calls, s, 2*s, 2)
	if seen != 4 {
		t.Errorf("seen %d tenants, want 4", seen)
	}
	if want := map[int]bool{3: true, 2: true}; !maps.Equal(got, want) {
		t.Errorf("lightest 2: %v, want %v", got, want)
	}
	if _, got := lightestTenants(calls, s, 2*s, 10); len(got) != 4 {
		t.Errorf("lightest 10 of 4: %v", got)
	}
}
