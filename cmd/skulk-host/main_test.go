package main

// These tests run the built skulk-host binary as a user would, against the
// built cmd/skulk-child, and check what a user and a script see: output
// lines, exit statuses, and the progress line in a real pseudo-terminal.
//
// Most of them run side by side (t.Parallel, as many at a time as
// -parallel allows): each mostly waits for the commands it starts, and
// keeps its files, journals and any NATS server to itself. A test runs
// alone, before them, and says why, if it sets this process's environment
// or has a time bound that other tests' commands running beside it could
// break.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/cmd/internal/cli"
	"github.com/skulkrt/skulk/cmd/internal/clitest"
	"github.com/skulkrt/skulk/internal/testnet"
)

// Paths of the binaries built by TestMain.
var hostBin, childBin string

// builds holds the binaries only some tests need, built when first asked
// for; TestMain removes them.
var builds clitest.Builds

func TestMain(m *testing.M) {
	if args := os.Getenv(hwmRoleEnv); args != "" {
		os.Exit(runMeasured(args))
	}
	dir, err := os.MkdirTemp("", "skulk-host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// skulk-host is built as this test binary was (-race or not), the
	// child without -race (testnet.BuildCommand).
	testnet.QuickRaceExit()
	for _, b := range []struct {
		out   *string
		pkg   string
		build func(dir, pkg string) (string, error)
	}{{&hostBin, "github.com/skulkrt/skulk/cmd/skulk-host", testnet.BuildCommand}, {&childBin, "github.com/skulkrt/skulk/cmd/skulk-child", testnet.Build}} {
		if *b.out, err = b.build(dir, b.pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	goleak.VerifyTestMain(m, testnet.CleanupAndExit(func() {
		os.RemoveAll(dir)
		builds.Remove()
	}))
}

// run runs skulk-host with args and stdin (clitest.Run).
func run(t *testing.T, stdin string, args ...string) clitest.Result {
	t.Helper()
	return clitest.Run(t, hostBin, stdin, args...)
}

func TestDemo(t *testing.T) {
	t.Parallel()
	r := run(t, "", "demo")
	require.EqualValuesf(t, 0, r.Status, "demo: status %d\nstdout:\n%s\nstderr:\n%s", r.Status, r.Stdout, r.Stderr)
	steps := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^  child +pid \d+ started in .*\(tools: count, echo, fail, media, sleep, upper\)$`),
		regexp.MustCompile(`(?m)^  stream +upper: SKULK STREAMS TEXT PIECE BY PIECE — each of 6 chunks came back`),
		regexp.MustCompile(`(?m)^  media +64 MiB inline in 64 chunks of 1 MiB: [0-9.]+ MB/s in .*, sha256 verified`),
		regexp.MustCompile(`(?m)^  deadline +sleep 5s, deadline 300ms → failed/timeout after `),
		regexp.MustCompile(`(?m)^  cancel +sleep 5s, cancelled at 200ms → cancelled after `),
		regexp.MustCompile(`(?m)^  kill -9 +SIGKILL to pid \d+ in the middle of a call → failed/unreachable \(synthetic\) after `),
		regexp.MustCompile(`(?m)^  restart +new pid \d+ \(restarts: 1\) .* after the kill; the next call completed \{"n":3\}$`),
		regexp.MustCompile(`(?m)^  close +child drained and stopped in `),
		regexp.MustCompile(`(?m)^done: every step behaved as described. Next: ` + regexp.QuoteMeta(hostBin) + ` help call`),
	}
	for _, re := range steps {
		assert.Falsef(t, !re.MatchString(r.Stdout), "demo output lacks a line matching %s\n%s", re, r.Stdout)
	}
	if m := regexp.MustCompile(`: ([0-9.]+ MB/s) in`).FindStringSubmatch(r.Stdout); m != nil {
		t.Logf("demo media rate: %s; whole demo %s", m[1], r.Elapsed)
	}
}

func TestCallJSONCount(t *testing.T) {
	t.Parallel()
	r := run(t, "", "call", "count", "--args", `{"n": 3}`, "--json", "--", childBin)
	require.Falsef(t, r.Status != cli.ExitOK || r.Stderr != "", "status %d, stderr %q", r.Status, r.Stderr)
	clitest.CheckCount(t, clitest.ParseLines(t, r.Stdout), 3)
}

func TestCallJSONMedia(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "media")
	const total, chunk = 250_000, 100_000
	r := run(t, "", "call", "media", "--args", fmt.Sprintf(`{"bytes": %d, "chunk": %d}`, total, chunk),
		"--json", "--save-media", dir, "--", childBin)
	require.Falsef(t, r.Status != cli.ExitOK || r.Stderr != "", "status %d, stderr %q", r.Status, r.Stderr)
	clitest.CheckMedia(t, clitest.ParseLines(t, r.Stdout), dir, total, chunk)
}

func TestCallJSONFail(t *testing.T) {
	t.Parallel()
	r := run(t, "", "call", "fail", "--args", `{"message": "disk on fire"}`, "--json", "--", childBin)
	require.Falsef(t, r.Status != cli.ExitProviderError || r.Stderr != "", "status %d (want %d), stderr %q", r.Status, cli.ExitProviderError, r.Stderr)
	lines := clitest.ParseLines(t, r.Stdout)
	last := lines[len(lines)-1]
	if len(lines) != 2 || last.Kind != "failed" || last.Synthetic || last.Error == nil ||
		last.Error.Code != "provider_error" || last.Error.Message != "disk on fire" || last.Payload != nil {
		require.FailNow(t, fmt.Sprintf("lines:\n%s", r.Stdout))
	}
}

func TestCallJSONSleepTimeout(t *testing.T) {
	t.Parallel()
	r := run(t, "", "call", "sleep", "--args", `{"ms": 20000}`, "--timeout", "300ms", "--json", "--", childBin)
	require.Falsef(t, r.Status != cli.ExitTimeout || r.Stderr != "", "status %d (want %d), stderr %q", r.Status, cli.ExitTimeout, r.Stderr)
	lines := clitest.ParseLines(t, r.Stdout)
	last := lines[len(lines)-1]
	require.Falsef(t, len(lines) != 2 || last.Kind != "failed" || last.Error == nil || last.Error.Code != "timeout", "lines:\n%s", r.Stdout)
	assert.Falsef(t, r.Elapsed > 15*time.Second, "a 300ms deadline took %s", r.Elapsed)
}

func TestCallJSONCrash(t *testing.T) {
	t.Parallel()
	const after = 2
	r := run(t, "", "call", "crash", "--args", fmt.Sprintf(`{"after": %d}`, after), "--json", "--", childBin, "--test-tools")
	require.Falsef(t, r.Status != cli.ExitUnreachable || r.Stderr != "", "status %d (want %d), stderr %q", r.Status, cli.ExitUnreachable, r.Stderr)
	lines := clitest.ParseLines(t, r.Stdout)
	// The chunks the child wrote before it died are given to the caller
	// when the host read them before it noticed the death; the synthetic
	// terminal follows whatever it gave.
	require.Falsef(t, len(lines) < 2 || len(lines) > after+2, "want started, up to %d chunks, failed; got:\n%s", after, r.Stdout)
	for i, l := range lines[1 : len(lines)-1] {
		assert.Falsef(t, l.Kind != "chunk" || l.Payload["i"] != float64(i) || l.Synthetic, "chunk %d: %+v", i, l)
	}
	last := lines[len(lines)-1]
	require.Falsef(t, last.Kind != "failed" || !last.Synthetic || last.Error == nil || last.Error.Code != "unreachable", "terminal: %+v", last)
	if len(lines) != after+2 {
		t.Logf("the host dropped %d chunk(s) the child had written before it died", after+2-len(lines))
	}
}

func TestCallInterruptCancels(t *testing.T) {
	t.Parallel()
	p := clitest.Start(t, hostBin, "call", "sleep", "--args", `{"ms": 30000}`, "--json", "--", childBin)
	sc := bufio.NewScanner(p.Stdout)
	var out strings.Builder
	if !sc.Scan() { // the started line: the call is running
		_, stderr := p.Wait(t)
		require.FailNow(t, fmt.Sprintf("no started line; stderr %q", stderr))
	}
	out.WriteString(sc.Text() + "\n")
	require.NoError(t, p.Cmd.Process.Signal(os.Interrupt))
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
	}
	if status, stderr := p.Wait(t); status != cli.ExitCancelled {
		require.FailNow(t, fmt.Sprintf("exit status %d, want %d; stderr %q", status, cli.ExitCancelled, stderr))
	}
	lines := clitest.ParseLines(t, out.String())
	if last := lines[len(lines)-1]; last.Kind != "cancelled" {
		require.FailNow(t, fmt.Sprintf("terminal: %+v", last))
	}
}

func TestCallHuman(t *testing.T) {
	t.Parallel()
	r := run(t, "hello\n{\"text\": \"from json\"}\nworld\n", "call", "upper", "--input", "-", "--", childBin)
	require.Falsef(t, r.Status != cli.ExitOK, "status %d, stderr %q", r.Status, r.Stderr)
	assert.EqualValuesf(t, "HELLO\nFROM JSON\nWORLD\n", r.Stdout, "stdout %q", r.Stdout)
	assert.Falsef(t, !regexp.MustCompile(`^completed \{"chunks":3\} — 5 frames, .* in .*\n$`).MatchString(r.Stderr), "status line %q", r.Stderr)
	assert.Falsef(t, strings.Contains(r.Stderr, "\x1b"), "stderr is no terminal, but got escape codes: %q", r.Stderr)

	in := filepath.Join(t.TempDir(), "input.txt")
	require.NoError(t, os.WriteFile(in, []byte("plain text\n{\"k\": [1, 2]}\n"), 0o644))
	r = run(t, "", "call", "echo", "--input", in, "--", childBin)
	assert.Falsef(t, r.Status != cli.ExitOK || r.Stdout != "plain text\n{\"k\":[1,2]}\n" || !strings.HasPrefix(r.Stderr, `completed {"chunks":2}`), "echo --input FILE: status %d, stdout %q, stderr %q", r.Status, r.Stdout, r.Stderr)

	r = run(t, "", "call", "count", "--args", `{"n": 2}`, "--", childBin)
	assert.Falsef(t, r.Status != cli.ExitOK || r.Stdout != "{\"i\":0}\n{\"i\":1}\n", "count: status %d, stdout %q", r.Status, r.Stdout)
	r = run(t, "", "call", "fail", "--args", `{"message": "nope"}`, "--", childBin)
	assert.Falsef(t, r.Status != cli.ExitProviderError || !strings.HasPrefix(r.Stderr, "failed: provider_error: nope — 2 frames"), "fail: status %d, stderr %q", r.Status, r.Stderr)
}

// TestCallInputKeepsLinesAndSendsMedia: --input keeps each line's ending
// ("\r\n", "\n", none on the last), and --input-media sends a file as one
// inline media chunk with its media type, before the lines.
func TestCallInputKeepsLinesAndSendsMedia(t *testing.T) {
	t.Parallel()
	media := filepath.Join(t.TempDir(), "blob.bin")
	data := bytes.Repeat([]byte{0, 1, 0xff, '\n'}, 1000)
	require.NoError(t, os.WriteFile(media, data, 0o644))
	saved := t.TempDir()
	r := run(t, "a\r\nb\nc", "call", "echo", "--input", "-", "--input-media", media, "--media-type", "image/png", "--json", "--save-media", saved, "--", childBin)
	require.Falsef(t, r.Status != cli.ExitOK, "status %d, stderr %q", r.Status, r.Stderr)
	lines := clitest.ParseLines(t, r.Stdout)
	require.EqualValuesf(t, 6, len(lines), "got %d frames, want started, media, 3 text chunks, completed: %s", len(lines), r.Stdout)
	// echo sends the bytes back: what the host received, hashed and saved,
	// is the file's content.
	sum := sha256.Sum256(data)
	m := lines[1].Media
	if m == nil || m.MediaType != "image/png" || m.Data == nil || m.Data.Size != len(data) || m.Data.SHA256 != hex.EncodeToString(sum[:]) {
		assert.Fail(t, fmt.Sprintf("media chunk: %+v, want %d bytes of SHA-256 %x", lines[1], len(data), sum))
	} else if got, err := os.ReadFile(m.Data.File); err != nil || !bytes.Equal(got, data) {
		assert.Fail(t, fmt.Sprintf("media chunk's bytes (saved to %q): %d bytes, %v; want the --input-media file's %d", m.Data.File, len(got), err, len(data)))
	}
	for i, want := range []string{"a\r\n", "b\n", "c"} {
		if got := lines[2+i].Payload["text"]; got != want {
			assert.Fail(t, fmt.Sprintf("text chunk %d: %q, want %q", i, got, want))
		}
	}
	r = run(t, "", "call", "echo", "--media-type", "image/png", "--", childBin)
	assert.Falsef(t, r.Status != cli.ExitUsage || !strings.Contains(r.Stderr, "--media-type goes with --input-media"), "--media-type alone: status %d, stderr %q", r.Status, r.Stderr)
}

func TestCallRefusedAndStartFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		args   []string
		status int
		want   string
	}{
		{"unknown tool", []string{"call", "nosuch", "--", childBin}, cli.ExitRefused, `has no tool "nosuch"`},
		{"arguments schema", []string{"call", "count", "--args", `{"n": -1}`, "--", childBin}, cli.ExitRefused, "/n"},
		{"input schema", []string{"call", "upper", "--input", "-", "--", childBin}, cli.ExitRefused, "input line 1 refused"},
		{"not a provider", []string{"call", "count", "--", "/bin/true"}, cli.ExitStart, "could not start the child"},
		{"no such file", []string{"call", "count", "--", "/nonexistent/provider"}, cli.ExitStart, "could not start the child"},
		{"no input file", []string{"call", "upper", "--input", "/nonexistent/input", "--", childBin}, cli.ExitFailure, "cannot read --input"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdin := ""
			if tc.name == "input schema" {
				stdin = `{"nottext": 1}` + "\n"
			}
			r := run(t, stdin, tc.args...)
			assert.Falsef(t, r.Status != tc.status, "status %d, want %d (stderr %q)", r.Status, tc.status, r.Stderr)
			assert.Falsef(t, strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, tc.want), "stderr %q: want one line containing %q", r.Stderr, tc.want)
			assert.Falsef(t, strings.Contains(r.Stderr, "goroutine ") || strings.Contains(r.Stderr, "panic") || strings.Contains(r.Stderr, "internal error"), "stack trace on stderr: %q", r.Stderr)
		})
	}
}

func TestBadUsage(t *testing.T) {
	t.Parallel()
	cases := [][]string{
		{"frobnicate"},
		{"call", "--no-such-flag", "count", "--", childBin},
		{"call", "count"},
		{"call", "--", childBin},
		{"call", "count", "--timeout", "soon", "--", childBin},
		{"call", "count", "--raw", "--escape", "--", childBin},
		{"call", "count", "--raw", "--json", "--", childBin},
		{"tools"},
		{"bench", "--streams", "0", "--", childBin},
		{"help", "nothing"},
	}
	for _, args := range cases {
		r := run(t, "", args...)
		assert.Falsef(t, r.Status != cli.ExitUsage, "%q: status %d, want %d", args, r.Status, cli.ExitUsage)
		assert.Falsef(t, r.Stdout != "" || strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, "skulk-host help"), "%q: want one line on stderr pointing at help; stdout %q stderr %q", args, r.Stdout, r.Stderr)
	}
	r := run(t, "")
	assert.Falsef(t, r.Status != cli.ExitUsage || !strings.Contains(r.Stderr, "Usage:"), "no arguments: status %d, stderr %q", r.Status, r.Stderr)
}

func TestHelpCall(t *testing.T) {
	t.Parallel()
	r := run(t, "", "help", "call")
	require.Falsef(t, r.Status != 0 || r.Stderr != "", "status %d, stderr %q", r.Status, r.Stderr)
	for _, want := range []string{"--args", "--input", "--timeout", "--json", "--save-media", "--env", "Examples:", "14  failed: timeout"} {
		assert.Falsef(t, !strings.Contains(r.Stdout, want), "help call lacks %q", want)
	}
}

func TestTools(t *testing.T) {
	t.Parallel()
	r := run(t, "", "tools", "--json", "--", childBin, "--test-tools")
	require.EqualValuesf(t, 0, r.Status, "status %d, stderr %q", r.Status, r.Stderr)
	clitest.CheckTools(t, r.Stdout)
	r = run(t, "", "tools", "--", childBin)
	if r.Status != 0 || !regexp.MustCompile(`(?m)^count .*— Sends n chunks`).MatchString(r.Stdout) ||
		!regexp.MustCompile(`(?m)^    arguments +\{`).MatchString(r.Stdout) || strings.Contains(r.Stdout, "crash") {
		assert.Fail(t, fmt.Sprintf("tools: status %d\n%s", r.Status, r.Stdout))
	}
}

func TestBench(t *testing.T) {
	t.Parallel()
	r := run(t, "", "bench", "--json", "--frames", "5001", "--media", "8000000", "--calls", "50", "--streams", "4", "--", childBin)
	require.EqualValuesf(t, 0, r.Status, "status %d, stderr %q", r.Status, r.Stderr)
	var res struct {
		SmallFrames struct {
			Frames          int64   `json:"frames"`
			FramesPerSecond float64 `json:"frames_per_second"`
		} `json:"small_frames"`
		InlineMedia struct {
			Bytes       int64   `json:"bytes"`
			MBPerSecond float64 `json:"mb_per_second"`
		} `json:"inline_media"`
		Latency struct {
			Calls     int     `json:"calls"`
			P50Micros float64 `json:"p50_us"`
			P99Micros float64 `json:"p99_us"`
		} `json:"latency"`
		Concurrent struct {
			Streams         int     `json:"streams"`
			Frames          int64   `json:"frames"`
			FramesPerSecond float64 `json:"frames_per_second"`
		} `json:"concurrent"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
		require.FailNow(t, fmt.Sprintf("bench --json: %v\n%s", err, r.Stdout))
	}
	if res.SmallFrames.Frames != 5001 || res.SmallFrames.FramesPerSecond <= 0 ||
		res.InlineMedia.Bytes != 8000000 || res.InlineMedia.MBPerSecond <= 0 ||
		res.Latency.Calls != 50 || res.Latency.P50Micros <= 0 || res.Latency.P99Micros < res.Latency.P50Micros ||
		res.Concurrent.Streams != 4 || res.Concurrent.Frames != 5001 || res.Concurrent.FramesPerSecond <= 0 {
		require.FailNow(t, fmt.Sprintf("implausible results:\n%s", r.Stdout))
	}
	t.Logf("bench (small run, under -race load): %s", strings.Join(strings.Fields(r.Stdout), " "))
}

// openPTY allocates a pseudo-terminal pair: the test reads master, the
// command writes slave.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	ioctl := func(req uintptr, arg unsafe.Pointer) error {
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), req, uintptr(arg)); errno != 0 {
			return errno
		}
		return nil
	}
	var unlock int32
	var n uint32
	if err := ioctl(syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		m.Close()
		require.FailNow(t, fmt.Sprintf("unlock pty: %v", err))
	}
	if err := ioctl(syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		m.Close()
		require.FailNow(t, fmt.Sprintf("pty number: %v", err))
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		require.FailNow(t, fmt.Sprintf("open pty slave: %v", err))
	}
	return m, s
}

// readTerminal reads master until it fails (EIO once every holder of the
// slave side has closed it) and then sends everything read, once, on the
// returned channel (size 1, so the reader never blocks on a test that has
// given up). The goroutine is stopped by the command's exit closing the
// slave side, or by the test closing master.
func readTerminal(master *os.File) <-chan []byte {
	read, _ := readTerminalSeeing(master, "")
	return read
}

// readTerminalSeeing is readTerminal that also closes seen once the
// output holds marker (never, for an empty marker).
func readTerminalSeeing(master *os.File, marker string) (read <-chan []byte, seen <-chan struct{}) {
	out := make(chan []byte, 1)
	saw := make(chan struct{})
	go func() {
		var term bytes.Buffer
		buf := make([]byte, 4096)
		seeing := marker != ""
		for {
			n, err := master.Read(buf)
			term.Write(buf[:n])
			if seeing && bytes.Contains(term.Bytes(), []byte(marker)) {
				close(saw)
				seeing = false
			}
			if err != nil {
				out <- term.Bytes()
				return
			}
		}
	}()
	return out, saw
}

// awaitTerminal returns what readTerminal read, failing the test if ctx
// ends first.
func awaitTerminal(ctx context.Context, t *testing.T, read <-chan []byte) string {
	t.Helper()
	select {
	case term := <-read:
		return string(term)
	case <-ctx.Done():
		require.FailNow(t, "terminal output never ended")
		return ""
	}
}

// TestProgressLineInTerminal runs a call with stderr on a real
// pseudo-terminal: the progress line is drawn while the call runs and
// erased before the status line; stdout (a pipe) gets no escape codes.
//
// It runs alone (not t.Parallel): the line must be drawn several times
// within the call's 1.5 s.
func TestProgressLineInTerminal(t *testing.T) {
	master, slave := openPTY(t)
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, "call", "sleep", "--args", `{"ms": 1500}`, "--", childBin)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, slave
	require.NoError(t, cmd.Start())
	slave.Close() // the child holds its own copy; EOF (EIO) comes when it exits
	read := readTerminal(master)
	require.NoError(t, cmd.Wait(), "call")
	s := awaitTerminal(ctx, t, read)
	const clear = "\r\x1b[K"
	draw := regexp.MustCompile(`\r\x1b\[K  1 frames  0 B  [0-9.]+ MB/s  [0-9.]+(ms|s) elapsed`)
	draws := draw.FindAllStringIndex(s, -1)
	require.Falsef(t, len(draws) < 3, "want the progress line drawn several times during 1.5s, got %d draws in %q", len(draws), s)
	lastDraw := draws[len(draws)-1][1]
	rest := s[lastDraw:]
	require.Truef(t, strings.HasPrefix(rest, clear), "the last progress line is not erased: %q", rest)
	require.Truef(t, regexp.MustCompile(`^\r\x1b\[Kcompleted \{"slept_ms":1500\} — 2 frames, \d+ B in 1\.\d+s\r?\n$`).MatchString(rest), "after the progress line: %q", rest)
	if out.Len() != 0 {
		assert.Fail(t, fmt.Sprintf("stdout %q, want nothing (sleep has no chunks)", out.String()))
	}
}

// TestProgressLineAndOutputShareATerminal runs a call with stdout and
// stderr on the same pseudo-terminal while input trickles in: every text
// line the provider sends is printed on a clean line (the progress line is
// erased first), and nothing of the progress line is left at the end.
//
// It runs alone (not t.Parallel): the call must last long enough, paced
// by the test, for the line to be drawn between the words.
func TestProgressLineAndOutputShareATerminal(t *testing.T) {
	master, slave := openPTY(t)
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, "call", "upper", "--input", "-", "--", childBin)
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = slave, slave
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	slave.Close()
	read, running := readTerminalSeeing(master, "ALPHA")
	words := []string{"alpha", "bravo", "charlie", "delta"}
	for i, w := range words {
		if i == 1 {
			// The call runs once its first word came back: a loaded
			// machine can take longer to start skulk-host and its child
			// than the pacing below lasts, and a call that found every
			// word already written would end too soon to draw its line.
			select {
			case <-running:
			case <-ctx.Done():
				require.FailNow(t, "the first word never came back")
			}
		}
		// Pacing, not synchronisation: the call must last long enough
		// for the progress line to be drawn between the lines.
		time.Sleep(200 * time.Millisecond)
		_, err := fmt.Fprintln(stdin, w)
		require.NoError(t, err)
	}
	stdin.Close()
	require.NoError(t, cmd.Wait(), "call")
	s := awaitTerminal(ctx, t, read)
	require.Truef(t, strings.Contains(s, " frames  "), "the progress line was never drawn: %q", s)
	// What a person sees: apply carriage returns and erase-line codes.
	var screen []string
	for _, line := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		for strings.Contains(line, "\r\x1b[K") {
			line = line[strings.Index(line, "\r\x1b[K")+len("\r\x1b[K"):]
		}
		screen = append(screen, line)
	}
	want := []string{"ALPHA", "BRAVO", "CHARLIE", "DELTA"}
	require.Falsef(t, len(screen) < len(want)+1 || strings.Join(screen[:len(want)], ",") != strings.Join(want, ","), "screen %q, want the words then the status line (raw %q)", screen, s)
	if status := screen[len(want)]; !strings.HasPrefix(status, `completed {"chunks":4}`) {
		require.FailNow(t, fmt.Sprintf("status line %q", status))
	}
	require.Falsef(t, strings.Contains(strings.Join(screen, "\n"), "elapsed"), "a progress line is left on the screen: %q", screen)
}

// writeScript writes the shell script text to the executable file path.
// It holds syscall.ForkLock while the file is open for writing: a process
// that another test forks meanwhile would hold the file open until its
// exec, and running the script then would fail with "text file busy".
func writeScript(t *testing.T, path, text string) {
	t.Helper()
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	require.NoError(t, os.WriteFile(path, []byte(text), 0o755))
}

// TestChildGetsOnlyItsFDs: descriptors skulk-host inherited without
// close-on-exec (here fds 3 to 5, all on one file of this test) do not
// reach the child: fds 3 and 4 are the control connection and the stream
// listener (docs/protocol.md §1), and no descriptor of the child names the file.
func TestChildGetsOnlyItsFDs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	leakPath := filepath.Join(dir, "leak")
	leak, err := os.Create(leakPath)
	require.NoError(t, err)
	defer leak.Close()
	fdsOut := filepath.Join(dir, "fds")
	wrapper := filepath.Join(dir, "child.sh")
	// The shell's descriptors with what each names, then the provider.
	script := "#!/bin/sh\nfor f in /proc/$$/fd/*; do echo \"$f $(readlink $f)\"; done > " + fdsOut + "\nexec " + childBin + "\n"
	writeScript(t, wrapper, script)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, "call", "echo", "--", wrapper)
	cmd.ExtraFiles = []*os.File{leak, leak, leak}
	if out, err := cmd.CombinedOutput(); err != nil {
		require.FailNow(t, fmt.Sprintf("skulk-host: %v\n%s", err, out))
	}
	b, err := os.ReadFile(fdsOut)
	require.NoError(t, err)
	require.Falsef(t, strings.Contains(string(b), leakPath), "the child inherited skulk-host's descriptors:\n%s", b)
	for _, fd := range []string{"/3 socket:", "/4 socket:"} {
		require.Truef(t, strings.Contains(string(b), fd), "no %q among the child's descriptors:\n%s", fd, b)
	}
}

// TestChildOutputForwarded: what the child writes on stdout and stderr
// reaches skulk-host's standard error line by line, tagged with the
// child's id and pid (docs/protocol.md §1), without -v; the host's own events
// only with -v.
func TestChildOutputForwarded(t *testing.T) {
	t.Parallel()
	wrapper := filepath.Join(t.TempDir(), "child.sh")
	script := "#!/bin/sh\necho 'to stderr' >&2\necho 'to stdout'\nexec " + childBin + "\n"
	writeScript(t, wrapper, script)
	r := run(t, "", "call", "echo", "--", wrapper)
	require.EqualValuesf(t, 0, r.Status, "status %d, stderr %q", r.Status, r.Stderr)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`msg="child output" child=c0\.1 pid=[1-9][0-9]* stream=stderr line="to stderr"`),
		regexp.MustCompile(`msg="child output" child=c0\.1 pid=[1-9][0-9]* stream=stdout line="to stdout"`),
	} {
		assert.Falsef(t, !want.MatchString(r.Stderr), "stderr %q has no line matching %s", r.Stderr, want)
	}
	assert.Falsef(t, strings.Contains(r.Stderr, "child started"), "host events without -v: %q", r.Stderr)
	assert.Falsef(t, strings.Contains(r.Stdout, "to stdout"), "the child's stdout reached skulk-host's stdout: %q", r.Stdout)
	if v := run(t, "", "call", "echo", "-v", "--", wrapper); !strings.Contains(v.Stderr, "child started") {
		assert.Fail(t, fmt.Sprintf("no host events with -v: %q", v.Stderr))
	}
}

// TestInterruptWhileStarting: Ctrl-C before the child's handshake ends the
// command with the cancelled status and says what happened, not "could not
// start the child".
func TestInterruptWhileStarting(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// sleep never says hello: the host waits for it (up to 10 s).
	cmd := exec.CommandContext(ctx, hostBin, "call", "x", "--", "/bin/sleep", "30")
	cmd.WaitDelay = 5 * time.Second
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	// The child's private directory exists: the host is starting it, its
	// signal handling in place since before.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "the host made no private directory")
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitCancelled {
		require.FailNow(t, fmt.Sprintf("exit: %v (want status %d); stderr %q", err, cli.ExitCancelled, errb.String()))
	}
	if !strings.Contains(errb.String(), "interrupted while the child was starting") {
		require.FailNow(t, fmt.Sprintf("stderr %q", errb.String()))
	}
}

// TestStuckHandlerDoesNotHoldExit: a handler that ignores its deadline
// gets its terminal written for it after the cancel grace; the command
// then stops the child with a short drain, so it exits about 1.5 s after
// the terminal, not after the library's 5 s drain grace.
//
// It runs alone (not t.Parallel): its bound is a quick call's time plus
// 3.8 s, and other tests' commands would slow one and not the other.
func TestStuckHandlerDoesNotHoldExit(t *testing.T) {
	// What a quick call takes on this machine now: the commands' start
	// and exit, slow under load and under the race detector.
	base := run(t, "", "call", "count", "--args", `{"n": 1}`, "--", childBin, "--test-tools")
	require.Zerof(t, base.Status, "quick call: status %d, stderr %q", base.Status, base.Stderr)
	r := run(t, "", "call", "sleep", "--args", `{"ms": 20000, "ignore_cancel": true}`, "--timeout", "300ms", "--", childBin, "--test-tools")
	require.Falsef(t, r.Status != cli.ExitTimeout, "status %d, stderr %q", r.Status, r.Stderr)
	// 0.3 s deadline + 1 s cancel grace + 0.5 s drain + 1 s cancel grace,
	// beside what the quick call took, with a second for a loaded machine
	// (a stuck handler that held the exit would hold it 20 s).
	bound := 2800*time.Millisecond + base.Elapsed + time.Second
	require.Falsef(t, r.Elapsed > bound, "took %v to exit, a quick call %v", r.Elapsed, base.Elapsed)
	t.Logf("exit after %v (a quick call %v)", r.Elapsed, base.Elapsed)
}
