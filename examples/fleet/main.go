// Command fleet shows sluice's ORCA load reports steering a gRPC client's
// traffic across a fleet of unequal servers.
//
// One process runs three gRPC servers whose handlers call simulated FIFO
// backends (internal/testbed/backend) of 16, 8 and 4 workers with the same service
// time S, each with sluice's server defaults and load reports on:
//
//	limits, err := interceptor.NewServer(interceptor.WithLoadReports())
//	srv := grpc.NewServer(limits.ServerOptions()...)
//
// One client sends open-loop Poisson load (internal/testbed/loadgen) of 0.9× the
// fleet's capacity, deadline 10·S, twice: first balanced by round_robin,
// which gives each server a third, then by weighted_round_robin, which
// weights each server by the reports its calls bring back. Each run has
// three phases at the same offered load: the whole fleet (its first
// seconds, weighted_round_robin's blackout and convergence, left out of
// the summaries); one server at half its workers, as a noisy neighbour
// or a failing disk would leave it; and the same server back at full
// strength. The run prints one line per second, then per phase each
// balancer's goodput against the ideal, min(offered, the phase's
// capacity), its rejections and p99, and writes fleet.md and fleet.png to
// -out.
//
// Below the fleet's capacity is where load reports pay: round_robin
// sends a third of the calls to the 4-worker server, about twice what it
// serves, while the 16-worker server idles at half load; the reports move
// that excess to the servers with room. Above it (-load 2) every server
// is overloaded under either policy, each limiter sheds its own excess,
// and goodput hardly depends on the balancer.
//
// The weighted_round_robin settings suit a run of a minute; gRPC's
// defaults suit fleets that live for days:
//
//	blackoutPeriod          1s    (default 10s)  reports a server must have sent for its weight to count
//	weightUpdatePeriod      250ms (default 1s)   how often the picker takes new weights
//	weightExpirationPeriod  10s   (default 3m)   a weight without new reports then falls back to the mean
//	errorUtilizationPenalty 1     (default 1)    weight = qps / (utilization + eps/qps × penalty)
//
// Usage:
//
//	go run ./fleet [-s 20ms] [-load 0.9] [-warmup 10s] [-phase 15s] [-degrade 2]
//	               [-seed 1] [-initial-limit 0] [-out demo-out] [-quiet]
//
// or `make demo-fleet` from the repository root.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/fleet"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/internal/testbed/overload"
	"github.com/sluice-go/sluice/limiter"
)

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return
		}
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		stop()
		os.Exit(1)
	}
}

// options are the example's settings, from its flags.
type options struct {
	Capacities []int
	S          time.Duration
	Load       float64
	Warmup     time.Duration // of the first phase, left out of the summaries
	Phase      time.Duration // each phase's length after the warm-up
	Degrade    int           // the server (from 1) that loses half its workers; 0: none
	Seed       uint64
	Out        string
	Quiet      bool
	Command    string
	// InitialLimit, if set, starts every server's AIMD limiter there
	// instead of admitting every call until the first returns.
	InitialLimit int
}

func parseFlags(args []string, errOut io.Writer) (options, error) {
	o := options{Capacities: []int{16, 8, 4}, S: 20 * time.Millisecond, Load: 0.9, Warmup: 10 * time.Second,
		Phase: 15 * time.Second, Degrade: 2, Seed: 1, Out: "demo-out"}
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.DurationVar(&o.S, "s", o.S, "service time of one call on every server; deadlines are 10× this")
	fs.Float64Var(&o.Load, "load", o.Load, "offered load, a multiple of the whole fleet's capacity")
	fs.DurationVar(&o.Warmup, "warmup", o.Warmup, "start of the first phase left out of the summaries (weighted_round_robin's blackout and convergence), whole seconds")
	fs.DurationVar(&o.Phase, "phase", o.Phase, "length of each phase after the warm-up, whole seconds")
	fs.IntVar(&o.Degrade, "degrade", o.Degrade, "server (1 to 3) that loses half its workers in the second phase and gets them back in the third; 0: one phase only")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the arrival times (both runs get the same arrivals)")
	fs.StringVar(&o.Out, "out", o.Out, "directory for fleet.md and fleet.png")
	fs.BoolVar(&o.Quiet, "quiet", o.Quiet, "do not print the per-second lines")
	fs.IntVar(&o.InitialLimit, "initial-limit", o.InitialLimit, "start every server's AIMD limiter at this limit (0: sluice's default, which admits every call until the first returns)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	o.Command = strings.TrimSpace("go run ./fleet " + strings.Join(args, " "))
	switch {
	case o.S <= 0:
		return o, fmt.Errorf("-s is %v, must be positive", o.S)
	case !(o.Load > 0):
		return o, fmt.Errorf("-load is %v, must be positive", o.Load)
	case o.Warmup < 0 || o.Warmup%time.Second != 0:
		return o, fmt.Errorf("-warmup is %v, must be a whole number of seconds, 0 or more", o.Warmup)
	case o.Phase < time.Second || o.Phase%time.Second != 0:
		return o, fmt.Errorf("-phase is %v, must be a whole number of seconds, at least 1s", o.Phase)
	case o.Degrade < 0 || o.Degrade > len(o.Capacities):
		return o, fmt.Errorf("-degrade is %d, must be a server from 1 to %d, or 0 for none", o.Degrade, len(o.Capacities))
	case o.Degrade > 0 && o.Capacities[o.Degrade-1] < 2:
		return o, fmt.Errorf("-degrade %d: server %d has %d worker, nothing to halve", o.Degrade, o.Degrade, o.Capacities[o.Degrade-1])
	case o.Out == "":
		return o, fmt.Errorf("-out is empty")
	case o.InitialLimit < 0:
		return o, fmt.Errorf("-initial-limit is %d, must be >= 0 (0: the default)", o.InitialLimit)
	}
	return o, nil
}

// phases are the run's phases: the whole fleet, then, with -degrade, one
// server at half its workers and the same server back.
func (o options) phases() []fleet.Phase {
	ps := []fleet.Phase{{Name: fmt.Sprintf("%gx", o.Load), Duration: o.Warmup + o.Phase}}
	if o.Degrade == 0 {
		return ps
	}
	half := slices.Clone(o.Capacities)
	half[o.Degrade-1] /= 2
	return append(ps,
		fleet.Phase{Name: fmt.Sprintf("server %d at half", o.Degrade), Duration: o.Phase, Capacities: half},
		fleet.Phase{Name: fmt.Sprintf("server %d back", o.Degrade), Duration: o.Phase})
}

// skip is how many of phase i's first seconds the summaries leave out.
func (o options) skip(i int) int {
	if i == 0 {
		return int(o.Warmup / time.Second)
	}
	return 0
}

// A balancer is one of the two runs.
type balancer struct {
	Name          string
	ServiceConfig string
}

func balancers() []balancer {
	return []balancer{
		{"round_robin", fleet.RoundRobin},
		{"weighted_round_robin", fleet.DefaultWRR.ServiceConfig()},
	}
}

// A pass is the result of one run and its summary.
type pass struct {
	balancer
	Result *fleet.Result
	// Clean leaves out the seconds in which the machine, busy with other
	// work, lagged more than S/2; All keeps every second. One of each per
	// phase.
	Clean, All []fleet.Summary
}

func run(ctx context.Context, o options, out io.Writer) error {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	base := fleet.Config{Capacities: o.Capacities, Service: o.S, Load: o.Load, Phases: o.phases(), Seed: o.Seed}
	if o.InitialLimit > 0 {
		base.Options = []interceptor.ServerOption{interceptor.WithDefault(interceptor.Limit{
			Algorithm: limiter.AIMDConfig{InitialLimit: o.InitialLimit}})}
	}
	load := [2]string{overload.LoadAverage()}
	var names []string
	total := time.Duration(0)
	for _, p := range base.Phases {
		names = append(names, fmt.Sprintf("%s %v", p.Name, p.Duration))
		total += p.Duration
	}
	fmt.Fprintf(out, "sluice fleet: servers of %v workers, S=%v → capacity %.0f calls/s; offered %.0f calls/s (%gx); deadline %v; phases %s: %v per balancer\n",
		o.Capacities, o.S, base.Ideal(), base.Rate(), o.Load, 10*o.S, strings.Join(names, ", "), total)
	var passes []pass
	for _, b := range balancers() {
		fmt.Fprintf(out, "\n== %s\n", b.Name)
		cfg := base
		cfg.ServiceConfig = b.ServiceConfig
		if !o.Quiet {
			cfg.Tick = func(s fleet.Second) {
				total := 0
				for _, n := range s.Sent {
					total += n
				}
				var share, good, rej []string
				for i := range s.Sent {
					share = append(share, fmt.Sprintf("%3.0f%%", 100*float64(s.Sent[i])/float64(max(total, 1))))
					good = append(good, fmt.Sprintf("%4d", s.Good[i]))
					rej = append(rej, fmt.Sprintf("%4d", s.Rejected[i]))
				}
				fmt.Fprintf(out, "%-21s %3ds  share %s  goodput %s  rejected %s /s  p99 %4dms  lag %v\n",
					b.Name, s.T+1, strings.Join(share, " "), strings.Join(good, " "), strings.Join(rej, " "),
					loadgen.Percentile(s.Latencies, 0.99).Milliseconds(), s.Lag.Round(time.Millisecond))
			}
		}
		res, err := fleet.Run(ctx, cfg)
		if err != nil {
			return err
		}
		p := pass{balancer: b, Result: res}
		for i := range base.Phases {
			p.Clean = append(p.Clean, res.Phase(i, o.skip(i), o.S/2))
			p.All = append(p.All, res.Phase(i, o.skip(i), 0))
		}
		passes = append(passes, p)
	}
	load[1] = overload.LoadAverage()
	rep := report{o: o, passes: passes, date: time.Now(), load: load}
	fmt.Fprintln(out)
	rep.writeSummary(out)
	return overload.WriteOutputs(out, o.Out,
		overload.Output{Name: "fleet.md", Write: rep.writeMarkdown},
		overload.Output{Name: "fleet.png", Write: rep.writeChart})
}
