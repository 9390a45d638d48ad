package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/internal/testbed/overload"
)

// results is everything the demo measured, ready to print.
type results struct {
	o       options
	phases  []phaseSpec
	runs    []*runResult
	rows    [][]phaseRow // [run][phase]
	settles [][]settling // [run][phase]
	date    time.Time
}

// skipNote says what the summary leaves out.
func (r results) skipNote() string {
	return fmt.Sprintf("Each phase's row counts the calls that arrived in that phase, leaving out its first %v (or half the phase if shorter) while the system settles after the step; the settling table covers that part.", r.o.Skip)
}

// cpuNote tells how busy the process was, to show the CPU was not the
// bottleneck.
func (r results) cpuNote() string {
	var parts []string
	for _, run := range r.runs {
		if run.CPU == 0 || run.Wall == 0 {
			return "process CPU: not measured on this system"
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", run.Name, 100*run.CPU.Seconds()/run.Wall.Seconds()))
	}
	return fmt.Sprintf("process CPU during each run, in %% of one core (the machine has %d): %s",
		runtime.NumCPU(), strings.Join(parts, ", "))
}

// writeText prints the summary and settling tables for a terminal.
func (r results) writeText(w io.Writer) {
	fmt.Fprintf(w, "Summary per phase: the calls that arrived in each phase, leaving out its first %v (settling)\n", r.o.Skip)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head1 := "\t\t"
	head2 := "phase\toffered/s\tideal/s"
	for _, run := range r.runs {
		head1 += "\t" + run.Name + "\t\t\t"
		head2 += "\tgoodput/ideal\tp99 (good)\trejected\tdeadline"
	}
	fmt.Fprintln(tw, head1)
	fmt.Fprintln(tw, head2)
	for i, p := range r.phases {
		line := fmt.Sprintf("%s\t%.0f\t%.0f", p.Name, r.rows[0][i].Offered, r.rows[0][i].Ideal)
		for ri := range r.runs {
			row := r.rows[ri][i]
			line += fmt.Sprintf("\t%.1f%%\t%s\t%.1f%%\t%.1f%%", row.GoodPct(), fmtP99(row.P99, r.o.S), row.RejectedPct(), row.DeadlinePct())
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()

	fmt.Fprintf(w, "\nSettling after each step: time until %v of consecutive %v windows (by arrival) each have goodput ≥ %.0f%% of ideal and p99 ≤ %d×S; target ≤ %v\n",
		settleHold, settleWindow, 100*settleGoodput, settleP99, settleTarget)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "phase\tstep"
	for _, run := range r.runs {
		head += "\t" + run.Name
	}
	fmt.Fprintln(tw, head)
	for i, p := range r.phases {
		line := p.Name + "\t" + stepName(r.phases, i)
		for ri := range r.runs {
			line += "\t" + fmtSettle(r.settles[ri][i], p.Duration)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()

	fmt.Fprintln(w, "\nTargets")
	for _, v := range verdicts(r.o, r.phases, r.runs, r.rows) {
		fmt.Fprintln(w, "  "+v)
	}
	if n := r.failed(); n > 0 {
		fmt.Fprintf(w, "  warning: %d calls failed with errors other than RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED\n", n)
	}
	fmt.Fprintln(w, "  "+r.cpuNote())
	for _, n := range r.lagNotes() {
		fmt.Fprintln(w, "  "+n)
	}
}

// lagNotes says, for each run, whether the machine kept up with it.
func (r results) lagNotes() []string {
	var out []string
	limit := r.o.lagLimit()
	for _, run := range r.runs {
		ls := summarizeLag(run.Lags, limit)
		if ls.Over == 0 {
			out = append(out, fmt.Sprintf("%s: the machine kept up (worst timer lag %s, load average %s → %s)",
				run.Name, fmtLag(ls.Max), run.Load[0], run.Load[1]))
			continue
		}
		out = append(out, fmt.Sprintf("WARNING, %s: the process fell behind by more than S/2 = %v in %d second(s), first at %ds, worst %s at %ds (load average %s → %s): the machine was busy with other work, and those seconds measure the machine, not the server",
			run.Name, limit, ls.Over, ls.OverFrom, fmtLag(ls.Max), ls.At, run.Load[0], run.Load[1]))
	}
	return out
}

func fmtLag(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// failed counts calls that ended in an unexpected error, in every run.
func (r results) failed() int {
	n := 0
	for _, run := range r.runs {
		for _, c := range run.Report.Calls {
			if c.Result == loadgen.Failed {
				n++
			}
		}
	}
	return n
}

// writeMarkdown writes report.md.
func (r results) writeMarkdown(w io.Writer) error {
	o := r.o
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	kind := map[string]string{"fifo": "FIFO: C workers behind an unbounded first-in first-out queue", "ps": "processor sharing: every call in progress is served at rate C/n"}[o.Backend]

	p("# sluice demo: no protection vs. sluice's defaults")
	p("")
	p("Generated %s by `%s` (`make demo` runs it).", r.date.Format("2006-01-02 15:04 MST"), o.Command)
	p("")
	p("## Settings")
	p("")
	p("- Backend: %s (%s); C = %d workers, service time S = %v (constant), so capacity C/S = %.0f calls/s.", o.Backend, kind, o.C, o.S, float64(o.C)/o.S.Seconds())
	p("- Every call has a deadline of 10×S = %v.", o.deadline())
	p("- Load: open-loop Poisson arrivals (internal/testbed/loadgen), seed %d; both runs get the same arrival times.", o.Seed)
	opts := "no options"
	if o.MetricsAddr != "" {
		opts = "no options but `WithMeterProvider` (it only routes the metrics to -metrics-addr)"
	}
	p("- Server: one gRPC server on 127.0.0.1 whose handler calls the backend. *unprotected*: no interceptors. *sluice*: `interceptor.NewServer()` with %s, installed with `ServerOptions()`: nothing is tuned to the backend.", opts)
	p("- Client: a plain gRPC client (no client-side sluice), so the table shows the server's protection alone. Each run uses a fresh server, backend and client.")
	p("- Machine: %s.", machine())
	p("- %s.", strings.ToUpper(r.cpuNote()[:1])+r.cpuNote()[1:])
	p("- Whether the machine kept up: a goroutine sleeps %v at a time and records how late it wakes up; more than S/2 late means the numbers of that second are about the machine.", overload.LagProbe)
	for _, n := range r.lagNotes() {
		p("  - %s.", n)
	}
	p("")
	p("| phase | duration | offered load | offered rate | backend capacity |")
	p("|---|---|---|---|---|")
	for _, ph := range r.phases {
		p("| %s | %.1fs | %g× | %.0f/s | %d workers = %.0f/s |", ph.Name, ph.Duration.Seconds(), ph.Load, ph.rate(o), ph.Capacity, ph.capacityRate(o))
	}
	p("")
	p("## Definitions")
	p("")
	p("- **goodput**: successful responses returned within their deadline, per second.")
	p("- **ideal**: min(offered, capacity of the phase / S) per second; goodput/ideal is the share of the possible work done.")
	p("- **p99**: the 99th percentile latency (nearest rank) of the good calls only, also as a multiple of S.")
	p("- **rejected**: calls answered RESOURCE_EXHAUSTED (shed by sluice), in %% of the calls. **deadline**: calls that failed with DEADLINE_EXCEEDED or succeeded after their deadline, in %% of the calls.")
	p("- %s", r.skipNote())
	p("- **settling time**: each phase is cut into %v windows by arrival time; a window is good when its good calls reach %.0f%% of its ideal and their p99 is at most %d×S. The settling time is the start of the first window that begins %v of good windows, measured from the step; the share of the phase's windows from there on that are still good tells whether it stayed settled. The target is %v.",
		settleWindow, 100*settleGoodput, settleP99, settleHold, settleTarget)
	p("")
	p("## Summary")
	p("")
	head := "| phase | offered/s | ideal/s |"
	sep := "|---|---:|---:|"
	for _, run := range r.runs {
		head += fmt.Sprintf(" %[1]s goodput/ideal | %[1]s p99 | %[1]s rejected | %[1]s deadline |", run.Name)
		sep += "---:|---:|---:|---:|"
	}
	p("%s", head)
	p("%s", sep)
	for i, ph := range r.phases {
		line := fmt.Sprintf("| %s | %.0f | %.0f |", ph.Name, r.rows[0][i].Offered, r.rows[0][i].Ideal)
		for ri := range r.runs {
			row := r.rows[ri][i]
			line += fmt.Sprintf(" %.1f%% | %s | %.1f%% | %.1f%% |", row.GoodPct(), fmtP99(row.P99, o.S), row.RejectedPct(), row.DeadlinePct())
		}
		p("%s", line)
	}
	p("")
	p("## Targets")
	p("")
	p("Demo targets for the overload phases: sluice keeps goodput ≥ 90%% of ideal with p99 ≤ 3×S while the unprotected server collapses; the design goal (docs/design.md) is stricter (≥ 98%%, ≤ 2×S).")
	p("")
	for _, v := range verdicts(o, r.phases, r.runs, r.rows) {
		p("- %s", v)
	}
	if n := r.failed(); n > 0 {
		p("- Warning: %d calls failed with errors other than RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED.", n)
	}
	p("")
	p("## Settling after each step")
	p("")
	head = "| phase | step |"
	sep = "|---|---|"
	for _, run := range r.runs {
		head += " " + run.Name + " |"
		sep += "---|"
	}
	p("%s", head)
	p("%s", sep)
	for i, ph := range r.phases {
		line := fmt.Sprintf("| %s | %s |", ph.Name, stepName(r.phases, i))
		for ri := range r.runs {
			line += " " + fmtSettle(r.settles[ri][i], ph.Duration) + " |"
		}
		p("%s", line)
	}
	p("")
	p("## Chart")
	p("")
	p("![goodput, p99 and sluice's limit over time](chart.png)")
	p("")
	p("Top: goodput per second of both runs, and the ideal (dashed). Middle: p99 latency of the good calls per second. Bottom: the sluice run's live limit and calls in flight, sampled every %v, with the backend's capacity (dashed). The per-second series are in seconds.csv.", sampleEvery)
	p("")
	p("The limit sits above the capacity line on purpose. It is a ceiling on the calls in flight, not a count of them: a limit of exactly C loses goodput to bursts of arrivals, so the adaptive limit settles a little above C (a short queue forms in the backend, see docs/design.md), and it comes down only when calls queue too long or fail. The in-flight line is what the backend holds, in its workers and its queue.")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCSV writes the per-second series of every run.
func (r results) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"run", "second", "phase", "offered", "good", "rejected", "deadline", "failed", "p50_ms", "p99_ms", "limit", "inflight", "timer_lag_ms"})
	for _, run := range r.runs {
		for _, s := range run.Report.Seconds() {
			limit, inflight, lag := "", "", ""
			if sec := int(s.Start / time.Second); sec < len(run.Lags) {
				lag = ms(run.Lags[sec])
			}
			if ls, ok := sampleAt(run.Samples, s.End); ok {
				limit, inflight = strconv.Itoa(ls.Limit), strconv.Itoa(ls.Inflight)
			}
			_ = cw.Write([]string{
				run.Name,
				strconv.FormatFloat(s.Start.Seconds(), 'f', 0, 64),
				r.phases[phaseAt(r.phases, s.Start)].Name,
				strconv.Itoa(s.Offered), strconv.Itoa(s.Good), strconv.Itoa(s.Rejected),
				strconv.Itoa(s.Deadline), strconv.Itoa(s.Failed),
				ms(s.P50), ms(s.P99), limit, inflight, lag,
			})
		}
	}
	cw.Flush()
	return cw.Error()
}

// sampleAt returns the last sample taken at or before t.
func sampleAt(samples []limitSample, t time.Duration) (limitSample, bool) {
	var last limitSample
	ok := false
	for _, s := range samples {
		if s.T > t {
			break
		}
		last, ok = s, true
	}
	return last, ok
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}
