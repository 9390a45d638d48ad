package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-go/sluice/internal/testbed/overload"
)

// run runs both passes of the demo and writes its files to o.Out.
func run(ctx context.Context, o options, out io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	phases := profile(o)
	_, total := phaseStarts(phases)
	fmt.Fprintf(out, "sluice demo: %s backend, C=%d workers, S=%v → capacity %.0f calls/s; deadline %v; %d phases, %.0fs per run\n",
		o.Backend, o.C, o.S, float64(o.C)/o.S.Seconds(), o.deadline(), len(phases), total.Seconds())

	var mp metric.MeterProvider
	if o.MetricsAddr != "" {
		ms, err := startMetrics(o.MetricsAddr)
		if err != nil {
			return fmt.Errorf("-metrics-addr: %w", err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = ms.Close(sctx)
		}()
		mp = ms.Provider()
		fmt.Fprintf(out, "metrics of the sluice run: http://%s/metrics (sluice_limit, sluice_inflight, ...)\n", ms.Addr())
	}

	date := time.Now()
	var runs []*runResult
	for _, pass := range []struct {
		name      string
		protected bool
	}{{"unprotected", false}, {"sluice", true}} {
		fmt.Fprintf(out, "\n== %s run\n", pass.name)
		r, err := runProfile(ctx, pass.name, pass.protected, o, phases, mp, out)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}

	rows := make([][]phaseRow, len(runs))
	settles := make([][]settling, len(runs))
	for i, r := range runs {
		rows[i] = summarize(r.Report, o, phases)
		settles[i] = settleTimes(r.Report.Calls, o, phases)
	}
	res := results{o: o, phases: phases, runs: runs, rows: rows, settles: settles, date: date}

	fmt.Fprintln(out)
	res.writeText(out)

	fmt.Fprintln(out)
	return overload.WriteOutputs(out, o.Out,
		overload.Output{Name: "report.md", Write: res.writeMarkdown},
		overload.Output{Name: "seconds.csv", Write: res.writeCSV},
		overload.Output{Name: "chart.png", Write: res.writeChart})
}
