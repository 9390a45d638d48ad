package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// A row is a limiter as the server last reported it, at.
type row struct {
	*sluicev1.LimiterStatus
	at time.Time
}

// writeTable writes rows at now, the limiters under the most pressure
// first: the most calls queued, then the fullest (in flight / limit), then
// by name. (The admin service reports no admission or rejection counts;
// a queue is the first sign of the calls a limiter will reject.)
func writeTable(w io.Writer, rows []row, now time.Time) error {
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(
			cmp.Compare(b.GetQueued(), a.GetQueued()),
			cmp.Compare(fill(b), fill(a)),
			cmp.Compare(a.GetName(), b.GetName()),
		)
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "LIMIT\tINFLIGHT\tQUEUED\tRTT\tDRY-RUN\tOVERRIDE\t\tLIMITER")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t\t%s\n",
			r.GetLimit(), r.GetInflight(), r.GetQueued(), rtt(r.GetRtt().AsDuration()),
			dash(r.GetDryRun(), "on"), overrideLeft(r, now), r.GetName())
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, "\t\t\t\t\t\t\t(no limiters yet: one appears on its method's first call)")
	}
	return tw.Flush()
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
