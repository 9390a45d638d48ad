// Command fleet shows sluice's ORCA load reports steering a gRPC client's
// traffic across a fleet of unequal servers.
//
// One process runs three gRPC servers whose handlers call simulated FIFO
// backends (internal/backend) of 16, 8 and 4 workers with the same service
// time S, each with sluice's server defaults and load reports on:
//
//	limits, err := interceptor.NewServer(interceptor.WithLoadReports())
//	srv := grpc.NewServer(limits.ServerOptions()...)
//
// One client sends open-loop Poisson load (internal/loadgen) of twice the
// fleet's capacity, deadline 10·S, twice: first balanced by round_robin,
// which gives each server a third, then by weighted_round_robin, which
// weights each server by the reports its calls bring back. The run prints
// one line per second, then the fleet's goodput against its ideal (sum of
// capacities / S) and each server's share of the traffic against its
// share of the capacity, and writes fleet.md and fleet.png to -out.
//
// At twice the fleet's capacity every server is overloaded under either
// policy (round_robin gives the 4-worker server 4.7× its capacity, the
// 16-worker one 1.2×), so each limiter sheds its excess and goodput depends
// on the limiters more than on the balancer; the policies differ in where
// the calls go. Goodput differs once the fleet as a whole has room: with
// -load 1, round_robin still overloads the small server while the large
// one idles.
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
//	go run ./fleet [-s 20ms] [-load 2] [-duration 30s] [-skip 10s] [-seed 1]
//	               [-initial-limit 0] [-out demo-out] [-quiet]
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
	"strings"
	"time"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/fleet"
	"github.com/sluice-go/sluice/internal/overload"
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
	Duration   time.Duration // of each run
	Skip       time.Duration // warm-up left out of the summary
	Seed       uint64
	Out        string
	Quiet      bool
	Command    string
	// InitialLimit, if set, starts every server's AIMD limiter there
	// instead of at the default 20.
	InitialLimit int
}

func parseFlags(args []string, errOut io.Writer) (options, error) {
	o := options{Capacities: []int{16, 8, 4}, S: 20 * time.Millisecond, Load: 2, Duration: 30 * time.Second,
		Skip: 10 * time.Second, Seed: 1, Out: "demo-out"}
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.DurationVar(&o.S, "s", o.S, "service time of one call on every server; deadlines are 10× this")
	fs.Float64Var(&o.Load, "load", o.Load, "offered load, a multiple of the fleet's capacity")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "length of each of the two runs")
	fs.DurationVar(&o.Skip, "skip", o.Skip, "warm-up left out of the summary (weighted_round_robin's blackout and convergence)")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the arrival times (both runs get the same arrivals)")
	fs.StringVar(&o.Out, "out", o.Out, "directory for fleet.md and fleet.png")
	fs.BoolVar(&o.Quiet, "quiet", o.Quiet, "do not print the per-second lines")
	fs.IntVar(&o.InitialLimit, "initial-limit", o.InitialLimit, "start every server's AIMD limiter at this limit (0: sluice's default, 20)")
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
	case o.Duration < 2*time.Second:
		return o, fmt.Errorf("-duration is %v, must be at least 2s", o.Duration)
	case o.Skip < 0 || o.Skip >= o.Duration:
		return o, fmt.Errorf("-skip is %v, must be in [0, -duration)", o.Skip)
	case o.Out == "":
		return o, fmt.Errorf("-out is empty")
	case o.InitialLimit < 0:
		return o, fmt.Errorf("-initial-limit is %d, must be >= 0 (0: the default)", o.InitialLimit)
	}
	return o, nil
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
	// Summary leaves out the seconds in which the machine, busy with
	// other work, lagged more than S/2; All keeps every second.
	Summary, All fleet.Summary
}

func run(ctx context.Context, o options, out io.Writer) error {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	base := fleet.Config{Capacities: o.Capacities, Service: o.S, Load: o.Load, Duration: o.Duration, Seed: o.Seed}
	if o.InitialLimit > 0 {
		base.Options = []interceptor.Option{interceptor.WithDefault(interceptor.Limit{
			Algorithm: interceptor.AIMD(limiter.AIMDConfig{InitialLimit: o.InitialLimit})})}
	}
	load := [2]string{overload.LoadAverage()}
	fmt.Fprintf(out, "sluice fleet: servers of %v workers, S=%v → ideal %.0f calls/s; offered %.0f calls/s (%gx); deadline %v; %v per balancer\n",
		o.Capacities, o.S, base.Ideal(), base.Rate(), o.Load, 10*o.S, o.Duration)
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
				fmt.Fprintf(out, "%-21s %3ds  share %s  goodput %s  rejected %s /s  lag %v\n",
					b.Name, s.T+1, strings.Join(share, " "), strings.Join(good, " "), strings.Join(rej, " "), s.Lag.Round(time.Millisecond))
			}
		}
		res, err := fleet.Run(ctx, cfg)
		if err != nil {
			return err
		}
		from, to := int(o.Skip/time.Second), int(o.Duration/time.Second)
		passes = append(passes, pass{balancer: b, Result: res,
			Summary: res.Summarize(from, to, o.S/2), All: res.Summarize(from, to, 0)})
	}
	load[1] = overload.LoadAverage()
	rep := report{o: o, passes: passes, date: time.Now(), load: load}
	fmt.Fprintln(out)
	rep.writeSummary(out)
	return overload.WriteOutputs(out, o.Out,
		overload.Output{Name: "fleet.md", Write: rep.writeMarkdown},
		overload.Output{Name: "fleet.png", Write: rep.writeChart})
}
