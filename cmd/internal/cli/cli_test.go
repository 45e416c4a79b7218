package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/replay"
	"github.com/skulkrt/skulk/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExitStatusesAreDistinct(t *testing.T) {
	seen := map[int]string{}
	for _, e := range exitTable {
		if prev, ok := seen[e.status]; ok {
			require.FailNow(t, fmt.Sprintf("status %d used for %q and %q", e.status, prev, e.meaning))
		}
		seen[e.status] = e.meaning
	}
	for _, c := range []frame.Code{frame.CodeProviderError, frame.CodeTransportError, frame.CodeUnreachable, frame.CodeCancelled, frame.CodeTimeout, frame.CodeInvalidFrame} {
		s := ExitForCode(c)
		if _, ok := seen[s]; !ok || s == ExitOK || s == ExitFailure || s == ExitUsage {
			assert.Fail(t, fmt.Sprintf("code %s → status %d, not a documented code status", c, s))
		}
	}
	require.False(t, len(seen) != len(exitTable), "exit table has duplicates")
}

func TestExitForTerminal(t *testing.T) {
	tests := []struct {
		f    frame.Frame
		want int
	}{
		{frame.Frame{Kind: frame.KindCompleted}, ExitOK},
		{frame.Frame{Kind: frame.KindCancelled}, ExitCancelled},
		{frame.Frame{Kind: frame.KindFailed, Error: &frame.Error{Code: frame.CodeTimeout}}, ExitTimeout},
		{frame.Frame{Kind: frame.KindFailed, Error: &frame.Error{Code: frame.CodeUnreachable}}, ExitUnreachable},
		{frame.Frame{Kind: frame.KindFailed, Error: &frame.Error{Code: frame.CodeProviderError}}, ExitProviderError},
		{frame.Frame{Kind: frame.KindFailed, Error: &frame.Error{Code: frame.CodeInvalidFrame}}, ExitInvalidFrame},
		{frame.Frame{Kind: frame.KindFailed, Error: &frame.Error{Code: frame.CodeTransportError}}, ExitTransportError},
		{frame.Frame{Kind: frame.KindChunk}, ExitFailure},
	}
	for _, tt := range tests {
		if got := ExitForTerminal(tt.f); got != tt.want {
			assert.Fail(t, fmt.Sprintf("%s: got %d, want %d", tt.f.Kind, got, tt.want))
		}
	}
}

// TestRefusalStatus: what Host.Call refuses, or fails before it returns a
// Call, ends the command with the status of its kind.
func TestRefusalStatus(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{host.ErrUnknownTool, ExitRefused},
		{&host.SchemaError{Schema: "arguments"}, ExitRefused},
		{fmt.Errorf("host: invoke: %w", wire.ErrTooLarge), ExitRefused},
		{host.ErrPoolDown, ExitUnreachable},
		{&frame.Error{Code: frame.CodeUnreachable, Synthetic: true}, ExitUnreachable},
		{&frame.Error{Code: frame.CodeTransportError, Synthetic: true}, ExitTransportError},
		{errors.New("something else"), ExitFailure},
	}
	for _, tt := range tests {
		if got := statusOf(refusal("t", tt.err)); got != tt.want {
			assert.Fail(t, fmt.Sprintf("%v: status %d, want %d", tt.err, got, tt.want))
		}
	}
}

func TestJSONLineStarted(t *testing.T) {
	var out bytes.Buffer
	f, err := frame.NewStarted("c-1", frame.ProviderToCaller)
	require.NoError(t, err)
	require.NoError(t, newLineEncoder(&out).encode(f, ""))
	want := `{"call_id":"c-1","direction":"provider_to_caller","sequence":0,"kind":"started","synthetic":false,"payload":null,"media":null,"error":null}` + "\n"
	if out.String() != want {
		require.FailNow(t, fmt.Sprintf("got  %s\nwant %s", out.String(), want))
	}
}

func TestJSONLineInlineMediaIsDigested(t *testing.T) {
	var out bytes.Buffer
	dur := 0.5
	f, err := frame.NewChunk("c-1", frame.ProviderToCaller, 3, frame.MustPayload(map[string]any{"i": 2, "tag": "<a&b>"}),
		&frame.InlineMedia{Data: []byte("abc"), MediaType: "audio/pcm", SampleRate: 16000, Channels: 1, DurationSeconds: &dur})
	require.NoError(t, err)
	require.NoError(t, newLineEncoder(&out).encode(f, "/tmp/x/media-000003.pcm"))
	want := `{"call_id":"c-1","direction":"provider_to_caller","sequence":3,"kind":"chunk","synthetic":false,` +
		`"payload":{"i":2,"tag":"<a&b>"},"media":{"kind":"inline","media_type":"audio/pcm","sample_rate":16000,"channels":1,` +
		`"duration_seconds":0.5,"data":{"size":3,"sha256":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",` +
		`"file":"/tmp/x/media-000003.pcm"}},"error":null}` + "\n"
	if out.String() != want {
		require.FailNow(t, fmt.Sprintf("got  %s\nwant %s", out.String(), want))
	}
}

func TestJSONLineSyntheticFailedAndBlob(t *testing.T) {
	var out bytes.Buffer
	enc := newLineEncoder(&out)
	f, err := frame.NewFailed("c-2", frame.ProviderToCaller, 4, frame.CodeUnreachable, "child died")
	require.NoError(t, err)
	f.Synthetic = true
	require.NoError(t, enc.encode(f, ""))
	blob := &frame.BlobMedia{BlobID: "b1", SizeBytes: 0, SHA256: strings.Repeat("a", 64), MediaType: "image/png"}
	g, err := frame.NewChunk("c-2", frame.ProviderToCaller, 1, nil, blob)
	require.NoError(t, err)
	require.NoError(t, enc.encode(g, ""))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		require.FailNow(t, fmt.Sprintf("want 2 lines, got %q", out.String()))
	}
	var got []map[string]any
	for _, l := range lines {
		var m map[string]any
		require.NoErrorf(t, json.Unmarshal([]byte(l), &m), "line %q", l)
		assert.EqualValuesf(t, 8, len(m), "line %q has %d keys, want the 8 of the contract", l, len(m))
		got = append(got, m)
	}
	if got[0]["synthetic"] != true || got[0]["kind"] != "failed" {
		assert.Fail(t, fmt.Sprintf("failed line: %v", got[0]))
	}
	if e := got[0]["error"].(map[string]any); e["code"] != "unreachable" || e["message"] != "child died" {
		assert.Fail(t, fmt.Sprintf("error: %v", e))
	}
	m := got[1]["media"].(map[string]any)
	assert.Falsef(t, m["kind"] != "blob" || m["blob_id"] != "b1" || m["size_bytes"] != 0.0 || m["data"] != nil, "blob media: %v", m)
}

func TestInputPayload(t *testing.T) {
	tests := []struct{ line, want string }{
		{"hello", `{"text":"hello"}`},
		{`{"text": "x", "n": 1}`, `{"n":1,"text":"x"}`},
		{`  {"a": [1, 2]}  `, `{"a":[1,2]}`},
		{`{not json`, `{"text":"{not json"}`},
		{`[1, 2]`, `{"text":"[1, 2]"}`},
		{``, `{"text":""}`},
	}
	for _, tt := range tests {
		p, err := inputPayload(tt.line)
		require.NoErrorf(t, err, "%q", tt.line)
		if got := compactJSON(p); got != tt.want {
			assert.Fail(t, fmt.Sprintf("%q: got %s, want %s", tt.line, got, tt.want))
		}
	}
}

func TestPrintHuman(t *testing.T) {
	var out bytes.Buffer
	chunk := func(seq uint64, p frame.Payload, m frame.Media) frame.Frame {
		f, err := frame.NewChunk("c", frame.ProviderToCaller, seq, p, m)
		require.NoError(t, err)
		return f
	}
	printHuman(&out, chunk(1, frame.MustPayload(map[string]any{"text": "HELLO"}), nil), "", false)
	printHuman(&out, chunk(2, frame.MustPayload(map[string]any{"text": "line\n"}), nil), "", false)
	printHuman(&out, chunk(3, frame.MustPayload(map[string]any{"i": 0}), nil), "", false)
	printHuman(&out, chunk(4, nil, &frame.InlineMedia{Data: []byte("abc"), MediaType: "application/octet-stream"}), "d/media-000004.bin", false)
	done, _ := frame.NewCompleted("c", frame.ProviderToCaller, 5, frame.MustPayload(map[string]any{"n": 1}))
	printHuman(&out, done, "", false)
	want := "HELLO\nline\n{\"i\":0}\n[media #4 application/octet-stream, 3 B, sha256 ba7816bf8f01cfea, saved to d/media-000004.bin]\n"
	if out.String() != want {
		require.FailNow(t, fmt.Sprintf("got  %q\nwant %q", out.String(), want))
	}
}

func TestSaveMedia(t *testing.T) {
	dir := t.TempDir()
	path, err := saveMedia(dir, 7, &frame.InlineMedia{Data: []byte("xyz"), MediaType: "audio/wav; rate=8000"})
	require.NoError(t, err)
	require.Truef(t, strings.HasSuffix(path, "/media-000007.wav"), "path %s", path)
	path, err = saveMedia(dir, 8, &frame.InlineMedia{Data: nil, MediaType: "x/unknown"})
	require.Falsef(t, err != nil || !strings.HasSuffix(path, "/media-000008.bin"), "path %s, %v", path, err)
	// Media types are not case-sensitive.
	path, err = saveMedia(dir, 9, &frame.InlineMedia{Data: []byte("png"), MediaType: "IMAGE/PNG"})
	require.Falsef(t, err != nil || !strings.HasSuffix(path, "/media-000009.png"), "path %s, %v", path, err)
}

func TestFormatting(t *testing.T) {
	tests := []struct{ got, want string }{
		{formatCount(0), "0"}, {formatCount(999), "999"}, {formatCount(1000), "1,000"},
		{formatCount(1234567), "1,234,567"}, {formatCount(-1234), "-1,234"},
		{formatBytes(999), "999 B"}, {formatBytes(1500), "1.5 kB"}, {formatBytes(67108864), "67.1 MB"},
		{formatBytes(2_500_000_000), "2.50 GB"},
		{formatSize(256 << 20), "256 MiB"}, {formatSize(1 << 20), "1 MiB"}, {formatSize(1000), "1.0 kB"},
		{formatRate(10_000_000, 2*time.Second), "5.0 MB/s"}, {formatRate(1, 0), "- MB/s"},
		{formatDuration(850 * time.Microsecond), "850µs"}, {formatDuration(12300 * time.Microsecond), "12.3ms"},
		{formatDuration(1240 * time.Millisecond), "1.24s"},
		{renderProgress(12345, 3_000_000, 1500*time.Millisecond), "  12,345 frames  3.0 MB  2.0 MB/s  1.50s elapsed"},
	}
	for _, tt := range tests {
		assert.Falsef(t, tt.got != tt.want, "got %q, want %q", tt.got, tt.want)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestProgressDrawsAfterDelayAndClears(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var term syncBuffer
		p := startProgress(&term)
		p.add(10, 2_000_000)
		time.Sleep(progressDelay - time.Millisecond)
		synctest.Wait()
		if term.String() != "" {
			require.FailNow(t, fmt.Sprintf("drawn before the delay: %q", term.String()))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		s := term.String()
		require.Falsef(t, !strings.Contains(s, clearLine+"  10 frames  2.0 MB") || !strings.Contains(s, "elapsed"), "no progress line: %q", s)
		var stdout bytes.Buffer
		p.above(func() { stdout.WriteString("out\n") })
		if !strings.HasSuffix(term.String(), "elapsed"+clearLine) {
			require.FailNow(t, fmt.Sprintf("above did not erase the line first: %q", term.String()))
		}
		time.Sleep(progressEvery)
		synctest.Wait()
		p.finish()
		p.finish()
		if !strings.HasSuffix(term.String(), clearLine) {
			require.FailNow(t, fmt.Sprintf("finish did not erase the line: %q", term.String()))
		}
		if n := strings.Count(term.String(), "frames"); n < 2 {
			require.FailNow(t, fmt.Sprintf("line not redrawn after above: %d draws", n))
		}
	})
}

func TestProgressNotDrawnForShortCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var term syncBuffer
		p := startProgress(&term)
		time.Sleep(progressDelay / 2)
		p.finish()
		if term.String() != "" {
			require.FailNow(t, fmt.Sprintf("a short call drew %q", term.String()))
		}
	})
}

func TestNilProgress(t *testing.T) {
	var p *progress
	p.add(1, 1)
	ran := false
	p.above(func() { ran = true })
	p.finish()
	require.False(t, !ran, "above on nil progress did not run write")
}

func TestParseArgsIntersperse(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	j := fs.Bool("json", false, "")
	a := fs.String("args", "", "")
	pos, child, err := parseArgs(fs, []string{"--json", "count", "--args", `{"n":1}`, "--", "./c", "--json", "--"})
	require.NoError(t, err)
	if !*j || *a != `{"n":1}` || strings.Join(pos, ",") != "count" || strings.Join(child, " ") != "./c --json --" {
		require.FailNow(t, fmt.Sprintf("json=%v args=%q pos=%q child=%q", *j, *a, pos, child))
	}
	_, _, err = parseArgs(flag.NewFlagSet("x", flag.ContinueOnError), []string{"--nope"})
	if statusOf(err) != ExitUsage {
		require.FailNow(t, fmt.Sprintf("unknown flag: status %d (%v)", statusOf(err), err))
	}
}

// TestFlagsNamedAsDocumented: a usage error names a flag as the docs and
// help write it, two dashes for a long name and one for a letter.
func TestFlagsNamedAsDocumented(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"call", "count", "--nope", "--", "x"}, "flag provided but not defined: --nope"},
		{[]string{"call", "count", "-nope", "--", "x"}, "flag provided but not defined: --nope"},
		{[]string{"call", "count", "--args"}, "flag needs an argument: --args"},
		{[]string{"asif", "export", "j.db", "t", "-o"}, "flag needs an argument: -o"},
		{[]string{"call", "count", "--timeout", "soon", "--", "x"}, "invalid value for flag --timeout"},
		{[]string{"journal", "list", "--state", "gone", "j.db"}, "invalid value for flag --state"},
		{[]string{"tools", "-v=maybe", "--", "x"}, "invalid value for flag -v"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		assert.Equal(t, ExitUsage, code, "%q", tc.args)
		assert.Contains(t, stderr, tc.want, "%q", tc.args)
	}
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(context.Background(), args, Env{Stdout: &out, Stderr: &errb, Stdin: strings.NewReader("")})
	return code, out.String(), errb.String()
}

func TestUsageErrorsAreOneLine(t *testing.T) {
	cases := [][]string{
		{"frob"},
		{"call"},
		{"call", "count"},
		{"call", "count", "--nope", "--", "x"},
		{"call", "count", "extra", "--", "x"},
		{"call", "count", "--args", "[1]", "--", "x"},
		{"call", "count", "--args", "{", "--", "x"},
		{"call", "count", "--timeout", "soon", "--", "x"},
		{"call", "count", "--timeout", "-1s", "--", "x"},
		{"tools"},
		{"tools", "--yaml", "--", "x"},
		{"bench", "--frames", "0", "--", "x"},
		{"bench", "--streams", "10", "--frames", "5", "--", "x"},
		{"demo", "extra"},
		{"help", "frob"},
		{"help", "call", "tools"},
	}
	for _, args := range cases {
		code, stdout, stderr := runCLI(t, args...)
		assert.Falsef(t, code != ExitUsage, "%q: status %d, want %d", args, code, ExitUsage)
		assert.EqualValuesf(t, "", stdout, "%q: wrote to stdout: %q", args, stdout)
		assert.Falsef(t, strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "skulk-host") || !strings.Contains(stderr, "help"), "%q: want one line that points at help, got %q", args, stderr)
	}
}

// Our usage errors name what is wrong, never the argument the user typed.
func TestUsageErrorsDoNotEchoArguments(t *testing.T) {
	const typed = "S3CRETvalue"
	for _, args := range [][]string{
		{typed},
		{"help", typed},
		{"asif", typed},
		{"call", "count", typed, "--", "x"},
		{"tools", typed, "--", "x"},
		{"bench", typed, "--", "x"},
		{"call", "count", "--timeout", typed, "--", "x"},
		{"bench", "--frames", typed, "--", "x"},
		{"call", "count", "--env", "=" + typed, "--", "x"},
		{"call", "count", "-v=" + typed, "--", "x"},
	} {
		code, _, stderr := runCLI(t, args...)
		assert.Falsef(t, code != ExitUsage, "%q: status %d, want %d", args, code, ExitUsage)
		assert.Falsef(t, strings.Contains(stderr, typed), "%q: the message echoes the argument: %q", args, stderr)
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	flags := map[string][]string{
		"call":  {"--args", "--input", "--timeout", "--json", "--save-media", "--env", "-v", "Example"},
		"tools": {"--json", "--env", "-v", "Example"},
		"bench": {"--json", "--frames", "--media", "--calls", "--streams", "--env", "-v", "Example"},
		"demo":  {"go run ./cmd/skulk-host demo"},
	}
	for cmd, want := range flags {
		for _, args := range [][]string{{"help", cmd}, {cmd, "-h"}, {cmd, "--help"}} {
			code, stdout, stderr := runCLI(t, args...)
			require.Falsef(t, code != ExitOK || stderr != "", "%q: status %d, stderr %q", args, code, stderr)
			if !strings.HasPrefix(stdout, "usage: skulk-host "+cmd) {
				assert.Fail(t, fmt.Sprintf("%q: no usage line: %q", args, stdout[:min(len(stdout), 60)]))
			}
			for _, w := range want {
				assert.Falsef(t, !strings.Contains(stdout, w), "%q: help does not mention %s", args, w)
			}
		}
	}
	code, stdout, _ := runCLI(t, "help")
	require.Falsef(t, code != ExitOK, "help: status %d", code)
	for _, c := range []string{"demo", "call", "tools", "bench", "help"} {
		assert.Falsef(t, !strings.Contains(stdout, "\n    "+c), "help does not list %s", c)
	}
	assert.False(t, strings.Contains(stdout, ChildMode), "help lists the hidden child mode")
}

func TestCallStartFailureStatus(t *testing.T) {
	code, stdout, stderr := runCLI(t, "call", "count", "--", "/bin/true")
	require.Falsef(t, code != ExitStart || stdout != "", "status %d, stdout %q", code, stdout)
	require.Falsef(t, strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "could not start the child"), "stderr %q", stderr)
}

func TestPanicBecomesOneLine(t *testing.T) {
	cmd := &command{name: "boom", run: func(context.Context, []string, Env) error { panic("kaboom") }}
	err := runRecovered(context.Background(), cmd, nil, Env{})
	if statusOf(err) != ExitFailure || !strings.Contains(err.Error(), "internal error: kaboom") || strings.Contains(err.Error(), "\n") {
		require.FailNow(t, fmt.Sprintf("got %v (status %d)", err, statusOf(err)))
	}
}

// TestReadMediaBounded: --input-media reads at most its bound, and a file
// over it is refused, not read whole.
func TestReadMediaBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.bin")
	require.NoError(t, os.WriteFile(path, []byte("0123456789"), 0o644))
	if data, err := readMedia(path, 10); err != nil || string(data) != "0123456789" {
		require.FailNow(t, fmt.Sprintf("at the bound: %q, %v", data, err))
	}
	if _, err := readMedia(path, 9); !errors.Is(err, errMediaTooLarge) {
		require.FailNow(t, fmt.Sprintf("over the bound: %v, want errMediaTooLarge", err))
	}
}

// TestFollowTakeoverLineIsJSON: follow's takeover line is JSON whatever
// the writers' names hold (Go quoting would write \x1b, no JSON escape).
func TestFollowTakeoverLineIsJSON(t *testing.T) {
	var b bytes.Buffer
	step := replay.Step{TakenOverFrom: "w1\x1b[2J\u202e", Event: calllog.Event{Kind: calllog.KindStarted, Tree: "t1", Writer: "w2\x07", Seq: 7, Call: "t1", Tool: "upper", At: time.Unix(1, 0)}}
	require.NoError(t, printStep(&b, step))
	line, _, _ := strings.Cut(b.String(), "\n")
	var got struct {
		Takeover struct {
			From, To string
			Seq      uint64
		}
	}
	if err := json.Unmarshal([]byte(line), &got); err != nil || got.Takeover.From != step.TakenOverFrom || got.Takeover.To != "w2\x07" || got.Takeover.Seq != 7 {
		require.FailNow(t, fmt.Sprintf("takeover line %q: %v, %+v", line, err, got))
	}
}
