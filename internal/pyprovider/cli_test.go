package pyprovider_test

// These tests run the built skulk-host command against the Python
// provider as a user would (docs/cli.md): tools, a streamed call, a media
// call, and a call whose child is killed with SIGKILL.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/internal/cli"
	"github.com/skulkrt/skulk/internal/demotools"
)

// The skulk-host binary, built once into binDir by the first test that
// has Python (the others skip before building anything); TestMain removes
// binDir.
var (
	binDir    string
	buildOnce sync.Once
	builtHost string
	buildErr  error
)

// skulkHost returns the path of the built skulk-host, failing t when it
// could not be built.
func skulkHost(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "pyprovider-test-"); buildErr != nil {
			return
		}
		// Bounded, so a wedged toolchain fails the test instead of hanging it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out := filepath.Join(binDir, "skulk-host")
		if b, err := exec.CommandContext(ctx, "go", "build", "-o", out, "../../cmd/skulk-host").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/skulk-host: %v\n%s", err, b)
			return
		}
		builtHost = out
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtHost
}

// cliResult is what one run of skulk-host left behind.
type cliResult struct {
	status         int
	stdout, stderr string
}

// runCLI runs skulk-host with args, bounded by a generous deadline so a
// hang fails the test instead of the whole run.
func runCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, skulkHost(t), args...)
	cmd.WaitDelay = 5 * time.Second // bounds Wait even if something kept the pipes open
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.status = ee.ExitCode()
	default:
		t.Fatalf("skulk-host %q: %v (stderr %q)", args, err, r.stderr)
	}
	if ctx.Err() != nil {
		t.Fatalf("skulk-host %q did not finish in time", args)
	}
	return r
}

// cliLine is one call --json line (docs/cli.md, "Machine output").
type cliLine struct {
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

// lineChecker decodes call --json lines one at a time and checks what
// holds for every call: one call id, provider direction, sequences 0, 1,
// 2, … in order, started first, exactly one terminal and nothing after it.
type lineChecker struct {
	t     *testing.T
	n     int
	first cliLine
	last  cliLine
}

func (c *lineChecker) add(b []byte) cliLine {
	c.t.Helper()
	var l cliLine
	if err := json.Unmarshal(b, &l); err != nil {
		c.t.Fatalf("line %q: %v", b, err)
	}
	if c.n == 0 {
		c.first = l
		if l.Kind != "started" || l.CallID == "" {
			c.t.Errorf("first line: kind %s call_id %q, want started", l.Kind, l.CallID)
		}
	} else if terminal(c.last.Kind) {
		c.t.Errorf("line %d (%s) after the terminal", c.n, l.Kind)
	}
	if l.CallID != c.first.CallID || l.Direction != "provider_to_caller" || l.Sequence != uint64(c.n) {
		c.t.Errorf("line %d: call_id %q direction %q sequence %d", c.n, l.CallID, l.Direction, l.Sequence)
	}
	c.n++
	c.last = l
	return l
}

func terminal(kind string) bool {
	return kind == "completed" || kind == "failed" || kind == "cancelled"
}

// parseCLILines checks and decodes every line of a call's stdout.
func parseCLILines(t *testing.T, stdout string) []cliLine {
	t.Helper()
	c := lineChecker{t: t}
	var lines []cliLine
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		lines = append(lines, c.add(sc.Bytes()))
	}
	if len(lines) < 2 || !terminal(c.last.Kind) {
		t.Fatalf("want started … terminal, got:\n%s", stdout)
	}
	return lines
}

// TestCLITools: skulk-host tools lists the Python child's tools, as JSON
// and for a person.
func TestCLITools(t *testing.T) {
	py := provider(t)
	r := runCLI(t, "tools", "--json", "--", py, "--test-tools")
	if r.status != cli.ExitOK {
		t.Fatalf("tools --json: status %d, stderr %q", r.status, r.stderr)
	}
	var tools []struct {
		ID              string         `json:"id"`
		Version         string         `json:"version"`
		Description     string         `json:"description"`
		ArgumentsSchema map[string]any `json:"arguments_schema"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &tools); err != nil {
		t.Fatalf("tools --json: %v\n%s", err, r.stdout)
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
	r = runCLI(t, "tools", "--", py)
	if r.status != cli.ExitOK || !regexp.MustCompile(`(?m)^count .*— `).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^    arguments +\{`).MatchString(r.stdout) || strings.Contains(r.stdout, "crash") {
		t.Errorf("tools: status %d, stderr %q\n%s", r.status, r.stderr, r.stdout)
	}
}

// TestCLICallCount: call count streams n chunks and the result.
func TestCLICallCount(t *testing.T) {
	py := provider(t)
	r := runCLI(t, "call", "count", "--args", `{"n": 3}`, "--json", "--", py)
	if r.status != cli.ExitOK || r.stderr != "" {
		t.Fatalf("status %d, stderr %q", r.status, r.stderr)
	}
	lines := parseCLILines(t, r.stdout)
	if len(lines) != 5 {
		t.Fatalf("want started, 3 chunks, completed; got:\n%s", r.stdout)
	}
	for i, l := range lines[1:4] {
		if l.Kind != "chunk" || l.Payload["i"] != float64(i) || l.Media != nil || l.Error != nil || l.Synthetic {
			t.Errorf("chunk %d: %+v", i, l)
		}
	}
	if last := lines[4]; last.Kind != "completed" || last.Payload["n"] != 3.0 || last.Synthetic {
		t.Errorf("terminal: %+v", last)
	}
}

// mediaDigest is the SHA-256 of the media tool's bytes [from, to): the
// Python demo tools send the pattern of internal/demotools.
func mediaDigest(from, to int64) string {
	b := make([]byte, to-from)
	for i := range b {
		b[i] = demotools.MediaByte(from + int64(i))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestCLICallMedia: call media gives each inline chunk's bytes, saved to
// files, and the child's digest of the whole.
func TestCLICallMedia(t *testing.T) {
	py := provider(t)
	dir := filepath.Join(t.TempDir(), "media")
	const total, chunk = 2<<20 + 17, 1 << 20
	r := runCLI(t, "call", "media", "--args", fmt.Sprintf(`{"bytes": %d, "chunk": %d}`, total, chunk),
		"--json", "--save-media", dir, "--", py)
	if r.status != cli.ExitOK || r.stderr != "" {
		t.Fatalf("status %d, stderr %q", r.status, r.stderr)
	}
	lines := parseCLILines(t, r.stdout)
	if len(lines) != 5 {
		t.Fatalf("want started, 3 chunks, completed; got:\n%s", r.stdout)
	}
	for i, l := range lines[1:4] {
		from := int64(i * chunk)
		to := min(from+chunk, total)
		m := l.Media
		if m == nil || m.Kind != "inline" || m.MediaType != "application/octet-stream" || m.Data == nil {
			t.Fatalf("chunk %d: media %+v", i, m)
		}
		want := mediaDigest(from, to)
		if m.Data.Size != int(to-from) || m.Data.SHA256 != want {
			t.Errorf("chunk %d: data %+v, want size %d sha256 %s", i, m.Data, to-from, want)
		}
		b, err := os.ReadFile(m.Data.File)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != want || filepath.Dir(m.Data.File) != dir {
			t.Errorf("chunk %d: saved file %s differs", i, m.Data.File)
		}
	}
	if last := lines[4]; last.Kind != "completed" || last.Payload["sha256"] != mediaDigest(0, total) {
		t.Errorf("terminal: %+v", last)
	}
}

// childrenRunning returns the pids of pid's child processes whose command
// line holds arg (the host has a helper process of its own beside its
// children). It reads every thread's children: Go starts a process from
// whichever thread it runs on.
func childrenRunning(t *testing.T, pid int, arg string) []int {
	t.Helper()
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil || len(files) == 0 {
		t.Fatalf("no /proc/%d/task/*/children (%v)", pid, err)
	}
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		for _, s := range strings.Fields(string(b)) {
			p, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("%s: %q", f, b)
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			if err == nil && slices.Contains(strings.Split(string(cmdline), "\x00"), arg) {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

// TestCLIKill9: a SIGKILL of the Python child in the middle of a call
// ends it with a synthetic failed unreachable, and the command with exit
// status 12 (docs/cli.md, "Errors and exit statuses").
func TestCLIKill9(t *testing.T) {
	py := provider(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, skulkHost(t), "call", "count", "--args", `{"n": 100000000}`, "--json", "--", py)
	cmd.WaitDelay = 5 * time.Second
	var errb bytes.Buffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	defer func() {
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()

	c := lineChecker{t: t}
	sc := bufio.NewScanner(stdout)
	for c.n < 10 && sc.Scan() {
		if l := c.add(sc.Bytes()); terminal(l.Kind) {
			t.Fatalf("the call ended before the kill: %+v", l)
		}
	}
	if c.n < 10 {
		t.Fatalf("%d lines before the call ended (%v)", c.n, sc.Err()) // stderr is read only after Wait
	}
	kids := childrenRunning(t, cmd.Process.Pid, py)
	if len(kids) != 1 {
		t.Fatalf("skulk-host has children %v running %s, want one", kids, py)
	}
	if err := syscall.Kill(kids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	chunks := c.n - 1
	for sc.Scan() {
		if l := c.add(sc.Bytes()); l.Kind == "chunk" {
			chunks++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	waited = true
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitUnreachable || errb.Len() != 0 {
		t.Errorf("exit: %v, want status %d; stderr %q", err, cli.ExitUnreachable, errb.String())
	}
	last := c.last
	if last.Kind != "failed" || !last.Synthetic || last.Error == nil || last.Error.Code != "unreachable" {
		t.Errorf("terminal after the kill: %+v", last)
	}
	if chunks >= 100000000 {
		t.Errorf("all %d chunks arrived: the kill did not cut the call", chunks)
	}
	if ctx.Err() != nil {
		t.Fatal("skulk-host did not finish in time")
	}
}
