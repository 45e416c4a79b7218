package charts

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/bench/internal/compare"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// record is a sweeps record as cmd/compare -sweeps writes it: a sweep of
// three points where one system is not applicable, one where a system has
// a gap at one point, and a single-point sweep (a table, no chart).
const record = `{"mode": "test", "sweeps": [
 {"id": "concurrency", "title": "streams", "x": "concurrent streams", "x_unit": "streams", "points": [1, 64, 4096],
  "curves": [{"id": "frames", "title": "aggregate", "unit": "frames/s", "higher_is_better": true, "series": [
   {"system": "skulk", "values": [{"x": 1, "y": 600000, "samples": [600000]}, {"x": 64, "y": 700000, "samples": [700000]}, {"x": 4096, "y": 0, "error": "child unhealthy"}]},
   {"system": "go-plugin", "values": [{"x": 1, "y": 200000, "samples": [200000]}, {"x": 64, "y": 150000, "samples": [150000]}, {"x": 4096, "y": 30000, "samples": [30000]}]},
   {"system": "mcp", "values": [{"x": 1, "y": 4000, "samples": [4000]}, {"x": 64, "y": 3000, "samples": [3000]}, {"x": 4096, "y": 2800, "samples": [2800]}]},
   {"system": "raw", "values": [{"x": 1, "na": "n/a: one stream per socket"}, {"x": 64, "na": "n/a: one stream per socket"}, {"x": 4096, "na": "n/a: one stream per socket"}]}]}]},
 {"id": "frame-size", "title": "sizes", "x": "chunk size", "x_unit": "bytes", "points": [64, 1048576],
  "curves": [{"id": "throughput", "title": "throughput", "unit": "MB/s", "series": [
   {"system": "skulk", "values": [{"x": 64, "y": 30, "samples": [30]}, {"x": 1048576, "y": 6000, "samples": [6000]}]},
   {"system": "raw", "values": [{"x": 64, "y": 20, "samples": [20]}, {"x": 1048576, "y": 6400, "samples": [6400]}]}]},
   {"id": "cpu-per-mib", "title": "CPU per MiB", "unit": "ms", "series": [
   {"system": "skulk", "values": [{"x": 64, "y": 40, "samples": [40]}, {"x": 1048576, "y": 0.3, "samples": [0.3]}]},
   {"system": "raw", "values": [{"x": 64, "y": 50, "samples": [50]}, {"x": 1048576, "y": 0.2, "samples": [0.2]}]}]}]},
 {"id": "journal", "title": "journal", "x": "events", "x_unit": "events", "points": [1000000],
  "curves": [{"id": "keep-rate", "title": "kept/s", "unit": "events/s", "series": [
   {"system": "skulk", "values": [{"x": 1000000, "y": 30000, "samples": [30000]}]}]}]}
]}`

// TestChartsFromJSON draws the record and checks every chart is SVG (it
// parses as XML, with an <svg> root) with one legend entry per system,
// the systems with no measured point marked n/a.
func TestChartsFromJSON(t *testing.T) {
	var rep compare.SweepReport
	require.NoError(t, json.Unmarshal([]byte(record), &rep))
	dir := t.TempDir()
	files, err := Write(&rep, dir)
	require.NoError(t, err)
	want := map[string][]string{
		FileName("concurrency", "frames"):     {"skulk", "go-plugin", "mcp", "raw"},
		FileName("frame-size", "throughput"):  {"skulk", "raw"},
		FileName("frame-size", "cpu-per-mib"): {"skulk", "raw"},
	}
	assert.Falsef(t, len(files) != len(want), "wrote %v, want the %d charts of the sweeps with several points", files, len(want))
	for _, f := range files {
		systems, ok := want[filepath.Base(f)]
		if !ok {
			assert.Fail(t, fmt.Sprintf("unexpected chart %s", f))
			continue
		}
		texts := svgTexts(t, f)
		for _, sys := range systems {
			var entries []string
			for _, s := range texts {
				if s == sys || strings.HasPrefix(s, sys+" (") || strings.HasPrefix(s, sys+": n/a") {
					entries = append(entries, s)
				}
			}
			if len(entries) != 1 {
				assert.Fail(t, fmt.Sprintf("%s: legend entries for %s: %q, want one (texts %q)", filepath.Base(f), sys, entries, texts))
			}
		}
	}
	texts := strings.Join(svgTexts(t, filepath.Join(dir, FileName("concurrency", "frames"))), "|")
	for _, s := range []string{"raw: n/a (one stream per socket)", "skulk (1 of 3 points failed)", "4096"} {
		assert.Falsef(t, !strings.Contains(texts, s), "concurrency chart lacks %q: %s", s, texts)
	}
}

// TestIndex writes the index of the record beside its charts and checks it
// shows every chart, the single-point sweep as a table, and every point
// that is not measured with its reason.
func TestIndex(t *testing.T) {
	var rep compare.SweepReport
	require.NoError(t, json.Unmarshal([]byte(record), &rep))
	files, b := writeAll(t, &rep)
	page := string(b)
	for _, c := range files {
		if !strings.Contains(page, "]("+filepath.Base(c)+")") {
			assert.Fail(t, fmt.Sprintf("the index shows no %s", filepath.Base(c)))
		}
	}
	for _, s := range []string{
		"[`sweeps.json`](sweeps.json)",
		"## journal: journal",
		"| at 1M | unit | skulk |",
		"| kept/s | events/s | 30k |",
		"- skulk, failed at 4096 (every curve): child unhealthy",
		"- raw, n/a at every point (every curve): one stream per socket",
		"Chunk size: 64, 1Mi bytes.",
	} {
		assert.Falsef(t, !strings.Contains(page, s), "the index lacks %q:\n%s", s, page)
	}
	// A record outside the directory is named, not linked.
	f, err := WriteIndex(&rep, t.TempDir(), "/elsewhere/run.json")
	require.NoError(t, err)
	if b, err = os.ReadFile(f); err != nil || !strings.Contains(string(b), "the record `run.json` by") {
		assert.Fail(t, fmt.Sprintf("index of a record elsewhere: %v\n%s", err, b))
	}
}

// perfDir holds the committed record, its charts and their index.
const perfDir = "../../../docs/perf"

// TestCommittedIndex checks docs/perf as committed: its index is the one
// the committed record gives (regenerated, not stale), and every chart in
// the directory is one the record draws, so none is orphaned and none is
// missing.
func TestCommittedIndex(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(perfDir, "sweeps.json"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("no record in %s", perfDir)
	}
	require.NoError(t, err)
	var rep compare.SweepReport
	require.NoError(t, json.Unmarshal(b, &rep))
	files, want := writeAll(t, &rep)
	got, err := os.ReadFile(filepath.Join(perfDir, IndexName))
	assert.Falsef(t, err != nil || !bytes.Equal(got, want), "%s/%s is not the index of its record (%v): cd bench && go run ./cmd/compare -charts ../docs/perf/sweeps.json -chartdir ../docs/perf", perfDir, IndexName, err)
	var drawn []string
	for _, f := range files {
		drawn = append(drawn, filepath.Base(f))
	}
	committed, err := filepath.Glob(filepath.Join(perfDir, "*.svg"))
	require.NoError(t, err)
	for _, c := range committed {
		assert.Falsef(t, !slices.Contains(drawn, filepath.Base(c)), "%s: a chart the record does not draw, shown by no index", c)
	}
	for _, d := range drawn {
		assert.Falsef(t, !slices.Contains(committed, filepath.Join(perfDir, d)), "%s: the record draws it, but it is not committed", d)
	}
}

func TestChartsEmpty(t *testing.T) {
	rep := compare.SweepReport{Sweeps: []compare.Sweep{{ID: "journal", Points: []float64{1}}}}
	if _, err := Write(&rep, t.TempDir()); !errors.Is(err, ErrEmpty) {
		assert.Fail(t, fmt.Sprintf("Write(single-point sweeps) = %v, want ErrEmpty", err))
	}
}

// svgTexts parses an SVG file as XML and returns the text of its <text>
// elements.
func svgTexts(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	d := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	var cur strings.Builder
	in, sawSVG := false, false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoErrorf(t, err, "%s: not XML", file)
		switch e := tok.(type) {
		case xml.StartElement:
			sawSVG = sawSVG || e.Name.Local == "svg"
			if e.Name.Local == "text" {
				in = true
				cur.Reset()
			}
		case xml.CharData:
			if in {
				cur.Write(e)
			}
		case xml.EndElement:
			if e.Name.Local == "text" {
				in = false
				texts = append(texts, strings.TrimSpace(cur.String()))
			}
		}
	}
	require.Truef(t, sawSVG, "%s: no <svg> element", file)
	return texts
}

// writeAll draws rep's charts and index into a new directory and returns
// the charts' files and the index's bytes.
func writeAll(t *testing.T, rep *compare.SweepReport) ([]string, []byte) {
	t.Helper()
	dir := t.TempDir()
	files, err := Write(rep, dir)
	require.NoError(t, err)
	f, err := WriteIndex(rep, dir, filepath.Join(dir, "sweeps.json"))
	require.NoError(t, err)
	b, err := os.ReadFile(f)
	require.NoError(t, err)
	return files, b
}

// TestCommittedChartsLayout: every chart of the committed record has its
// title broken into lines that fit the chart with slack to spare for a
// wider font, the legend in a band of its own below the plot (one line
// per series, so never on a line), and text in fonts metric-compatible
// with the one measured.
func TestCommittedChartsLayout(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(perfDir, "sweeps.json"))
	require.NoError(t, err)
	var rep compare.SweepReport
	require.NoError(t, json.Unmarshal(b, &rep))
	dir := t.TempDir()
	files, err := Write(&rep, dir)
	require.NoError(t, err)
	for _, sw := range rep.Sweeps {
		for _, cv := range sw.Curves {
			for _, line := range strings.Split(fit(sw.Title+": "+cv.Title, titleSize, width-2*margin), "\n") {
				if w := textWidth(line, titleSize) * slack; w > width-2*margin {
					assert.Fail(t, fmt.Sprintf("%s/%s: title line %q is %v wide with slack, the chart %v", sw.ID, cv.ID, line, w, width-2*margin))
				}
			}
		}
	}
	viewBox := regexp.MustCompile(`viewBox="0 0 ([0-9.]+) ([0-9.]+)"`)
	for _, f := range files {
		svg, err := os.ReadFile(f)
		require.NoError(t, err)
		m := viewBox.FindSubmatch(svg)
		require.Falsef(t, m == nil, "%s: no viewBox", f)
		if h, _ := strconv.ParseFloat(string(m[2]), 64); h <= height.Points() {
			assert.Fail(t, fmt.Sprintf("%s: %v pt tall, no band below the %v pt plot for the legend", f, h, height.Points()))
		}
		assert.Falsef(t, bytes.Contains(svg, []byte("font-family:Liberation Serif")) || !bytes.Contains(svg, []byte(fontFamily)), "%s: text not in %s", f, fontFamily)
	}
}
