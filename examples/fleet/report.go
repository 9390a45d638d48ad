package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/sluice-go/sluice/internal/testbed/fleet"
)

// Issue 32's target for weighted_round_robin + load reports in the first
// phase, below the fleet's capacity.
const (
	targetGoodput  = 0.97 // of ideal, at least
	targetRejected = 0.01 // of the calls, at most
)

// report is what the example writes.
type report struct {
	o      options
	passes []pass // round_robin, then weighted_round_robin
	date   time.Time
	load   [2]string // load average before and after
}

// config is the fleet's configuration, the same for every pass.
func (r report) config() fleet.Config { return r.passes[0].Result.Config }

// summaries is each pass's per-phase summaries, of the clean seconds or
// of all of them.
func (p pass) summaries(clean bool) []fleet.Summary {
	if clean {
		return p.Clean
	}
	return p.All
}

// comparison is one sentence: what the load reports bought, phase by
// phase, from the per-phase summaries of round_robin (rr) and
// weighted_round_robin (wrr).
func comparison(phases []fleet.Phase, rr, wrr []fleet.Summary) string {
	var parts []string
	for i, p := range phases {
		a, b := rr[i], wrr[i]
		if a.Seconds == 0 || b.Seconds == 0 {
			parts = append(parts, fmt.Sprintf("no comparison in “%s” (no seconds to compare)", p.Name))
			continue
		}
		parts = append(parts, fmt.Sprintf("%+.0f calls/s of goodput in “%s” (%.1f %% of ideal against %.1f %%, %.1f %% of calls rejected against %.1f %%, p99 %v against %v)",
			b.Goodput-a.Goodput, p.Name, 100*b.GoodputRatio(), 100*a.GoodputRatio(),
			100*b.Rejected, 100*a.Rejected, b.P99.Round(time.Millisecond), a.P99.Round(time.Millisecond)))
	}
	if n := len(parts); n > 1 {
		parts[n-1] = "and " + parts[n-1]
	}
	return "What the load reports bought, weighted_round_robin against round_robin: " + strings.Join(parts, ", ") + "."
}

// verdict checks the target on the first phase's summaries of
// weighted_round_robin (wrr, with its clean seconds wrrClean) and puts
// round_robin's (rr) beside it.
func verdict(name string, rr, wrr, wrrClean fleet.Summary) string {
	met := "**not met**"
	if wrr.Seconds > 0 && wrr.GoodputRatio() >= targetGoodput && wrr.Rejected <= targetRejected {
		met = "**met**"
	}
	clean := "no clean seconds"
	if wrrClean.Seconds > 0 {
		clean = fmt.Sprintf("on its %d clean seconds %.1f %% and %.1f %%", wrrClean.Seconds, 100*wrrClean.GoodputRatio(), 100*wrrClean.Rejected)
	}
	return fmt.Sprintf("Target (issue 32): weighted_round_robin + load reports ≥ %.0f %% of ideal goodput in “%s” with ≤ %.0f %% of calls rejected: %s, "+
		"%.1f %% of ideal and %.1f %% rejected over all %d seconds (%s); round_robin beside it: %.1f %% of ideal, %.1f %% rejected.",
		100*targetGoodput, name, 100*targetRejected, met, 100*wrr.GoodputRatio(), 100*wrr.Rejected, wrr.Seconds, clean,
		100*rr.GoodputRatio(), 100*rr.Rejected)
}

func (r report) writeSummary(w io.Writer) {
	cfg := r.config()
	for i, ph := range cfg.Plan() {
		fmt.Fprintf(w, "%s (capacity %.0f calls/s), every second", ph.Name, cfg.PhaseCapacity(i))
		if s := r.o.skip(i); s > 0 {
			fmt.Fprintf(w, " after the first %d", s)
		}
		fmt.Fprintln(w, ":")
		for _, p := range r.passes {
			fmt.Fprintf(w, "  %-21s %s\n", p.Name, p.All[i].Line(cfg))
		}
		fmt.Fprintf(w, "  the seconds in which the machine lagged at most S/2 = %v:\n", r.o.S/2)
		for _, p := range r.passes {
			fmt.Fprintf(w, "  %-21s %d of %d seconds: %s\n", p.Name, p.Clean[i].Seconds, p.All[i].Seconds, p.Clean[i].Line(cfg))
		}
	}
	rr, wrr := r.passes[0], r.passes[len(r.passes)-1]
	fmt.Fprintln(w, comparison(cfg.Plan(), rr.All, wrr.All))
	fmt.Fprintln(w, strings.ReplaceAll(verdict(cfg.Plan()[0].Name, rr.All[0], wrr.All[0], wrr.Clean[0]), "**", ""))
}

// writeTable writes one markdown table, per phase a row per balancer,
// of the clean seconds or all of them.
func (r report) writeTable(b *strings.Builder, clean bool) {
	cfg := r.config()
	var servers []string
	for i := range cfg.Capacities {
		servers = append(servers, fmt.Sprint(i+1))
	}
	fmt.Fprintf(b, "| phase | capacity/s | balancer | seconds | offered/s | ideal/s | goodput/s | of ideal | rejected | p99 | share of servers %s |\n",
		strings.Join(servers, " / "))
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for i, ph := range cfg.Plan() {
		for j, p := range r.passes {
			s := p.summaries(clean)[i]
			name, capacity := "", ""
			if j == 0 {
				name, capacity = ph.Name, fmt.Sprintf("%.0f (%s workers)", cfg.PhaseCapacity(i), joinInts(cfg.PhaseCapacities(i), "+"))
			}
			secs := fmt.Sprint(s.Seconds)
			if clean {
				secs = fmt.Sprintf("%d of %d", s.Seconds, p.All[i].Seconds)
			}
			var shares []string
			for _, x := range s.Share {
				shares = append(shares, fmt.Sprintf("%.0f %%", 100*x))
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %.0f | %.0f | %.0f | %.1f %% | %.1f %% | %v | %s |\n",
				name, capacity, p.Name, secs, s.Offered, s.Ideal, s.Goodput, 100*s.GoodputRatio(), 100*s.Rejected,
				s.P99.Round(time.Millisecond), strings.Join(shares, " / "))
		}
	}
}

func (r report) writeMarkdown(w io.Writer) error {
	o := r.o
	cfg := r.config()
	plan := cfg.Plan()
	rr, wrr := r.passes[0], r.passes[len(r.passes)-1]
	var b strings.Builder
	fmt.Fprintf(&b, "# sluice fleet: round_robin vs weighted_round_robin with sluice's ORCA reports\n\n")
	fmt.Fprintf(&b, "`%s`, %s, %s/%s, %d CPUs, load average %s before and %s after.\n\n",
		o.Command, r.date.UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), r.load[0], r.load[1])
	var phases []string
	for i, p := range plan {
		phases = append(phases, fmt.Sprintf("“%s” %v (%s workers)", p.Name, p.Duration, joinInts(cfg.PhaseCapacities(i), "+")))
	}
	fmt.Fprintf(&b, "Three gRPC servers on loopback with FIFO backends of %s workers, S = %v each: "+
		"capacity %.0f calls/s. Each server runs `interceptor.NewServer(interceptor.WithLoadReports())`, "+
		"sluice's defaults plus load reports. One client offers %.0f calls/s (%gx the full fleet's capacity, Poisson), deadline %v, "+
		"per balancer in phases %s; the tables leave out the first %v of the first phase "+
		"(weighted_round_robin's blackout and convergence) but not the reaction to the later ones.%s\n\n",
		joinInts(cfg.Capacities, ", "), o.S, cfg.Ideal(), cfg.Rate(), o.Load, 10*o.S, strings.Join(phases, ", "), o.Warmup, limitNote(o))
	fmt.Fprintf(&b, "Goodput is the calls that succeeded within their deadline; ideal is min(offered, the phase's capacity); "+
		"rejected is the share of the calls that a server's limiter turned away; p99 is that of the good calls' latency; "+
		"a server's share is the fraction of the calls that reached it.\n\n")
	fmt.Fprintf(&b, "%s\n\n", comparison(plan, rr.All, wrr.All))
	fmt.Fprintf(&b, "%s\n\n", verdict(plan[0].Name, rr.All[0], wrr.All[0], wrr.Clean[0]))
	r.writeTable(&b, false)
	fmt.Fprintf(&b, "\nSeconds in which a goroutine waited more than S/2 = %v for a CPU measure the machine, busy with other work, more than the fleet. "+
		"The same table without them:\n\n", o.S/2)
	r.writeTable(&b, true)
	w2 := fleet.DefaultWRR
	fmt.Fprintf(&b, "\nweighted_round_robin settings, for a run of a minute (gRPC's defaults in brackets): "+
		"blackoutPeriod %v (10s), weightUpdatePeriod %v (1s), weightExpirationPeriod %v (3m), errorUtilizationPenalty %g (1). "+
		"Each server's weight is qps / (utilization + eps/qps × penalty), from the ORCA report of its calls: "+
		"application_utilization = (in flight + queued) / limit of sluice's limiter, rps_fractional = admitted calls/s, "+
		"eps = calls/s rejected or failed for overload.\n\n",
		w2.BlackoutPeriod, w2.WeightUpdatePeriod, w2.WeightExpirationPeriod, w2.ErrorUtilizationPenalty)
	fmt.Fprintf(&b, "![per balancer and phase: traffic share per server, goodput, rejections and p99 over time](fleet.png)\n")
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
	return fmt.Sprintf(" Every limiter starts at %d (-initial-limit) instead of AIMD's default start, which admits every call until the first returns.", o.InitialLimit)
}
