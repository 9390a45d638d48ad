package main

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// serverColours colour the servers, largest first.
var serverColours = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 214, G: 39, B: 40, A: 255},
}

// writeChart draws, for each balancer (columns), each server's share of
// the traffic and its goodput per second over the run (rows), with the
// server's capacity share and capacity dashed.
func (r report) writeChart(w io.Writer) error {
	rows := [][]*plot.Plot{{}, {}}
	dashes := []vg.Length{vg.Points(6), vg.Points(4)}
	for _, p := range r.passes {
		cfg := p.Result.Config
		share, good := plot.New(), plot.New()
		share.Title.Text = p.Name + ": traffic share per server"
		share.Y.Label.Text = "% of calls"
		good.Title.Text = p.Name + fmt.Sprintf(": goodput per server (deadline %v)", 10*r.o.S)
		good.Y.Label.Text = "calls/s"
		end := float64(len(p.Result.Seconds))
		for i, c := range cfg.Capacities {
			col := serverColours[i%len(serverColours)]
			var sxy, gxy plotter.XYs
			for _, s := range p.Result.Seconds {
				total := 0
				for _, n := range s.Sent {
					total += n
				}
				x := float64(s.T) + 0.5
				sxy = append(sxy, plotter.XY{X: x, Y: 100 * float64(s.Sent[i]) / float64(max(total, 1))})
				gxy = append(gxy, plotter.XY{X: x, Y: float64(s.Good[i])})
			}
			name := fmt.Sprintf("server %d (%d workers)", i+1, c)
			capShare := 100 * cfg.CapacityShares()[i]
			capRate := float64(c) / cfg.Service.Seconds()
			for _, l := range []struct {
				p      *plot.Plot
				xys    plotter.XYs
				name   string
				dashes []vg.Length
			}{
				{share, sxy, name, nil},
				{share, plotter.XYs{{X: 0, Y: capShare}, {X: end, Y: capShare}}, "", dashes},
				{good, gxy, name, nil},
				{good, plotter.XYs{{X: 0, Y: capRate}, {X: end, Y: capRate}}, "", dashes},
			} {
				line, err := plotter.NewLine(l.xys)
				if err != nil {
					return err
				}
				line.Color, line.Width, line.Dashes = col, vg.Points(1.5), l.dashes
				l.p.Add(line)
				if l.name != "" {
					l.p.Legend.Add(l.name, line)
				}
			}
		}
		for _, pl := range []*plot.Plot{share, good} {
			pl.X.Label.Text = "s (dashed: the server's capacity)"
			pl.X.Min, pl.Y.Min = 0, 0
			pl.Legend.Top = true
			pl.Title.TextStyle.Font.Size = vg.Points(11)
			pl.Add(plotter.NewGrid())
		}
		share.Y.Max = 100
		good.Y.Max = 1.3 * float64(maxInt(cfg.Capacities)) / cfg.Service.Seconds()
		rows[0] = append(rows[0], share)
		rows[1] = append(rows[1], good)
	}
	img := vgimg.NewWith(vgimg.UseWH(14*vg.Inch, 9*vg.Inch), vgimg.UseDPI(100))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: len(r.passes), PadTop: vg.Points(6), PadBottom: vg.Points(6),
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

func maxInt(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
