// Package fleet runs open-loop load from one gRPC client over several
// servers of different capacities, each behind sluice's server defaults
// with load reports on, and records which server got each call. It is the
// fleet test's and examples/fleet's harness: the same servers measured
// under round_robin and under weighted_round_robin fed by sluice's ORCA
// reports.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/weightedroundrobin" // registers weighted_round_robin
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/internal/testbed/overload"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// WRR is the weighted_round_robin configuration of the fleet runs, chosen
// for runs of a minute or less; gRPC's defaults suit long-lived fleets.
type WRR struct {
	// BlackoutPeriod: how long a server must have reported before its
	// weight counts (default 10 s, a sixth of a one-minute run). 1 s is
	// enough to skip the reports of a server's first calls.
	BlackoutPeriod time.Duration
	// WeightUpdatePeriod: how often the picker takes the new weights
	// (default 1 s, minimum 100 ms).
	WeightUpdatePeriod time.Duration
	// WeightExpirationPeriod: how long a weight lasts without a new report
	// before the server falls back to the mean weight (default 3 min).
	WeightExpirationPeriod time.Duration
	// ErrorUtilizationPenalty multiplies eps/qps in the weight,
	// qps / (utilization + eps/qps × penalty) (default 1).
	ErrorUtilizationPenalty float64
}

// DefaultWRR is the configuration the fleet runs use.
var DefaultWRR = WRR{
	BlackoutPeriod:          time.Second,
	WeightUpdatePeriod:      250 * time.Millisecond,
	WeightExpirationPeriod:  10 * time.Second,
	ErrorUtilizationPenalty: 1,
}

// ServiceConfig returns the gRPC service config that selects w.
func (w WRR) ServiceConfig() string {
	return fmt.Sprintf(`{"loadBalancingConfig":[{"weighted_round_robin":{`+
		`"blackoutPeriod":"%gs","weightUpdatePeriod":"%gs","weightExpirationPeriod":"%gs","errorUtilizationPenalty":%g}}]}`,
		w.BlackoutPeriod.Seconds(), w.WeightUpdatePeriod.Seconds(), w.WeightExpirationPeriod.Seconds(), w.ErrorUtilizationPenalty)
}

// orcaTrailer is the trailer that carries a call's ORCA load report.
const orcaTrailer = "endpoint-load-metrics-bin"

// RoundRobin is the service config of plain round_robin.
const RoundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// Config describes one run.
type Config struct {
	Capacities []int         // workers of each server's FIFO backend
	Service    time.Duration // service time S of one call
	Load       float64       // offered load, a multiple of the fleet's capacity (Capacities)
	// Duration is the run's length when Phases is empty.
	Duration time.Duration
	// Phases, if set, split the run into stretches in which some servers
	// have other capacities than Capacities, at the same offered load.
	// Each lasts a whole number of seconds, so that every Second falls in
	// one phase.
	Phases   []Phase
	Deadline time.Duration // of every call; 10·S if zero
	// ServiceConfig picks the client's balancer: RoundRobin or
	// WRR.ServiceConfig().
	ServiceConfig string
	Seed          uint64
	// Options are added to every server's WithLoadReports; none gives
	// sluice's defaults.
	Options []interceptor.ServerOption
	// Tick, if set, gets each second's figures while the run goes on.
	Tick func(Second)
}

// A Phase is a stretch of a run with fixed capacities.
type Phase struct {
	Name     string
	Duration time.Duration
	// Capacities are each server's workers during the phase; nil keeps
	// Config.Capacities.
	Capacities []int
}

// Ideal is the fleet's capacity: the sum of Capacities / S. A run's best
// goodput is the smaller of this and what it offers; see PhaseIdeal.
func (c Config) Ideal() float64 { return float64(sum(c.Capacities)) / c.Service.Seconds() }

// Plan is the run's phases: Phases, or one phase of Duration at
// Capacities named after the load.
func (c Config) Plan() []Phase {
	if len(c.Phases) > 0 {
		return c.Phases
	}
	return []Phase{{Name: fmt.Sprintf("%gx", c.Load), Duration: c.Duration}}
}

// PhaseCapacities is each server's workers during phase i.
func (c Config) PhaseCapacities(i int) []int {
	if p := c.Plan()[i]; p.Capacities != nil {
		return p.Capacities
	}
	return c.Capacities
}

// PhaseCapacity is the fleet's capacity in calls/s during phase i.
func (c Config) PhaseCapacity(i int) float64 {
	return float64(sum(c.PhaseCapacities(i))) / c.Service.Seconds()
}

// PhaseIdeal is the best goodput phase i allows when offered calls/s
// arrive: min(offered, the fleet's capacity in the phase). Dividing by
// the capacity alone would read 90 % for a perfect run at 0.9x.
func (c Config) PhaseIdeal(i int, offered float64) float64 {
	return min(offered, c.PhaseCapacity(i))
}

// phaseAt is the index of the phase second t falls in.
func (c Config) phaseAt(t int) int {
	end := time.Duration(0)
	plan := c.Plan()
	for i, p := range plan {
		end += p.Duration
		if time.Duration(t)*time.Second < end {
			return i
		}
	}
	return len(plan) - 1
}

// phaseStart is the second at which phase i begins.
func (c Config) phaseStart(i int) int {
	start := time.Duration(0)
	for _, p := range c.Plan()[:i] {
		start += p.Duration
	}
	return int(start / time.Second)
}

// length is the run's duration, all phases together.
func (c Config) length() time.Duration {
	d := time.Duration(0)
	for _, p := range c.Plan() {
		d += p.Duration
	}
	return d
}

func (c Config) validate() error {
	if len(c.Capacities) == 0 || c.Service <= 0 || !(c.Load > 0) {
		return errors.New("fleet: Config needs capacities, a positive service time and a positive load")
	}
	if len(c.Phases) == 0 && c.Duration <= 0 {
		return fmt.Errorf("fleet: Config.Duration is %v and there are no Phases: one of them must give the run's length", c.Duration)
	}
	for i, p := range c.Phases {
		if p.Duration < time.Second || p.Duration%time.Second != 0 {
			return fmt.Errorf("fleet: phase %d (%q) lasts %v, must be a whole number of seconds, at least 1s", i, p.Name, p.Duration)
		}
		if p.Capacities != nil && len(p.Capacities) != len(c.Capacities) {
			return fmt.Errorf("fleet: phase %d (%q) has %d capacities for %d servers", i, p.Name, len(p.Capacities), len(c.Capacities))
		}
		for j, w := range p.Capacities {
			if w <= 0 {
				return fmt.Errorf("fleet: phase %d (%q) gives server %d %d workers, must be positive", i, p.Name, j+1, w)
			}
		}
	}
	return nil
}

// Rate is the offered load in calls per second.
func (c Config) Rate() float64 { return c.Load * c.Ideal() }

func (c Config) deadline() time.Duration {
	if c.Deadline > 0 {
		return c.Deadline
	}
	return 10 * c.Service
}

// A Second is what each server got and served during one second of a run,
// by the calls' arrival time.
type Second struct {
	T        int   // seconds since the start
	Sent     []int // calls that reached each server
	Good     []int // calls each server served within their deadline
	Rejected []int // calls each server's limiter turned away
	Reports  []int // calls whose trailer carried an ORCA load report
	// Latencies are those of the good calls, all servers together.
	Latencies []time.Duration
	// Lag is the longest a goroutine waited for a CPU during the second
	// (how late a 10 ms ticker was read): on a machine busy with other
	// work, arrivals leave late and service times stretch, and the
	// second measures the machine more than the fleet.
	Lag time.Duration
}

// clone copies s, so that a Tick reads it while late calls still count.
func (s Second) clone() Second {
	s.Sent, s.Good, s.Rejected, s.Reports = slices.Clone(s.Sent), slices.Clone(s.Good), slices.Clone(s.Rejected), slices.Clone(s.Reports)
	s.Latencies = slices.Clone(s.Latencies)
	return s
}

// Result is the record of one run.
type Result struct {
	Config  Config
	Report  *loadgen.Report
	Seconds []Second
}

// Run starts the servers, runs the load, and stops everything.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	addrs := make([]string, len(cfg.Capacities))
	backends := make([]*backend.FIFO, len(cfg.Capacities))
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, c := range cfg.Capacities {
		be, err := backend.NewFIFO(c, cfg.Service)
		if err != nil {
			return nil, err
		}
		backends[i] = be
		// sluice's server defaults and the one line that turns load
		// reports on.
		lim, err := interceptor.NewServer(append([]interceptor.ServerOption{interceptor.WithLoadReports()}, cfg.Options...)...)
		if err != nil {
			return nil, err
		}
		defer lim.Close()
		gs := grpc.NewServer(lim.ServerOptions()...)
		testpb.RegisterTestServiceServer(gs, overload.Service(be))
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs[i] = lis.Addr().String()
		wg.Go(func() { _ = gs.Serve(lis) })
		defer gs.Stop()
	}

	r := manual.NewBuilderWithScheme("fleet")
	eps := make([]resolver.Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}}
	}
	r.InitialState(resolver.State{Endpoints: eps})
	conn, err := grpc.NewClient("fleet:///servers", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(cfg.ServiceConfig))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := overload.Connect(ctx, conn); err != nil {
		return nil, err
	}
	client := testpb.NewTestServiceClient(conn)

	index := make(map[string]int, len(addrs))
	for i, a := range addrs {
		index[a] = i
	}
	n := len(addrs)
	var (
		mu      sync.Mutex
		seconds []Second
		ticked  int
	)
	start := time.Now()
	lags := overload.StartLagMonitor(start)
	deadline := cfg.deadline()
	length := cfg.length()
	call := func(ctx context.Context) error {
		arrived := time.Since(start)
		var (
			p  peer.Peer
			tr metadata.MD
		)
		_, err := client.Unary(ctx, &testpb.UnaryRequest{}, grpc.Peer(&p), grpc.Trailer(&tr))
		took := time.Since(start) - arrived
		i, ok := -1, false
		if p.Addr != nil {
			i, ok = index[p.Addr.String()]
		}
		if !ok {
			return err // never reached a server
		}
		s := int(arrived / time.Second)
		if arrived >= length {
			return err // the run's last tick; its second is not one
		}
		mu.Lock()
		for len(seconds) <= s {
			seconds = append(seconds, Second{T: len(seconds), Sent: make([]int, n), Good: make([]int, n), Rejected: make([]int, n), Reports: make([]int, n)})
		}
		seconds[s].Sent[i]++
		if len(tr.Get(orcaTrailer)) > 0 {
			seconds[s].Reports[i]++
		}
		switch {
		case err == nil && took <= deadline:
			seconds[s].Good[i]++
			seconds[s].Latencies = append(seconds[s].Latencies, took)
		case overload.Classify(err) == loadgen.Rejected:
			seconds[s].Rejected[i]++
		}
		mu.Unlock()
		return err
	}
	tick := func(w loadgen.Window) {
		if cfg.Tick == nil {
			return
		}
		// Calls arriving in second t end by t+1+deadline; report a second
		// once they all have.
		worst := lags.SoFar()
		mu.Lock()
		var done []Second
		for ; ticked < len(seconds) && time.Duration(ticked+1)*time.Second+deadline < w.End; ticked++ {
			if ticked < len(worst) {
				seconds[ticked].Lag = worst[ticked]
			}
			done = append(done, seconds[ticked].clone())
		}
		mu.Unlock()
		for _, s := range done {
			cfg.Tick(s)
		}
	}
	var phases []loadgen.Phase
	for i, p := range cfg.Plan() {
		caps := cfg.PhaseCapacities(i)
		phases = append(phases, loadgen.Phase{Name: p.Name, Duration: p.Duration, Rate: cfg.Rate(), Start: func() {
			for j, be := range backends {
				_ = be.SetCapacity(caps[j]) // validated: positive
			}
		}})
	}
	rep, err := loadgen.Run(ctx, loadgen.Config{
		Phases:   phases,
		Deadline: deadline,
		Call:     call,
		Classify: overload.Classify,
		Seed:     cfg.Seed,
		Tick:     tick,
	})
	worst := lags.Stop()
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range seconds {
		if i < len(worst) {
			seconds[i].Lag = worst[i]
		}
	}
	if cfg.Tick != nil {
		for ; ticked < len(seconds); ticked++ {
			cfg.Tick(seconds[ticked])
		}
	}
	return &Result{Config: cfg, Report: rep, Seconds: seconds}, nil
}

// A Summary is a run's totals over some of its seconds, by the calls'
// arrival. Calls that never reached a server are not in it.
type Summary struct {
	Offered  float64       // calls per second that reached the fleet
	Goodput  float64       // good calls per second, the whole fleet
	Capacity float64       // the fleet's capacity in calls/s over those seconds
	Ideal    float64       // min(Offered, Capacity)
	Rejected float64       // fraction of the calls that a server's limiter turned away
	P99      time.Duration // of the good calls
	Share    []float64     // each server's fraction of the calls
	Good     []float64     // each server's good calls per second
	Seconds  int           // seconds summarized
	Lagged   int           // seconds left out for their lag
}

// GoodputRatio is Goodput / Ideal, or 0 when nothing was offered.
func (s Summary) GoodputRatio() float64 {
	if s.Ideal <= 0 {
		return 0
	}
	return s.Goodput / s.Ideal
}

// Line is s in one line, beside c's capacity shares, for reports.
func (s Summary) Line(c Config) string {
	return fmt.Sprintf("goodput %.0f/s of %.0f/s ideal (%.1f %%), %.1f %% rejected, p99 %v; traffic shares %s (capacity %s); goodput per server %s /s",
		s.Goodput, s.Ideal, 100*s.GoodputRatio(), 100*s.Rejected, s.P99.Round(time.Millisecond),
		joinFloats(s.Share, "%.1f%%", 100), joinFloats(c.CapacityShares(), "%.1f%%", 100), joinFloats(s.Good, "%.0f", 1))
}

// joinFloats formats each of v, times scale, with format, separated by " / ".
func joinFloats(v []float64, format string, scale float64) string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprintf(format, scale*x)
	}
	return strings.Join(out, " / ")
}

// CapacityShares is each server's fraction of the fleet's capacity.
func (c Config) CapacityShares() []float64 {
	out := make([]float64, len(c.Capacities))
	for i, v := range c.Capacities {
		out[i] = float64(v) / float64(sum(c.Capacities))
	}
	return out
}

// Summarize totals the seconds of r in [from, to), leaving out those
// whose Lag exceeds maxLag unless maxLag is 0. Its capacity is that of
// the phase of from; use Phase for a run of several phases.
func (r *Result) Summarize(from, to int, maxLag time.Duration) Summary {
	return r.summarize(from, to, maxLag, r.Config.PhaseCapacity(r.Config.phaseAt(from)))
}

// Phase totals phase i of r after its first skip seconds, leaving out the
// seconds whose Lag exceeds maxLag unless maxLag is 0.
func (r *Result) Phase(i, skip int, maxLag time.Duration) Summary {
	from := r.Config.phaseStart(i)
	to := from + int(r.Config.Plan()[i].Duration/time.Second)
	return r.summarize(min(from+skip, to), to, maxLag, r.Config.PhaseCapacity(i))
}

func (r *Result) summarize(from, to int, maxLag time.Duration, capacity float64) Summary {
	n := len(r.Config.Capacities)
	s := Summary{Capacity: capacity, Share: make([]float64, n), Good: make([]float64, n)}
	sent := make([]int, n)
	good := make([]int, n)
	var lat []time.Duration
	total, rejected, secs := 0, 0, 0
	for _, sec := range r.Seconds {
		if sec.T < from || sec.T >= to {
			continue
		}
		if maxLag > 0 && sec.Lag > maxLag {
			s.Lagged++
			continue
		}
		secs++
		for i := range n {
			sent[i] += sec.Sent[i]
			good[i] += sec.Good[i]
			total += sec.Sent[i]
			rejected += sec.Rejected[i]
		}
		lat = append(lat, sec.Latencies...)
	}
	s.Seconds = secs
	if secs == 0 {
		return s
	}
	for i := range n {
		if total > 0 {
			s.Share[i] = float64(sent[i]) / float64(total)
		}
		s.Good[i] = float64(good[i]) / float64(secs)
		s.Goodput += s.Good[i]
	}
	s.Offered = float64(total) / float64(secs)
	s.Ideal = min(s.Offered, capacity)
	if total > 0 {
		s.Rejected = float64(rejected) / float64(total)
	}
	s.P99 = loadgen.Percentile(lat, 0.99)
	return s
}

func sum(v []int) int {
	t := 0
	for _, x := range v {
		t += x
	}
	return t
}
