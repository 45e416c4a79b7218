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
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/skulkrt/skulk/bench/internal/compare"
)

// Chart size: fits a documentation page's column. The plot is height
// tall; the legend gets a band of its own below it (legendBand), so that
// it never sits on a line.
const (
	width  = 16 * vg.Centimeter
	height = 10 * vg.Centimeter
)

// Text: Liberation Sans, which gonum measures the layout with; the SVG
// names it with the fonts metric-compatible with it (Arial, Helvetica)
// and a generic sans-serif last. A viewer that has none of them draws a
// wider sans (DejaVu Sans is about 12% wider), so every line is laid out
// to fit with slack to spare.
var (
	sans       = font.Font{Typeface: "Liberation", Variant: "Sans"}
	fontFamily = "font-family:Liberation Sans,Arial,Helvetica,sans-serif"
)

const (
	titleSize  = 11
	labelSize  = 10
	tickSize   = 9
	legendSize = 9
	// slack is how much wider than measured a line may be drawn.
	slack = 1.25
	// margin is kept free on each side of the chart.
	margin = 6 * vg.Millimeter
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
			p, legend, err := chart(&sw, &cv)
			if err != nil {
				return files, fmt.Errorf("charts: %s/%s: %w", sw.ID, cv.ID, err)
			}
			f := filepath.Join(dir, FileName(sw.ID, cv.ID))
			if err := save(p, legend, f); err != nil {
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

// legendEntry is one line of a chart's legend: its label and the
// thumbnails drawn before it (none for a note).
type legendEntry struct {
	label  string
	thumbs []plot.Thumbnailer
}

// save draws p with legend in a band below it and writes the SVG to f.
func save(p *plot.Plot, legend []legendEntry, f string) error {
	lh := lineHeight(legendSize)
	band := vg.Length(len(legend))*lh + lh/2
	c := vgsvg.New(width, height+band)
	dc := draw.New(c)
	p.Draw(draw.Crop(dc, 0, -margin/2, band, 0)) // room on the right for the last tick label
	drawLegend(draw.Crop(dc, margin, -margin, 0, -height), legend, lh)
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return err
	}
	svg := bytes.ReplaceAll(buf.Bytes(), []byte("font-family:Liberation Sans"), []byte(fontFamily))
	return os.WriteFile(f, svg, 0o644)
}

// drawLegend draws the entries one per line from the top of c: a line
// and marker as the series has them, then the label.
func drawLegend(c draw.Canvas, entries []legendEntry, lh vg.Length) {
	ts := textStyle(legendSize)
	thumb := 8 * vg.Millimeter
	y := c.Max.Y - lh
	for _, e := range entries {
		x := c.Min.X
		if len(e.thumbs) > 0 {
			r := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
				Min: vg.Point{X: x, Y: y}, Max: vg.Point{X: x + thumb, Y: y + lh*0.8}}}
			for _, t := range e.thumbs {
				t.Thumbnail(&r)
			}
			x += thumb + 2*vg.Millimeter
		}
		c.FillText(ts, vg.Point{X: x, Y: y + lh*0.15}, e.label)
		y -= lh
	}
}

// textStyle is the charts' text in size points.
func textStyle(size vg.Length) text.Style {
	return text.Style{Color: color.Black, Font: font.From(sans, size), Handler: plot.DefaultTextHandler}
}

// lineHeight is the height of one line of text of size points.
func lineHeight(size vg.Length) vg.Length { return size * 1.5 }

// textWidth is how wide s is drawn in size points, as measured.
func textWidth(s string, size vg.Length) vg.Length {
	face := font.DefaultCache.Lookup(font.From(sans, size), size)
	return face.Width(s)
}

// fit breaks s into lines that fit in w with slack to spare, at spaces
// (after a ": " first, where the title of a sweep meets its curve's).
func fit(s string, size, w vg.Length) string {
	var lines []string
	for _, part := range strings.SplitAfter(s, ": ") {
		part = strings.TrimSpace(part)
		line := ""
		for _, word := range strings.Fields(part) {
			next := strings.TrimSpace(line + " " + word)
			if line != "" && textWidth(next, size)*slack > w {
				lines = append(lines, line)
				next = word
			}
			line = next
		}
		if line != "" {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

func chart(sw *compare.Sweep, cv *compare.Curve) (*plot.Plot, []legendEntry, error) {
	var legend []legendEntry
	p := plot.New()
	// Only the fonts change: each style keeps the alignment plot.New gave it.
	p.Title.TextStyle.Font = font.From(sans, titleSize)
	p.Title.Text = fit(sw.Title+": "+cv.Title, titleSize, width-2*margin)
	p.Title.Padding = 2 * vg.Millimeter
	p.X.Label.TextStyle.Font, p.Y.Label.TextStyle.Font = font.From(sans, labelSize), font.From(sans, labelSize)
	p.X.Tick.Label.Font, p.Y.Tick.Label.Font = font.From(sans, tickSize), font.From(sans, tickSize)
	p.X.Label.Text = sw.X + " (" + sw.XUnit + ")"
	p.Y.Label.Text = cv.Unit
	p.X.Padding, p.Y.Padding = 2*vg.Millimeter, 2*vg.Millimeter
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
				return nil, nil, err
			}
			line.Color = st.c
			line.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			legend = append(legend, legendEntry{label, []plot.Thumbnailer{line}}) // a legend entry only: never added to the plot
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
			return nil, nil, err
		}
		line.Color, line.Width = st.c, vg.Points(1.5)
		points.Color, points.Shape = st.c, st.shape
		p.Add(line, points)
		legend = append(legend, legendEntry{label, []plot.Thumbnailer{line, points}})
	}
	if xmin > 0 && xmax/xmin >= 50 {
		p.X.Scale = plot.LogScale{}
	}
	p.X.Tick.Marker = ticks{bytes: sw.XUnit == "bytes", values: sw.Points}
	if ymin > 0 && ymax/ymin >= 50 {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, shortTicks{plot.LogTicks{Prec: -1}}
	} else if ymin >= 0 && !math.IsInf(ymin, 1) {
		p.Y.Min = 0
		p.Y.Tick.Marker = shortTicks{plot.DefaultTicks{}}
	}
	return p, legend, nil
}

// shortTicks relabels another Ticker's labelled ticks compactly: 1M,
// 250k, 0.5, never 1e+06.
type shortTicks struct{ plot.Ticker }

func (t shortTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := t.Ticker.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = siLabel(ts[i].Value)
		}
	}
	return ts
}

// siLabel writes v with an SI suffix (k, M, G) and at most three
// significant digits.
func siLabel(v float64) string {
	a := math.Abs(v)
	for _, u := range []struct {
		f float64
		s string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if a >= u.f {
			return fmt.Sprintf("%.3g%s", v/u.f, u.s)
		}
	}
	return fmt.Sprintf("%.3g", v)
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
