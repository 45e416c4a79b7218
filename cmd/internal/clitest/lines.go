package clitest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skulkrt/skulk/child/demotools"
)

// Line is one decoded line of skulk-host call --json (docs/cli.md, "The
// `--json` line contract").
type Line struct {
	CallID    string         `json:"call_id"`
	Direction string         `json:"direction"`
	Sequence  uint64         `json:"sequence"`
	Kind      string         `json:"kind"`
	Synthetic bool           `json:"synthetic"`
	Payload   map[string]any `json:"payload"`
	Media     *struct {
		Kind      string `json:"kind"`
		MediaType string `json:"media_type"`
		Data      *struct {
			Size   int    `json:"size"`
			SHA256 string `json:"sha256"`
			File   string `json:"file"`
		} `json:"data"`
	} `json:"media"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// lineKeys are the keys every line has, and no others.
var lineKeys = []string{"call_id", "direction", "sequence", "kind", "synthetic", "payload", "media", "error"}

// lineKinds are the kinds a line may have.
var lineKinds = []string{"started", "chunk", "completed", "failed", "cancelled"}

// Terminal reports whether kind ends a call.
func Terminal(kind string) bool {
	return kind == "completed" || kind == "failed" || kind == "cancelled"
}

// Checker decodes call --json lines one at a time, as they arrive, and
// checks what holds for every call: each line a JSON object with exactly
// the eight keys, a known kind, one non-empty call id, provider direction,
// sequences 0, 1, 2, … in order, started first and nothing after the
// terminal. End checks that the lines ended with a terminal. A Checker is
// used by one goroutine.
type Checker struct {
	t     testing.TB
	n     int
	first Line
	last  Line
}

// NewChecker returns a Checker that reports to t.
func NewChecker(t testing.TB) *Checker { return &Checker{t: t} }

// Add decodes and checks the next line, b without its line ending, and
// returns it. It fails t at once when b is not a line at all, and marks t
// failed when the line breaks the contract.
func (c *Checker) Add(b []byte) Line {
	c.t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		c.t.Fatalf("line %q is not a JSON object: %v", b, err)
	}
	if len(raw) != len(lineKeys) {
		c.t.Errorf("line %q has %d keys, want %d", b, len(raw), len(lineKeys))
	}
	for _, k := range lineKeys {
		if _, ok := raw[k]; !ok {
			c.t.Errorf("line %q lacks %q", b, k)
		}
	}
	var l Line
	if err := json.Unmarshal(b, &l); err != nil {
		c.t.Fatalf("line %q: %v", b, err)
	}
	if c.n == 0 {
		c.first = l
		if l.Kind != "started" {
			c.t.Errorf("first line kind %s, want started", l.Kind)
		}
	} else if Terminal(c.last.Kind) {
		c.t.Errorf("line %d (%s) after the terminal", c.n, l.Kind)
	}
	if !slices.Contains(lineKinds, l.Kind) {
		c.t.Errorf("line %d: kind %q", c.n, l.Kind)
	}
	if l.CallID == "" || l.CallID != c.first.CallID || l.Direction != "provider_to_caller" || l.Sequence != uint64(c.n) {
		c.t.Errorf("line %d: call_id %q direction %q sequence %d", c.n, l.CallID, l.Direction, l.Sequence)
	}
	c.n++
	c.last = l
	return l
}

// Count returns how many lines Add was given.
func (c *Checker) Count() int { return c.n }

// Last returns the last line Add was given.
func (c *Checker) Last() Line { return c.last }

// End fails t unless the lines so far are at least started and a
// terminal; output is shown in the failure.
func (c *Checker) End(output string) {
	c.t.Helper()
	if c.n < 2 || !Terminal(c.last.Kind) {
		c.t.Fatalf("want started … terminal, got %d lines:\n%s", c.n, output)
	}
}

// ParseLines checks and decodes every line of a call's standard output
// with a Checker, and its end.
func ParseLines(t testing.TB, stdout string) []Line {
	t.Helper()
	c := NewChecker(t)
	var lines []Line
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		lines = append(lines, c.Add(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the lines: %v", err)
	}
	c.End(stdout)
	return lines
}

// CheckCount checks the lines of the demo tool count called with
// {"n": n}: started, n chunks {"i": 0}, {"i": 1}, … with no media, error
// or synthetic flag, and completed {"n": n}, not synthetic.
func CheckCount(t testing.TB, lines []Line, n int) {
	t.Helper()
	if len(lines) != n+2 {
		t.Fatalf("want started, %d chunks, completed; got %d lines: %+v", n, len(lines), lines)
	}
	for i, l := range lines[1 : n+1] {
		if l.Kind != "chunk" || l.Payload["i"] != float64(i) || l.Media != nil || l.Error != nil || l.Synthetic {
			t.Errorf("chunk %d: %+v", i, l)
		}
	}
	if last := lines[n+1]; last.Kind != "completed" || last.Payload["n"] != float64(n) || last.Synthetic {
		t.Errorf("terminal: %+v", last)
	}
}

// CheckMedia checks the lines of the demo tool media called with
// {"bytes": total, "chunk": chunk} and --save-media dir: started, one
// inline application/octet-stream chunk per chunk bytes whose size and
// SHA-256 are those of the demo pattern's bytes and which is saved, with
// those bytes, as dir/media-000001.bin, media-000002.bin, …; then
// completed with the SHA-256 of all the bytes.
func CheckMedia(t testing.TB, lines []Line, dir string, total, chunk int64) {
	t.Helper()
	n := int((total + chunk - 1) / chunk)
	if len(lines) != n+2 {
		t.Fatalf("want started, %d chunks, completed; got %d lines: %+v", n, len(lines), lines)
	}
	for i, l := range lines[1 : n+1] {
		from := int64(i) * chunk
		to := min(from+chunk, total)
		m := l.Media
		if l.Kind != "chunk" || m == nil || m.Kind != "inline" || m.MediaType != "application/octet-stream" || m.Data == nil {
			t.Fatalf("chunk %d: kind %s, media %+v", i, l.Kind, m)
		}
		want := MediaDigest(from, to)
		if m.Data.Size != int(to-from) || m.Data.SHA256 != want {
			t.Errorf("chunk %d: data %+v, want size %d sha256 %s", i, m.Data, to-from, want)
		}
		file := filepath.Join(dir, fmt.Sprintf("media-%06d.bin", i+1))
		if m.Data.File != file {
			t.Errorf("chunk %d: file %q, want %q", i, m.Data.File, file)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != want {
			t.Errorf("%s: saved bytes differ", file)
		}
	}
	if last := lines[n+1]; last.Kind != "completed" || last.Payload["sha256"] != MediaDigest(0, total) {
		t.Errorf("terminal: %+v", last)
	}
}

// MediaDigest returns the SHA-256, in hex, of the demo tool media's bytes
// [from, to): the pattern of demotools.MediaByte, which the Python demo
// tools send too.
func MediaDigest(from, to int64) string {
	b := make([]byte, to-from)
	for i := range b {
		b[i] = demotools.MediaByte(from + int64(i))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// CheckTools checks the output of skulk-host tools --json for a provider
// of the demo tools started with --test-tools: a JSON array in which every
// tool has a description, a version and an arguments schema, and which
// holds each of the demo tools.
func CheckTools(t testing.TB, stdout string) {
	t.Helper()
	var tools []struct {
		ID              string         `json:"id"`
		Version         string         `json:"version"`
		Description     string         `json:"description"`
		ArgumentsSchema map[string]any `json:"arguments_schema"`
	}
	if err := json.Unmarshal([]byte(stdout), &tools); err != nil {
		t.Fatalf("tools --json: %v\n%s", err, stdout)
	}
	ids := map[string]bool{}
	for _, tl := range tools {
		ids[tl.ID] = true
		if tl.Description == "" || tl.Version == "" || tl.ArgumentsSchema == nil {
			t.Errorf("tool %s: description %q, version %q, arguments schema %v", tl.ID, tl.Description, tl.Version, tl.ArgumentsSchema)
		}
	}
	for _, id := range []string{"echo", "upper", "count", "media", "sleep", "fail", "crash"} {
		if !ids[id] {
			t.Errorf("tools --json lacks %s (have %v)", id, ids)
		}
	}
}
