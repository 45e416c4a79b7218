package charts

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/skulkrt/skulk/bench/internal/compare"
)

// IndexName is the name of the index WriteIndex writes beside the charts.
const IndexName = "README.md"

// WriteIndex writes IndexName into dir: a page that shows every chart
// Write draws from rep, under its sweep's heading, each sweep of a single
// point as a table instead, the points that failed or are not applicable
// with their reasons, the targets and the notes of the record, so that
// no chart in dir is reachable only by its file name. record names the
// record the page says it was drawn from: a link when it is inside dir,
// else its base name. It returns the file written.
func WriteIndex(rep *compare.SweepReport, dir, record string) (string, error) {
	var b bytes.Buffer
	index(&b, rep, dir, record)
	f := filepath.Join(dir, IndexName)
	if err := os.WriteFile(f, b.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("charts: %w", err)
	}
	return f, nil
}

func index(b *bytes.Buffer, rep *compare.SweepReport, dir, record string) {
	src := "`" + filepath.Base(record) + "`"
	if rel, err := filepath.Rel(dir, record); err == nil && filepath.IsLocal(rel) {
		src = fmt.Sprintf("[`%s`](%s)", filepath.ToSlash(rel), filepath.ToSlash(rel))
	}
	m := rep.Machine
	fmt.Fprintf(b, "# Cost curves: the charts of a sweeps run\n\n")
	fmt.Fprintf(b, "Generated from the record %s by `cmd/compare -charts` (bench/README.md); "+
		"regenerate it rather than edit it:\n\n", src)
	fmt.Fprintf(b, "```sh\ncd bench && go run ./cmd/compare -charts ../docs/perf/sweeps.json -chartdir ../docs/perf\n```\n\n")
	fmt.Fprintf(b, "The run: %s, started %s, took %s; %d CPU: %s, %s, %s; load average %s at the start, %s at the end.",
		rep.Mode, rep.Started.UTC().Format(time.DateOnly), rep.Duration.Round(time.Second), m.NumCPU, m.CPU, m.GoVersion, m.OS,
		m.LoadStart, m.LoadEnd)
	if len(m.Modules) > 0 {
		var mods []string
		for k, v := range m.Modules {
			mods = append(mods, k+" "+v)
		}
		slices.Sort(mods)
		fmt.Fprintf(b, " Modules: %s.", strings.Join(mods, "; "))
	}
	b.WriteString("\n\n")
	if len(rep.Targets) > 0 {
		b.WriteString("## Targets\n\nRatios of values of this one run.\n\n| target | result |\n| --- | --- |\n")
		for _, t := range rep.Targets {
			fmt.Fprintf(b, "| %s | %s |\n", cell(t.Text), cell(short(t.Status)))
		}
		b.WriteString("\n")
	}
	for i := range rep.Sweeps {
		sweep(b, &rep.Sweeps[i])
	}
	if len(rep.Notes) > 0 {
		b.WriteString("## How each sweep drove each system\n\n")
		for _, n := range rep.Notes {
			fmt.Fprintf(b, "- %s\n", n)
		}
	}
}

func sweep(b *bytes.Buffer, sw *compare.Sweep) {
	fmt.Fprintf(b, "## %s: %s\n\n", sw.ID, sw.Title)
	var pts []string
	for _, x := range sw.Points {
		pts = append(pts, xLabel(sw, x))
	}
	fmt.Fprintf(b, "%s: %s %s.\n\n", capital(sw.X), strings.Join(pts, ", "), sw.XUnit)
	if len(sw.Points) < 2 {
		table(b, sw)
	} else {
		for _, cv := range sw.Curves {
			fmt.Fprintf(b, "![%s](%s)\n\n", cv.Title, FileName(sw.ID, cv.ID))
		}
	}
	gaps(b, sw)
}

// table shows a sweep of one point: a row per curve, a column per system
// with a measured value; the others are listed by gaps.
func table(b *bytes.Buffer, sw *compare.Sweep) {
	var systems []string
	for _, cv := range sw.Curves {
		for _, se := range cv.Series {
			if !slices.Contains(systems, se.System) && slices.ContainsFunc(se.Values, compare.Value.Measured) {
				systems = append(systems, se.System)
			}
		}
	}
	if len(systems) == 0 {
		return
	}
	fmt.Fprintf(b, "| %s | unit | %s |\n|%s\n", "at "+xLabel(sw, sw.Points[0]), strings.Join(systems, " | "),
		strings.Repeat(" --- |", 2+len(systems)))
	for _, cv := range sw.Curves {
		cells := []string{cell(cv.Title), cell(cv.Unit)}
		for _, sys := range systems {
			c := "-"
			if i := slices.IndexFunc(cv.Series, func(se compare.Series) bool { return se.System == sys }); i >= 0 && len(cv.Series[i].Values) > 0 {
				switch v := cv.Series[i].Values[0]; {
				case v.Measured():
					c = num(v.Y)
				case v.NA != "":
					c = "n/a"
				default:
					c = "failed"
				}
			}
			cells = append(cells, c)
		}
		fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
	}
	b.WriteString("\n")
}

// gaps lists the points of sw that are not measured: per system and
// reason, at which points and on which curves.
func gaps(b *bytes.Buffer, sw *compare.Sweep) {
	type gap struct {
		system, kind, reason string
	}
	var order []gap
	xs, curves := map[gap][]string{}, map[gap][]string{}
	for _, cv := range sw.Curves {
		for _, se := range cv.Series {
			for _, v := range se.Values {
				g := gap{system: se.System}
				switch {
				case v.Err != "":
					g.kind, g.reason = "failed", short(v.Err)
				case v.NA != "":
					g.kind, g.reason = "n/a", strings.TrimPrefix(v.NA, "n/a: ")
				case !v.Measured():
					g.kind, g.reason = "failed", "no measurement"
				default:
					continue
				}
				if _, ok := xs[g]; !ok {
					order = append(order, g)
				}
				if x := xLabel(sw, v.X); !slices.Contains(xs[g], x) {
					xs[g] = append(xs[g], x)
				}
				if !slices.Contains(curves[g], cv.ID) {
					curves[g] = append(curves[g], cv.ID)
				}
			}
		}
	}
	if len(order) == 0 {
		return
	}
	b.WriteString("Not measured:\n\n")
	for _, g := range order {
		on := "every curve"
		if len(curves[g]) < len(sw.Curves) {
			on = strings.Join(curves[g], ", ")
		}
		at := "at " + strings.Join(xs[g], ", ")
		if len(xs[g]) == len(sw.Points) && len(sw.Points) > 1 {
			at = "at every point"
		}
		fmt.Fprintf(b, "- %s, %s %s (%s): %s\n", g.system, g.kind, at, on, g.reason)
	}
	b.WriteString("\n")
}

// short cuts an error of a record to its first line and 200 bytes.
func short(s string) string {
	cut := false
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s, cut = s[:i], true
	}
	if len(s) > 200 {
		s, cut = strings.ToValidUTF8(s[:200], ""), true
	}
	if cut {
		s += " …"
	}
	return s
}

// cell makes s safe in a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func xLabel(sw *compare.Sweep, x float64) string {
	if sw.XUnit == "bytes" {
		return byteLabel(x)
	}
	return num(x)
}

// num formats a value with three significant digits, thousands and
// millions as k and M.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6 && math.Mod(a, 1e6) == 0:
		return fmt.Sprintf("%gM", v/1e6)
	case a >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	case a >= 100 || a == math.Trunc(a):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
