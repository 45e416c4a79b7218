// Package charts draws a sweeps record (compare.SweepReport, the JSON that
// `go run ./cmd/compare -sweeps` writes) as SVG line charts with
// gonum.org/v1/plot: one chart per curve of every sweep that has more than
// one point, one series per system, and an index page (WriteIndex) that
// shows every chart under its sweep, each sweep of a single point as a
// table and every point not measured with its reason, so that the curves
// in docs/perf are generated from a recorded run, never drawn by hand,
// and none is left unlinked.
//
//	cd bench && go run ./cmd/compare -charts sweeps.json -chartdir ../docs/perf
package charts

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/skulkrt/skulk/bench/internal/compare"
)

// Chart size: fits a documentation page's column.
const (
	width  = 16 * vg.Centimeter
	height = 10 * vg.Centimeter
)

// ErrEmpty is returned for a record with no sweep of more than one point.
var ErrEmpty = errors.New("charts: no sweep with more than one point")

// styles give every system the same colour and marker in every chart.
var styles = map[string]struct {
	c     color.Color
	shape draw.GlyphDrawer
}{
	compare.Skulk: {color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, draw.CircleGlyph{}},
	"go-plugin":   {color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, draw.TriangleGlyph{}},
	"mcp":         {color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, draw.SquareGlyph{}},
	"raw":         {color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}, draw.CrossGlyph{}},
}

// FileName is the name of the chart of curve of sweep.
func FileName(sweep, curve string) string { return sweep + "-" + curve + ".svg" }

// Write draws every curve of every sweep of rep that has more than one
// point into dir (which must exist) and returns the files written. A
// system with no measured value on a curve (not applicable, or failed)
// still has its legend entry, marked "n/a" with no line, and a series
// with some points missing says how many were n/a or failed, so that a
// gap is never silent; the reasons are in the record.
func Write(rep *compare.SweepReport, dir string) ([]string, error) {
	var files []string
	for _, sw := range rep.Sweeps {
		if len(sw.Points) < 2 {
			continue // a single point is a table, not a curve
		}
		for _, cv := range sw.Curves {
			p, err := chart(&sw, &cv)
			if err != nil {
				return files, fmt.Errorf("charts: %s/%s: %w", sw.ID, cv.ID, err)
			}
			f := filepath.Join(dir, FileName(sw.ID, cv.ID))
			if err := p.Save(width, height, f); err != nil {
				return files, fmt.Errorf("charts: %w", err)
			}
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil, ErrEmpty
	}
	return files, nil
}

func chart(sw *compare.Sweep, cv *compare.Curve) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = sw.Title + ": " + cv.Title
	p.X.Label.Text = sw.X + " (" + sw.XUnit + ")"
	p.Y.Label.Text = cv.Unit
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, x := range sw.Points {
		xmin, xmax = min(xmin, x), max(xmax, x)
	}
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, se := range cv.Series {
		var xys plotter.XYs
		for _, v := range se.Values {
			if v.Measured() {
				xys = append(xys, plotter.XY{X: v.X, Y: v.Y})
				ymin, ymax = min(ymin, v.Y), max(ymax, v.Y)
			}
		}
		st, ok := styles[se.System]
		if !ok {
			st = styles["raw"]
		}
		label := se.System
		if len(xys) == 0 {
			label += ": n/a"
			if r := reason(se); r != "" {
				label += " (" + r + ")"
			}
			line, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: 0}})
			if err != nil {
				return nil, err
			}
			line.Color = st.c
			line.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			p.Legend.Add(label, line) // a legend entry only: never added to the plot
			continue
		}
		var na, failed int
		for _, v := range se.Values {
			switch {
			case v.Err != "":
				failed++
			case v.NA != "":
				na++
			}
		}
		if na > 0 {
			label += fmt.Sprintf(" (%d of %d points n/a)", na, len(se.Values))
		}
		if failed > 0 {
			label += fmt.Sprintf(" (%d of %d points failed)", failed, len(se.Values))
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		line.Color, line.Width = st.c, vg.Points(1.5)
		points.Color, points.Shape = st.c, st.shape
		p.Add(line, points)
		p.Legend.Add(label, line, points)
	}
	if xmin > 0 && xmax/xmin >= 50 {
		p.X.Scale = plot.LogScale{}
	}
	p.X.Tick.Marker = ticks{bytes: sw.XUnit == "bytes", values: sw.Points}
	if ymin > 0 && ymax/ymin >= 50 {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	} else if ymin >= 0 && !math.IsInf(ymin, 1) {
		p.Y.Min = 0
	}
	return p, nil
}

// reason shortens the first not-applicable reason of a series for its
// legend entry.
func reason(se compare.Series) string {
	for _, v := range se.Values {
		r := strings.TrimPrefix(v.NA, "n/a: ")
		if r == "" {
			r = v.Err
		}
		if r != "" {
			if i := strings.IndexAny(r, ";:,("); i > 0 {
				r = r[:i]
			}
			if len(r) > 48 {
				r = r[:48] + "…"
			}
			return r
		}
	}
	return ""
}

// ticks marks the sweep's points on the X axis, sizes in bytes labelled
// compactly (64, 1Ki, 16Mi).
type ticks struct {
	bytes  bool
	values []float64
}

func (t ticks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for _, v := range t.values {
		if v >= lo && v <= hi {
			l := fmt.Sprintf("%g", v)
			if t.bytes {
				l = byteLabel(v)
			}
			out = append(out, plot.Tick{Value: v, Label: l})
		}
	}
	return out
}

func byteLabel(v float64) string {
	switch {
	case v >= 1<<20 && math.Mod(v, 1<<20) == 0:
		return fmt.Sprintf("%gMi", v/(1<<20))
	case v >= 1<<10 && math.Mod(v, 1<<10) == 0:
		return fmt.Sprintf("%gKi", v/(1<<10))
	}
	return fmt.Sprintf("%g", v)
}
