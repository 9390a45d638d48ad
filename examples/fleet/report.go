package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/sluice-go/sluice/internal/fleet"
)

// report is what the example writes.
type report struct {
	o      options
	passes []pass
	date   time.Time
	load   [2]string // load average before and after
}

// line is a balancer's summary s in one line.
func line(p pass, s fleet.Summary) string { return s.Line(p.Result.Config) }

func (r report) writeSummary(w io.Writer) {
	fmt.Fprintf(w, "after the first %v of each run, every second:\n", r.o.Skip)
	for _, p := range r.passes {
		fmt.Fprintf(w, "  %-21s %s\n", p.Name, line(p, p.All))
	}
	fmt.Fprintf(w, "the seconds in which the machine lagged at most S/2 = %v:\n", r.o.S/2)
	for _, p := range r.passes {
		fmt.Fprintf(w, "  %-21s %d of %d seconds: %s\n", p.Name, p.Summary.Seconds, p.All.Seconds, line(p, p.Summary))
	}
}

func (r report) writeMarkdown(w io.Writer) error {
	o := r.o
	base := r.passes[0].Result.Config
	var b strings.Builder
	fmt.Fprintf(&b, "# sluice fleet: round_robin vs weighted_round_robin with sluice's ORCA reports\n\n")
	fmt.Fprintf(&b, "`%s`, %s, %s/%s, %d CPUs, load average %s before and %s after.\n\n",
		o.Command, r.date.UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), r.load[0], r.load[1])
	fmt.Fprintf(&b, "Three gRPC servers on loopback with FIFO backends of %s workers, S = %v each: "+
		"ideal goodput %.0f calls/s. Each server runs `interceptor.NewServer(interceptor.WithLoadReports())`, "+
		"sluice's defaults plus load reports. One client offers %.0f calls/s (%gx, Poisson), deadline %v, "+
		"for %v per balancer; the tables leave out the first %v (weighted_round_robin's blackout and convergence).%s\n\n",
		joinInts(base.Capacities, ", "), o.S, base.Ideal(), base.Rate(), o.Load, 10*o.S, o.Duration, o.Skip, limitNote(o))
	fmt.Fprintf(&b, "Goodput is the calls that succeeded within their deadline; a server's share is the fraction of the calls that reached it.\n\n")
	fmt.Fprintf(&b, "Seconds in which a goroutine waited more than S/2 = %v for a CPU measure the machine, busy with other work, more than the fleet; "+
		"\"clean\" rows leave them out, \"all\" rows keep them.\n\n", o.S/2)
	fmt.Fprintf(&b, "| balancer | seconds | goodput/s | of ideal |")
	for i, c := range base.Capacities {
		fmt.Fprintf(&b, " server %d (%d workers): share | goodput/s |", i+1, c)
	}
	fmt.Fprintf(&b, "\n|---|---|---:|---:|%s\n", strings.Repeat("---:|---:|", len(base.Capacities)))
	fmt.Fprintf(&b, "| capacity | | %.0f | 100 %% |", base.Ideal())
	for i, s := range base.CapacityShares() {
		fmt.Fprintf(&b, " %.1f %% | %.0f |", 100*s, float64(base.Capacities[i])/o.S.Seconds())
	}
	b.WriteString("\n")
	for _, p := range r.passes {
		for _, row := range []struct {
			what string
			s    fleet.Summary
		}{{fmt.Sprintf("clean: %d of %d", p.Summary.Seconds, p.All.Seconds), p.Summary}, {"all", p.All}} {
			s := row.s
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f %% |", p.Name, row.what, s.Goodput, 100*s.GoodputRatio())
			for i := range s.Share {
				fmt.Fprintf(&b, " %.1f %% | %.0f |", 100*s.Share[i], s.Good[i])
			}
			b.WriteString("\n")
		}
	}
	w2 := fleet.DefaultWRR
	fmt.Fprintf(&b, "\nweighted_round_robin settings, for a run of a minute (gRPC's defaults in brackets): "+
		"blackoutPeriod %v (10s), weightUpdatePeriod %v (1s), weightExpirationPeriod %v (3m), errorUtilizationPenalty %g (1). "+
		"Each server's weight is qps / (utilization + eps/qps × penalty), from the ORCA report of its calls: "+
		"application_utilization = (in flight + queued) / limit of sluice's limiter, rps_fractional = admitted calls/s, "+
		"eps = calls/s rejected or failed for overload.\n\n",
		w2.BlackoutPeriod, w2.WeightUpdatePeriod, w2.WeightExpirationPeriod, w2.ErrorUtilizationPenalty)
	fmt.Fprintf(&b, "![traffic share and goodput per server over time](fleet.png)\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, sep)
}

func limitNote(o options) string {
	if o.InitialLimit == 0 {
		return ""
	}
	return fmt.Sprintf(" Every limiter starts at %d (-initial-limit) instead of AIMD's default 20.", o.InitialLimit)
}
