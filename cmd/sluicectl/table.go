package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// A row is a limiter as the server last reported it, at.
type row struct {
	*sluicev1.LimiterStatus
	at time.Time
	// countsAt is the time of the last report that showed the counts as
	// they are: a watch stream leaves out the limiters that did not
	// change.
	countsAt time.Time
	// rate is the calls per second since the report before; nil when
	// not known.
	rate *rates
}

// rates are a limiter's calls per second.
type rates struct{ admitted, rejected float64 }

// Table columns: a list shows the counts since the limiter was created, a
// watch the rates.
const (
	totals = false
	perSec = true
)

// writeTable writes rows at now, the limiters under the most pressure
// first: with perSec, the most rejections per second; then the most calls
// queued, then the fullest (in flight / limit), then by name. A queue is
// the first sign of the calls a limiter will reject.
func writeTable(w io.Writer, rows []row, now time.Time, perSec bool) error {
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b row) int {
		byRejections := 0
		if perSec {
			byRejections = cmp.Compare(rejectedRate(b), rejectedRate(a))
		}
		return cmp.Or(
			byRejections,
			cmp.Compare(b.GetQueued(), a.GetQueued()),
			cmp.Compare(fill(b), fill(a)),
			cmp.Compare(a.GetName(), b.GetName()),
		)
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	counts := "ADMITTED\tREJECTED"
	if perSec {
		counts = "ADMITTED/S\tREJECTED/S"
	}
	fmt.Fprintln(tw, "LIMIT\tINFLIGHT\tQUEUED\tRTT\t"+counts+"\tDRY-RUN\tOVERRIDE\t\tLIMITER")
	for _, r := range rows {
		admitted, rejected := total(r.AdmittedTotal), total(r.RejectedTotal)
		if perSec {
			admitted, rejected = "-", "-"
			if r.rate != nil {
				admitted, rejected = perSecond(r.rate.admitted), perSecond(r.rate.rejected)
			}
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\t%s\n",
			r.GetLimit(), r.GetInflight(), r.GetQueued(), rtt(r.GetRtt().AsDuration()), admitted, rejected,
			dash(r.GetDryRun(), "on"), overrideLeft(r, now), r.GetName())
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t\t(no limiters yet: one appears on its method's first call)")
	}
	return tw.Flush()
}

// rejectedRate is what the watch sorts by; an unknown rate counts as 0.
func rejectedRate(r row) float64 {
	if r.rate == nil {
		return 0
	}
	return r.rate.rejected
}

// rateSince is the rate of r's calls since p, an earlier report of the
// same limiter, at r.countsAt. It is nil when the server does not count
// calls or the counts went down: the limiter counts from 0 again (a
// Reload rebuilt it).
func rateSince(p, r row) *rates {
	if p.AdmittedTotal == nil || p.RejectedTotal == nil || r.AdmittedTotal == nil || r.RejectedTotal == nil {
		return nil
	}
	dt := r.countsAt.Sub(p.countsAt).Seconds()
	if dt <= 0 || r.GetAdmittedTotal() < p.GetAdmittedTotal() || r.GetRejectedTotal() < p.GetRejectedTotal() {
		return nil
	}
	return &rates{
		admitted: float64(r.GetAdmittedTotal()-p.GetAdmittedTotal()) / dt,
		rejected: float64(r.GetRejectedTotal()-p.GetRejectedTotal()) / dt,
	}
}

// total is a count, or "-" from a server that does not count.
func total(n *uint64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatUint(*n, 10)
}

// perSecond shows a rate with one decimal below 100/s, whole above.
func perSecond(r float64) string {
	if r < 100 {
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatFloat(r, 'f', 0, 64)
}

// fill is how full a limiter is: in flight per permit of its limit.
func fill(r row) float64 {
	if r.GetLimit() <= 0 {
		return float64(r.GetInflight() + 1) // a limit of 0 is as full as it gets
	}
	return float64(r.GetInflight()) / float64(r.GetLimit())
}

// overrideLeft is how long r's override still holds at now, counted
// down from when the server reported it.
func overrideLeft(r row, now time.Time) string {
	if r.GetOverrideRemaining() == nil {
		return "-"
	}
	return remaining(r.GetOverrideRemaining().AsDuration()-now.Sub(r.at)) + " left"
}

func remaining(d time.Duration) string {
	return max(d, 0).Round(time.Second).String()
}

// rtt rounds d to three or four significant figures.
func rtt(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

func dash(b bool, s string) string {
	if b {
		return s
	}
	return "-"
}
