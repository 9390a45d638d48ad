package main

import (
	"fmt"
	"image/color"
	"io"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/sluice-go/sluice/internal/testbed/loadgen"
)

// serverColours colour the servers, largest first.
var serverColours = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 214, G: 39, B: 40, A: 255},
}

// balancerColours colour round_robin and weighted_round_robin.
var balancerColours = []color.Color{
	color.RGBA{R: 140, G: 140, B: 140, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255},
}

var dashes = []vg.Length{vg.Points(6), vg.Points(4)}

// writeChart draws, in three rows of two: each balancer's traffic share
// per server over the run, with the servers' capacity shares dashed; the
// fleet's goodput per second of both balancers against the ideal, and
// their rejections per second; their p99 per second, and each phase's
// goodput as a share of its ideal, side by side.
func (r report) writeChart(w io.Writer) error {
	cfg := r.config()
	plan := cfg.Plan()
	end := float64(len(r.passes[0].Result.Seconds))
	var bounds []float64 // seconds at which a phase begins, after the first
	var spans []string
	at := time.Duration(0)
	for i, p := range plan {
		if i > 0 {
			bounds = append(bounds, at.Seconds())
		}
		spans = append(spans, fmt.Sprintf("%s %.0f-%.0f", p.Name, at.Seconds(), (at+p.Duration).Seconds()))
		at += p.Duration
	}
	xLabel := "s (phases: " + strings.Join(spans, ", ") + ")"

	// steps draws y(i) of each phase i as a step line over the run.
	steps := func(y func(i int) float64) plotter.XYs {
		var xys plotter.XYs
		at := time.Duration(0)
		for i, p := range plan {
			xys = append(xys, plotter.XY{X: at.Seconds(), Y: y(i)}, plotter.XY{X: (at + p.Duration).Seconds(), Y: y(i)})
			at += p.Duration
		}
		return xys
	}
	addLine := func(p *plot.Plot, xys plotter.XYs, col color.Color, d []vg.Length, name string) error {
		line, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		line.Color, line.Width, line.Dashes = col, vg.Points(1.5), d
		p.Add(line)
		if name != "" {
			p.Legend.Add(name, line)
		}
		return nil
	}

	var shares []*plot.Plot
	for _, p := range r.passes {
		pl := plot.New()
		pl.Title.Text = p.Name + ": traffic share per server"
		pl.Y.Label.Text = "% of calls"
		pl.Y.Max = 100
		for i, c := range cfg.Capacities {
			col := serverColours[i%len(serverColours)]
			var xys plotter.XYs
			for _, s := range p.Result.Seconds {
				xys = append(xys, plotter.XY{X: float64(s.T) + 0.5, Y: 100 * float64(s.Sent[i]) / float64(max(total(s.Sent), 1))})
			}
			if err := addLine(pl, xys, col, nil, fmt.Sprintf("server %d (%d workers)", i+1, c)); err != nil {
				return err
			}
			capShare := steps(func(ph int) float64 {
				caps := cfg.PhaseCapacities(ph)
				return 100 * float64(caps[i]) / float64(total(caps))
			})
			if err := addLine(pl, capShare, col, dashes, ""); err != nil {
				return err
			}
		}
		shares = append(shares, pl)
	}

	good, rej, p99 := plot.New(), plot.New(), plot.New()
	good.Title.Text = fmt.Sprintf("goodput of the fleet (deadline %v); dashed: ideal", 10*r.o.S)
	good.Y.Label.Text = "calls/s"
	rej.Title.Text = "calls rejected by the servers' limiters"
	rej.Y.Label.Text = "calls/s"
	p99.Title.Text = "p99 latency of the good calls"
	p99.Y.Label.Text = "ms"
	if err := addLine(good, steps(func(i int) float64 { return cfg.PhaseIdeal(i, cfg.Rate()) }), color.Black, dashes, ""); err != nil {
		return err
	}
	for j, p := range r.passes {
		col := balancerColours[j%len(balancerColours)]
		var g, x, l plotter.XYs
		for _, s := range p.Result.Seconds {
			t := float64(s.T) + 0.5
			g = append(g, plotter.XY{X: t, Y: float64(total(s.Good))})
			x = append(x, plotter.XY{X: t, Y: float64(total(s.Rejected))})
			l = append(l, plotter.XY{X: t, Y: float64(loadgen.Percentile(append([]time.Duration(nil), s.Latencies...), 0.99).Milliseconds())})
		}
		for _, pl := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{good, g}, {rej, x}, {p99, l}} {
			if err := addLine(pl.p, pl.xys, col, nil, p.Name); err != nil {
				return err
			}
		}
	}
	good.Y.Max = 1.3 * cfg.Rate()
	p99.Y.Max = float64((10 * r.o.S).Milliseconds())

	for _, pl := range append(shares, good, rej, p99) {
		pl.X.Tick.Marker, pl.Y.Tick.Marker = wholeTicks{}, wholeTicks{}
		pl.X.Label.Text = xLabel
		pl.X.Min, pl.X.Max, pl.Y.Min = 0, end, 0
		for _, x := range bounds {
			if err := addLine(pl, plotter.XYs{{X: x, Y: 0}, {X: x, Y: pl.Y.Max}}, color.Gray{Y: 100}, []vg.Length{vg.Points(1), vg.Points(3)}, ""); err != nil {
				return err
			}
		}
	}

	bars := plot.New()
	bars.Title.Text = "goodput per phase, % of ideal (all seconds after the warm-up)"
	bars.Y.Label.Text = "% of ideal"
	width := vg.Points(28)
	var names []string
	for _, p := range plan {
		names = append(names, p.Name)
	}
	bars.NominalX(names...)
	for j, p := range r.passes {
		var v plotter.Values
		for _, s := range p.All {
			v = append(v, 100*s.GoodputRatio())
		}
		bc, err := plotter.NewBarChart(v, width)
		if err != nil {
			return err
		}
		bc.Color = balancerColours[j%len(balancerColours)]
		bc.LineStyle.Width = 0
		bc.Offset = width * vg.Length(2*j-len(r.passes)+1) / 2
		bars.Add(bc)
		bars.Legend.Add(p.Name, bc)
	}
	bars.Y.Min, bars.Y.Max = 0, 130 // room for the legend above the bars
	if err := addLine(bars, plotter.XYs{{X: -0.5, Y: 100 * targetGoodput}, {X: float64(len(plan)) - 0.5, Y: 100 * targetGoodput}}, color.Black, dashes, "target in the first phase"); err != nil {
		return err
	}

	rows := [][]*plot.Plot{shares, {good, rej}, {p99, bars}}
	for _, row := range rows {
		for _, pl := range row {
			pl.Legend.Top = true
			pl.Title.TextStyle.Font.Size = vg.Points(11)
			pl.Add(plotter.NewGrid())
		}
	}
	img := vgimg.NewWith(vgimg.UseWH(14*vg.Inch, 13*vg.Inch), vgimg.UseDPI(100))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: 2, PadTop: vg.Points(6), PadBottom: vg.Points(6),
		PadLeft: vg.Points(6), PadRight: vg.Points(12), PadX: vg.Points(14), PadY: vg.Points(14)}
	cells := plot.Align(rows, tiles, dc)
	for i := range rows {
		for j := range rows[i] {
			rows[i][j].Draw(cells[i][j])
		}
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// wholeTicks are gonum's default ticks labelled without decimals, which
// it adds when a range ends on a fraction.
type wholeTicks struct{}

func (wholeTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}

func total(v []int) int {
	t := 0
	for _, x := range v {
		t += x
	}
	return t
}
