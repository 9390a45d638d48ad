// Command demo shows what sluice's server interceptors do for a gRPC
// service whose backend is overloaded.
//
// One process runs a gRPC server whose handler calls a simulated backend
// of C workers and service time S (internal/testbed/backend), and an open-loop
// load generator (internal/testbed/loadgen) calling it through a plain gRPC client
// with a deadline of 10·S per call. The same load profile runs twice, each
// time against a fresh server and backend: first "unprotected", with no
// interceptors, then "sluice", with interceptor.NewServer() and no limiter
// options at all. The profile is 0.5×, 2× and 5× the backend's capacity
// C/S, then 5× while the capacity is halved, then 1× with the capacity
// restored.
//
// While it runs, the demo prints one line per second per run; at the end,
// a per-phase summary of both runs and how long each took to settle after
// each step. It writes report.md (settings, definitions, tables),
// chart.png (goodput, p99 latency and sluice's live limit over time) and
// seconds.csv (the per-second series) to -out.
//
// Usage:
//
//	go run ./demo [-c 16] [-s 40ms] [-backend fifo|ps] [-phase-scale 1] [-skip 1s]
//	              [-seed 1] [-out demo-out] [-metrics-addr 127.0.0.1:9464] [-quiet]
//
// or `make demo` from the repository root.
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
)

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return
		}
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		stop()
		os.Exit(1)
	}
}

// options are the demo's settings, from its flags.
type options struct {
	C           int           // backend workers
	S           time.Duration // service time of one call
	Backend     string        // "fifo" or "ps"
	Scale       float64       // multiplies every phase's duration
	Skip        time.Duration // start of each phase left out of the summary
	Seed        uint64
	Out         string // directory of the report, chart and CSV
	MetricsAddr string // serve the sluice run's metrics here, if set
	Command     string // how the demo was started, for the report
	Quiet       bool   // no per-second lines
}

func defaultOptions() options {
	return options{
		C:       16,
		S:       40 * time.Millisecond,
		Backend: "fifo",
		Scale:   1,
		Skip:    time.Second,
		Seed:    1,
		Out:     "demo-out",
	}
}

func parseFlags(args []string, errOut io.Writer) (options, error) {
	o := defaultOptions()
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.IntVar(&o.C, "c", o.C, "backend capacity: number of workers")
	fs.DurationVar(&o.S, "s", o.S, "backend service time of one call (constant); deadlines are 10× this")
	fs.StringVar(&o.Backend, "backend", o.Backend, `backend discipline: "fifo" (C workers, FIFO queue) or "ps" (processor sharing)`)
	fs.Float64Var(&o.Scale, "phase-scale", o.Scale, "multiply every phase's duration by this (default phases: 5s, 6s, 8s, 6s, 5s)")
	fs.DurationVar(&o.Skip, "skip", o.Skip, "leave the first part of each phase out of the summary (at most half the phase)")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the arrival times (both runs get the same arrivals)")
	fs.StringVar(&o.Out, "out", o.Out, "directory for report.md, chart.png and seconds.csv")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr, "if set (e.g. 127.0.0.1:9464), serve the sluice run's OpenTelemetry metrics on http://ADDR/metrics")
	fs.BoolVar(&o.Quiet, "quiet", o.Quiet, "do not print the per-second lines")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	o.Command = strings.TrimSpace("go run ./demo " + strings.Join(args, " "))
	return o, o.validate()
}

func (o options) validate() error {
	switch {
	case o.C < 2:
		return fmt.Errorf("-c is %d, must be at least 2 (the capacity is halved mid-run)", o.C)
	case o.S <= 0:
		return fmt.Errorf("-s is %v, must be positive", o.S)
	case o.Backend != "fifo" && o.Backend != "ps":
		return fmt.Errorf(`-backend is %q, must be "fifo" or "ps"`, o.Backend)
	case !(o.Scale > 0):
		return fmt.Errorf("-phase-scale is %v, must be positive", o.Scale)
	case o.Skip < 0:
		return fmt.Errorf("-skip is %v, must be >= 0", o.Skip)
	case o.Out == "":
		return fmt.Errorf("-out is empty")
	}
	return nil
}

// deadline is every call's deadline.
func (o options) deadline() time.Duration { return 10 * o.S }
