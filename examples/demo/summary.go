package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluice-go/sluice/internal/testbed/loadgen"
)

// A phaseRow summarizes one run's calls that arrived in one phase, after
// the phase's first skip.
type phaseRow struct {
	Name     string
	Skipped  time.Duration // left out at the start of the phase
	Offered  float64       // arrivals per second
	Ideal    float64       // min(Offered, capacity of the phase), per second
	Goodput  float64       // good calls per second
	P99      time.Duration // of the good calls
	Calls    int
	Good     int
	Rejected int
	Deadline int
	Failed   int
}

// GoodPct is goodput as a percentage of the ideal.
func (r phaseRow) GoodPct() float64 {
	if r.Ideal <= 0 {
		return 100
	}
	return 100 * r.Goodput / r.Ideal
}

// RejectedPct and DeadlinePct are shares of the calls, in percent.
func (r phaseRow) RejectedPct() float64 { return pct(r.Rejected, r.Calls) }

// DeadlinePct is the share of calls that missed their deadline, in percent.
func (r phaseRow) DeadlinePct() float64 { return pct(r.Deadline, r.Calls) }

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

// skipFor is how much of a phase of length d the summary leaves out: the
// requested skip, but never more than half the phase.
func skipFor(skip, d time.Duration) time.Duration { return min(skip, d/2) }

// summarize returns one row per phase of rep.
func summarize(rep *loadgen.Report, o options, phases []phaseSpec) []phaseRow {
	rows := make([]phaseRow, len(phases))
	for i, p := range phases {
		skip := skipFor(o.Skip, p.Duration)
		s := rep.Phase(i, skip)
		rows[i] = phaseRow{
			Name:     p.Name,
			Skipped:  skip,
			Offered:  s.Offered,
			Ideal:    p.idealFor(o, s.Offered),
			Goodput:  s.Goodput,
			P99:      s.P99,
			Calls:    s.Calls,
			Good:     s.Good,
			Rejected: s.Rejected,
			Deadline: s.Deadline,
			Failed:   s.Failed,
		}
	}
	return rows
}

// Settling: after each step, how long until the calls arriving are served
// well again. The phase is cut into windows of settleWindow by arrival
// time; a window is good when its good calls reach settleGoodput of its
// ideal and their p99 is at most settleP99×S. A run has settled at the
// start of the first window that begins settleHold of good windows.
const (
	settleWindow  = 250 * time.Millisecond
	settleHold    = time.Second
	settleGoodput = 0.90
	settleP99     = 3
	settleTarget  = 2 * time.Second
)

// notSettled marks a phase in which the run never settled.
const notSettled time.Duration = -1

// A settling is how a run came through one step.
type settling struct {
	After time.Duration // since the step; notSettled if never
	// Held is the share of the phase's windows from After on that still
	// meet the rule: 1 means it stayed settled to the end of the phase.
	Held float64
}

// windowStats is what the settling rule looks at in one window.
type windowStats struct {
	Arrived int
	Good    int
	P99     time.Duration
}

// settled reports whether w meets the settling rule, given the capacity
// of its phase in calls per second and the window's length.
func (w windowStats) settled(capacityRate float64, length, s time.Duration) bool {
	ideal := min(float64(w.Arrived), capacityRate*length.Seconds())
	if ideal <= 0 {
		return true
	}
	return float64(w.Good) >= settleGoodput*ideal && w.P99 <= time.Duration(settleP99)*s
}

// settleTimes returns, for each phase, how the run settled after its start.
func settleTimes(calls []loadgen.Call, o options, phases []phaseSpec) []settling {
	starts, _ := phaseStarts(phases)
	out := make([]settling, len(phases))
	for i, p := range phases {
		out[i] = settleTime(calls, o, p, starts[i])
	}
	return out
}

// phaseWindows returns the settling windows of phase p, which starts at
// start: consecutive windows of settleWindow (one shorter window if the
// phase is shorter than that).
func phaseWindows(p phaseSpec, start time.Duration) [][2]time.Duration {
	end := start + p.Duration
	var ws [][2]time.Duration
	for t := start; t+settleWindow <= end; t += settleWindow {
		ws = append(ws, [2]time.Duration{t, t + settleWindow})
	}
	if len(ws) == 0 {
		ws = append(ws, [2]time.Duration{start, end})
	}
	return ws
}

func settleTime(calls []loadgen.Call, o options, p phaseSpec, start time.Duration) settling {
	ws := phaseWindows(p, start)
	good := make([]bool, len(ws))
	for k, w := range ws {
		st := windowStats{}
		var lat []time.Duration
		for _, c := range calls {
			if c.Arrival < w[0] || c.Arrival >= w[1] {
				continue
			}
			st.Arrived++
			if c.Good(o.deadline()) {
				st.Good++
				lat = append(lat, c.Latency)
			}
		}
		st.P99 = loadgen.Percentile(lat, 0.99)
		good[k] = st.settled(p.capacityRate(o), w[1]-w[0], o.S)
	}
	hold := min(int((settleHold+settleWindow-1)/settleWindow), len(ws))
	for k := 0; k+hold <= len(ws); k++ {
		ok := true
		for _, g := range good[k : k+hold] {
			ok = ok && g
		}
		if !ok {
			continue
		}
		n := 0
		for _, g := range good[k:] {
			if g {
				n++
			}
		}
		return settling{After: ws[k][0] - start, Held: float64(n) / float64(len(ws)-k)}
	}
	return settling{After: notSettled}
}

// stepName says what changed at the start of phase i.
func stepName(phases []phaseSpec, i int) string {
	p := phases[i]
	if i == 0 {
		return fmt.Sprintf("start at %gx load", p.Load)
	}
	q := phases[i-1]
	switch {
	case p.Capacity != q.Capacity && p.Load != q.Load:
		return fmt.Sprintf("load %gx→%gx, capacity %d→%d", q.Load, p.Load, q.Capacity, p.Capacity)
	case p.Capacity != q.Capacity:
		return fmt.Sprintf("capacity %d→%d", q.Capacity, p.Capacity)
	}
	return fmt.Sprintf("load %gx→%gx", q.Load, p.Load)
}

// fmtSettle formats how a run settled in a phase of length d.
func fmtSettle(st settling, d time.Duration) string {
	if st.After == notSettled {
		return fmt.Sprintf("not settled in %.1fs", d.Seconds())
	}
	mark := "ok"
	if st.After > settleTarget {
		mark = "over 2s"
	}
	return fmt.Sprintf("%.2fs (%s), then %.0f%% of windows good", st.After.Seconds(), mark, 100*st.Held)
}

// fmtP99 formats a latency in milliseconds and in multiples of s.
func fmtP99(d, s time.Duration) string {
	if d == 0 {
		return "- (no good call)"
	}
	return fmt.Sprintf("%.0fms (%.1f×S)", float64(d)/float64(time.Millisecond), float64(d)/float64(s))
}

// verdicts compares the sluice run's overload phases with the demo's
// targets and with the stricter design goal of docs/design.md, and the unprotected run's
// with a collapse, in one line each.
func verdicts(o options, phases []phaseSpec, runs []*runResult, rows [][]phaseRow) []string {
	var out []string
	for ri, r := range runs {
		for i, p := range phases {
			row := rows[ri][i]
			if p.Load <= 1 {
				if r.Sluice {
					out = append(out, fmt.Sprintf("%s, %s (no overload): goodput %.1f%% of ideal, p99 %s, %.1f%% of calls rejected (the unprotected run: goodput %.1f%% of ideal, p99 %s)",
						r.Name, p.Name, row.GoodPct(), fmtP99(row.P99, o.S), row.RejectedPct(), rows[0][i].GoodPct(), fmtP99(rows[0][i].P99, o.S)))
				}
				continue
			}
			if !r.Sluice {
				out = append(out, fmt.Sprintf("%s, %s: goodput %.1f%% of ideal, %.1f%% of calls missed their deadline",
					r.Name, p.Name, row.GoodPct(), row.DeadlinePct()))
				continue
			}
			out = append(out, fmt.Sprintf("%s, %s: goodput %.1f%% of ideal, p99 %s: demo target %s; design goal %s",
				r.Name, p.Name, row.GoodPct(), fmtP99(row.P99, o.S),
				judge(row, o.S, 90, 3), judge(row, o.S, 98, 2)))
		}
	}
	return out
}

// judge says whether row reaches goodput ≥ minPct of ideal with p99 ≤
// maxS×s, and by how much it misses.
func judge(row phaseRow, s time.Duration, minPct, maxS float64) string {
	bar := fmt.Sprintf("(≥ %.0f%%, ≤ %.0f×S)", minPct, maxS)
	if row.Good == 0 {
		return bar + " missed: no good call"
	}
	var miss []string
	if g := row.GoodPct(); g < minPct {
		miss = append(miss, fmt.Sprintf("goodput %.2f points short", minPct-g))
	}
	if p := float64(row.P99) / float64(s); p > maxS {
		miss = append(miss, fmt.Sprintf("p99 %.2f×S > %.0f×S", p, maxS))
	}
	if len(miss) == 0 {
		return bar + " met"
	}
	return bar + " missed: " + strings.Join(miss, ", ")
}
