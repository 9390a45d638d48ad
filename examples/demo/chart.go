package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/sluice-go/sluice/internal/testbed/loadgen"
)

// Colours of the chart's series.
var (
	colUnprotected = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	colSluice      = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	colIdeal       = color.RGBA{A: 255}
	colInflight    = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	colBoundary    = color.RGBA{R: 150, G: 150, B: 150, A: 255}
)

// runColour is the colour of a run's series.
func runColour(r *runResult) color.Color {
	if r.Sluice {
		return colSluice
	}
	return colUnprotected
}

// writeChart draws three stacked panels over the time of a run: goodput
// per second of each run with the ideal, p99 of the good calls, and the
// sluice run's limit and calls in flight.
func (r results) writeChart(w io.Writer) error {
	o := r.o
	starts, end := phaseStarts(r.phases)
	xmax := end.Seconds()

	// Panel 1: goodput.
	good := plot.New()
	good.Title.Text = fmt.Sprintf("Goodput: successes within the %v deadline, per second (%s backend, C=%d, S=%v)", o.deadline(), o.Backend, o.C, o.S)
	good.Y.Label.Text = "calls/s"
	var ideal plotter.XYs
	for i, p := range r.phases {
		v := p.idealFor(o, p.rate(o))
		ideal = append(ideal, plotter.XY{X: starts[i].Seconds(), Y: v}, plotter.XY{X: (starts[i] + p.Duration).Seconds(), Y: v})
	}
	goodMax := 0.0
	for _, xy := range ideal {
		goodMax = max(goodMax, xy.Y)
	}
	for _, run := range r.runs {
		var xys plotter.XYs
		for _, s := range seconds(run.Report, end) {
			v := float64(s.Good) / s.Seconds()
			xys = append(xys, plotter.XY{X: mid(s), Y: v})
			goodMax = max(goodMax, v)
		}
		if err := addLine(good, run.Name, xys, runColour(run), 2, nil); err != nil {
			return err
		}
	}
	if err := addLine(good, "ideal = min(offered, capacity)", ideal, colIdeal, 1.5, []vg.Length{vg.Points(6), vg.Points(4)}); err != nil {
		return err
	}
	top := goodMax * 1.45
	good.X.Tick.Marker = phaseTicks{phases: r.phases, starts: starts}
	good.X.Label.Text = "phase"
	if err := markPhases(good, starts, top); err != nil {
		return err
	}
	setRange(good, xmax, top)

	// Panel 2: p99 of the good calls, in milliseconds.
	lat := plot.New()
	lat.Title.Text = "p99 latency of the good calls, per second"
	lat.Y.Label.Text = "ms"
	latMax := float64(o.deadline()) / float64(time.Millisecond)
	for _, run := range r.runs {
		var segs []plotter.XYs
		var cur plotter.XYs
		for _, s := range seconds(run.Report, end) {
			if s.Good == 0 { // no good call: leave a gap
				if len(cur) > 0 {
					segs, cur = append(segs, cur), nil
				}
				continue
			}
			cur = append(cur, plotter.XY{X: mid(s), Y: float64(s.P99) / float64(time.Millisecond)})
		}
		if len(cur) > 0 {
			segs = append(segs, cur)
		}
		for k, seg := range segs {
			name := run.Name
			if k > 0 {
				name = ""
			}
			if err := addLine(lat, name, seg, runColour(run), 2, nil); err != nil {
				return err
			}
		}
	}
	sMs := float64(o.S) / float64(time.Millisecond)
	for _, ref := range []struct {
		name string
		y    float64
		dash []vg.Length
	}{
		{"3×S", 3 * sMs, []vg.Length{vg.Points(6), vg.Points(4)}},
		{fmt.Sprintf("deadline 10×S = %v", o.deadline()), 10 * sMs, []vg.Length{vg.Points(2), vg.Points(3)}},
	} {
		if err := addLine(lat, ref.name, plotter.XYs{{X: 0, Y: ref.y}, {X: xmax, Y: ref.y}}, colIdeal, 1, ref.dash); err != nil {
			return err
		}
	}
	top = latMax * 1.5
	if err := markPhases(lat, starts, top); err != nil {
		return err
	}
	setRange(lat, xmax, top)

	// Panel 3: the sluice run's limiter.
	lim := plot.New()
	lim.Title.Text = "sluice run: live concurrency limit (defaults) and calls in flight"
	lim.Y.Label.Text = "calls"
	lim.X.Label.Text = "seconds since the run started"
	var capacity plotter.XYs
	limMax := 0.0
	for i, p := range r.phases {
		c := float64(p.Capacity)
		capacity = append(capacity, plotter.XY{X: starts[i].Seconds(), Y: c}, plotter.XY{X: (starts[i] + p.Duration).Seconds(), Y: c})
		limMax = max(limMax, c)
	}
	for _, run := range r.runs {
		if !run.Sluice {
			continue
		}
		var limit, inflight plotter.XYs
		for _, s := range run.Samples {
			limit = append(limit, plotter.XY{X: s.T.Seconds(), Y: float64(s.Limit)})
			inflight = append(inflight, plotter.XY{X: s.T.Seconds(), Y: float64(s.Inflight)})
			limMax = max(limMax, float64(s.Limit), float64(s.Inflight))
		}
		if len(limit) > 0 {
			// A limit is a ceiling, not a count: without a word, a limit
			// above the capacity line reads as a fault.
			if err := addLine(lim, "limit (a ceiling: a little above C on purpose)", limit, colSluice, 2, nil); err != nil {
				return err
			}
			if err := addLine(lim, "in flight", inflight, colInflight, 1, nil); err != nil {
				return err
			}
		}
	}
	if err := addLine(lim, "backend capacity C", capacity, colIdeal, 1.5, []vg.Length{vg.Points(6), vg.Points(4)}); err != nil {
		return err
	}
	top = limMax * 1.45
	if err := markPhases(lim, starts, top); err != nil {
		return err
	}
	setRange(lim, xmax, top)

	lat.X.Tick.Marker = secondTicks{}
	lim.X.Tick.Marker = secondTicks{}
	for _, p := range []*plot.Plot{good, lat, lim} {
		p.Y.Tick.Marker = plainTicks{}
		p.Legend.Top = true
		p.Legend.Left = false
		p.Legend.TextStyle.Font.Size = vg.Points(10)
		p.Title.TextStyle.Font.Size = vg.Points(12)
		grid := plotter.NewGrid()
		if p == good { // its x ticks are phase names, not seconds
			grid.Vertical.Color = nil
		}
		p.Add(grid)
	}

	img := vgimg.NewWith(vgimg.UseWH(12*vg.Inch, 12*vg.Inch), vgimg.UseDPI(100))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 3, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(14)}
	cells := plot.Align([][]*plot.Plot{{good}, {lat}, {lim}}, tiles, dc)
	good.Draw(cells[0][0])
	lat.Draw(cells[1][0])
	lim.Draw(cells[2][0])
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// seconds returns rep's one-second windows up to the end of the load,
// leaving out the drain after it.
func seconds(rep *loadgen.Report, end time.Duration) []loadgen.Window {
	var out []loadgen.Window
	for _, s := range rep.Seconds() {
		if s.Start < end {
			out = append(out, s)
		}
	}
	return out
}

// mid is the middle of w, in seconds.
func mid(w loadgen.Window) float64 { return (w.Start + w.End).Seconds() / 2 }

// addLine adds a line to p, with a legend entry unless name is empty.
func addLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color, width float64, dashes []vg.Length) error {
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(width)
	l.Dashes = dashes
	p.Add(l)
	if name != "" {
		p.Legend.Add(name, l)
	}
	return nil
}

// markPhases draws a dotted line at each phase boundary.
func markPhases(p *plot.Plot, starts []time.Duration, top float64) error {
	for _, s := range starts[1:] {
		x := s.Seconds()
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: top}})
		if err != nil {
			return err
		}
		l.Color = colBoundary
		l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(l)
	}
	return nil
}

// phaseTicks labels an axis of seconds with the phases' names, in the
// middle of each phase, and marks the boundaries.
type phaseTicks struct {
	phases []phaseSpec
	starts []time.Duration
}

// Ticks implements plot.Ticker.
func (t phaseTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for i, p := range t.phases {
		s := t.starts[i].Seconds()
		ts = append(ts,
			plot.Tick{Value: s},
			plot.Tick{Value: s + p.Duration.Seconds()/2, Label: p.Name})
	}
	return ts
}

// secondTicks labels an axis of seconds every 1, 2 or 5 seconds, with a
// minor tick every second.
type secondTicks struct{}

// Ticks implements plot.Ticker.
func (secondTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 5
	switch span := hi - lo; {
	case span <= 4:
		return plainTicks{}.Ticks(lo, hi)
	case span <= 12:
		step = 1
	case span <= 40:
		step = 2
	}
	var ts []plot.Tick
	for s := int(math.Ceil(lo)); float64(s) <= hi; s++ {
		t := plot.Tick{Value: float64(s)}
		if s%step == 0 {
			t.Label = strconv.Itoa(s)
		}
		ts = append(ts, t)
	}
	return ts
}

// plainTicks are gonum's default ticks with labels such as "500" rather
// than "500.00".
type plainTicks struct{}

// Ticks implements plot.Ticker.
func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'g', 6, 64)
		}
	}
	return ts
}

// setRange fixes the axes: x over the whole run, y from 0 to top.
func setRange(p *plot.Plot, xmax, top float64) {
	p.X.Min, p.X.Max = 0, xmax
	p.Y.Min, p.Y.Max = 0, max(top, 1)
}
