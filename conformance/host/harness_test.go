package hostconf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bounds. The suite runs on loaded 2-core machines under -race, so a bound
// on "promptly" is wide; lower bounds (the host waited long enough) need
// little slack, since a loaded machine only makes things later.
const (
	runLimit = 60 * time.Second // a skulk-host run still going then is killed and fails
	prompt   = 2 * time.Second  // "at once": a reaction the host owes without waiting for anything
	settle   = 3 * time.Second  // after skulk-host exits, its children must be gone within this
	margin   = 4 * time.Second  // added to a documented wait to bound it from above
)

// Defaults of the host and of skulk-host that the tests rely on
// (docs/protocol.md §5 and §7; docs/operations.md; docs/cli.md).
const (
	healthTimeout = 5 * time.Second        // no pong for this long: unhealthy
	cancelGrace   = 1 * time.Second        // startup.cancel_grace_ms
	killGrace     = 2 * time.Second        // SIGTERM → SIGKILL
	cliDrainGrace = 500 * time.Millisecond // skulk-host's drain grace when a command ends
	startTimeout  = 10 * time.Second       // no hello within this: the start fails
)

// runSeq numbers runs, for short unique socket and directory names.
var runSeq atomic.Int64

// opts are the knobs of one skulk-host run besides its arguments.
type opts struct {
	env        []string  // NAME=VALUE pairs for skulk-host, replacing inherited ones
	minimalEnv bool      // start from PATH and HOME only instead of the test's environment
	stdin      io.Reader // skulk-host's standard input; nil is /dev/null
}

// hostRun is one skulk-host process started by a test, with the event
// recorder of the children it starts. wait (or the test's clean-up) ends it.
type hostRun struct {
	t      *testing.T
	args   []string
	cmd    *exec.Cmd
	rec    *recorder
	tmpDir string // skulk-host's TMPDIR: its private dirs go here
	out    *lineLog
	errBuf syncBuffer
	start  time.Time
	done   chan struct{} // closed once the process has been waited for
	exitAt time.Time     // written before done is closed
	res    *result
}

// result is what a finished run showed.
type result struct {
	args   []string
	rc     int // exit status; -1 when killed by a signal
	start  time.Time
	exitAt time.Time
	lines  []line      // standard output, with the time each line arrived
	frames []frameLine // the lines parsed as --json frames (call --json only)
	stderr string
	events []event // what the children reported, in arrival order
}

// runCall runs `skulk-host call TOOL --json ARGS... -- fakechild MODE` to
// its end and checks that nothing was left behind.
func runCall(t *testing.T, mode, tool string, args ...string) *result {
	t.Helper()
	return start(t, mode, opts{}, append([]string{"call", tool, "--json"}, args...)...).wait()
}

// start starts skulk-host with args, then "--" and the fakechild command
// line for mode. skulk-host runs in its own process group with its own
// TMPDIR; the test's clean-up kills it if it is still running.
func start(t *testing.T, mode string, o opts, args ...string) *hostRun {
	t.Helper()
	n := runSeq.Add(1)
	r := &hostRun{
		t:      t,
		args:   args,
		rec:    listen(t, filepath.Join(suite.root, fmt.Sprintf("e%d.sock", n))),
		tmpDir: filepath.Join(suite.root, fmt.Sprintf("t%d", n)),
		out:    newLineLog(),
		done:   make(chan struct{}),
	}
	require.NoError(t, os.Mkdir(r.tmpDir, 0o700))
	full := append(slices.Clone(args), "--", suite.fakeBin, mode, r.rec.path)
	r.cmd = exec.Command(suite.hostBin, full...)
	r.cmd.Env = hostEnv(o, r.tmpDir)
	r.cmd.Stdin = o.stdin
	r.cmd.Stdout = r.out
	r.cmd.Stderr = &r.errBuf
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r.cmd.WaitDelay = 5 * time.Second // a leaked pipe writer cannot hold Wait up
	r.start = time.Now()
	if err := r.cmd.Start(); err != nil {
		r.rec.close()
		require.FailNow(t, fmt.Sprintf("starting skulk-host: %v", err))
	}
	go func() { // stopped by the process's exit; clean-up kills it if need be
		r.cmd.Wait() //nolint:errcheck // the exit status is read from ProcessState
		r.exitAt = time.Now()
		close(r.done)
	}()
	t.Cleanup(r.abort)
	return r
}

// hostEnv is skulk-host's environment for o, with TMPDIR set to tmp.
func hostEnv(o opts, tmp string) []string {
	var env []string
	if o.minimalEnv {
		env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	} else {
		env = os.Environ()
	}
	set := append([]string{"TMPDIR=" + tmp}, o.env...)
	env = slices.DeleteFunc(env, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(set, func(s string) bool { return strings.HasPrefix(s, name+"=") })
	})
	return append(env, set...)
}

// wait waits for skulk-host to exit (killing it after runLimit), checks
// that it left nothing behind and returns what it did.
func (r *hostRun) wait() *result {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(time.Until(r.start.Add(runLimit))):
		assert.Fail(r.t, fmt.Sprintf("skulk-host %v still running after %v: killed", r.args, runLimit))
		r.cmd.Process.Kill() //nolint:errcheck // it may just have exited
		<-r.done
	}
	return r.finish()
}

// abort is the test's clean-up: a run the test did not wait for (it failed
// early) is killed, and its leftovers are checked and removed all the same.
func (r *hostRun) abort() {
	select {
	case <-r.done:
	default:
		r.cmd.Process.Kill() //nolint:errcheck // it may just have exited
		<-r.done
	}
	r.finish()
}

// finish collects the result once the process has exited.
func (r *hostRun) finish() *result {
	if r.res != nil {
		return r.res
	}
	t := r.t
	t.Helper()
	res := &result{args: r.args, rc: -1, start: r.start, exitAt: r.exitAt, stderr: r.errBuf.String()}
	if r.cmd.ProcessState != nil {
		res.rc = r.cmd.ProcessState.ExitCode()
	}
	r.res = res
	r.checkLeftovers()
	res.events = r.rec.snapshot()
	res.lines = r.out.snapshot()
	if len(r.args) > 0 && r.args[0] == "call" && slices.Contains(r.args, "--json") {
		res.frames = parseFrames(t, res.lines)
	}
	return res
}

// checkLeftovers checks docs/protocol.md §7 "Shutdown": "remove `<dir>`;
// leave no zombie", and "Stopping a child": signals go to the whole
// process group, so no grandchild outlives its child: once skulk-host has exited, no
// process of its process group, of a child's process group, and no
// grandchild a child reported is alive (after settle), and no private
// directory is left. Leftovers are reported and then removed, so that no
// test leaves processes or files behind.
func (r *hostRun) checkLeftovers() {
	t := r.t
	t.Helper()
	// Process exit cannot be awaited for processes that are not ours, so
	// this polls, bounded by settle.
	deadline := time.Now().Add(settle)
	for {
		changed := r.rec.changed()
		live := liveProcesses(r.processes(r.rec.snapshot()))
		if len(live) == 0 && r.rec.openConns() == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-changed:
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.rec.close()
	events := r.rec.snapshot()
	if live := liveProcesses(r.processes(events)); len(live) > 0 {
		assert.Fail(t, fmt.Sprintf("left behind %v after skulk-host exited: %v", settle, live))
		for _, p := range live {
			if p.comm == "fakechild" { // only what this suite started
				syscall.Kill(p.pid, syscall.SIGKILL) //nolint:errcheck // it may be gone by now
			}
		}
	}
	for _, e := range events {
		if e.Name != "sockets" {
			continue
		}
		dir := filepath.Dir(e.str("listener"))
		if _, err := os.Stat(dir); err == nil {
			assert.Fail(t, fmt.Sprintf("private directory %s (of child %s) left behind", dir, e.Child))
		}
	}
	if left, _ := os.ReadDir(r.tmpDir); len(left) > 0 {
		var names []string
		for _, d := range left {
			names = append(names, d.Name())
		}
		assert.Fail(t, fmt.Sprintf("left behind in skulk-host's TMPDIR: %v", names))
	}
	os.RemoveAll(r.tmpDir)
}

// processes are the process groups and pids that must be gone: skulk-host's
// own group, each child's group and pid, each reported grandchild.
func (r *hostRun) processes(events []event) (groups, pids map[int]bool) {
	groups = map[int]bool{r.cmd.Process.Pid: true}
	pids = map[int]bool{}
	for _, e := range events {
		switch e.Name {
		case "start":
			groups[int(e.num("pgid"))] = true
			pids[e.PID] = true
		case "grandchild":
			pids[int(e.num("grandchild_pid"))] = true
		}
	}
	return groups, pids
}

// awaitEvent waits up to d for a child's event named name that matches (nil
// matches any) and returns it; the test fails at once when none comes.
func (r *hostRun) awaitEvent(d time.Duration, name string, match func(event) bool) event {
	r.t.Helper()
	limit := time.After(d)
	for {
		changed := r.rec.changed()
		for _, e := range r.rec.snapshot() {
			if e.Name == name && (match == nil || match(e)) {
				return e
			}
		}
		select {
		case <-changed:
		case <-r.done:
			require.FailNow(r.t, fmt.Sprintf("skulk-host exited before the child reported %q", name))
		case <-limit:
			require.FailNow(r.t, fmt.Sprintf("the child did not report %q within %v", name, d))
		}
	}
}

// awaitLines waits up to d for n lines of standard output.
func (r *hostRun) awaitLines(d time.Duration, n int) {
	r.t.Helper()
	limit := time.After(d)
	for {
		changed := r.out.changed()
		if len(r.out.snapshot()) >= n {
			return
		}
		select {
		case <-changed:
		case <-r.done:
			require.FailNow(r.t, fmt.Sprintf("skulk-host exited before writing %d lines", n))
		case <-limit:
			require.FailNow(r.t, fmt.Sprintf("skulk-host did not write %d lines within %v", n, d))
		}
	}
}

// signal sends sig to skulk-host and returns when it was sent.
func (r *hostRun) signal(sig syscall.Signal) time.Time {
	r.t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		require.FailNow(r.t, fmt.Sprintf("signal %v to skulk-host: %v", sig, err))
	}
	return time.Now()
}

// ---------------------------------------------------------------------------
// Output lines and frames.

// line is one line of output and when it arrived.
type line struct {
	At   time.Time
	Text string
}

// lineLog is an io.Writer that keeps complete lines with their arrival
// time; safe for one writer and any number of readers.
type lineLog struct {
	mu      sync.Mutex
	partial []byte
	lines   []line
	notify  chan struct{} // closed and replaced on every new line
}

// newLineLog returns an empty lineLog.
func newLineLog() *lineLog { return &lineLog{notify: make(chan struct{})} }

// Write splits p into lines.
func (l *lineLog) Write(p []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, line{At: now, Text: string(l.partial[:i])})
		l.partial = l.partial[i+1:]
		close(l.notify)
		l.notify = make(chan struct{})
	}
	return len(p), nil
}

// changed is closed at the next new line.
func (l *lineLog) changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.notify
}

// snapshot returns the lines so far; an unterminated last line counts.
func (l *lineLog) snapshot() []line {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.lines)
	if len(l.partial) > 0 {
		out = append(out, line{At: time.Now(), Text: string(l.partial)})
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// frameLine is one line of `skulk-host call --json` (docs/cli.md "The --json
// line contract").
type frameLine struct {
	At        time.Time
	CallID    string         `json:"call_id"`
	Direction string         `json:"direction"`
	Sequence  int64          `json:"sequence"`
	Kind      string         `json:"kind"`
	Synthetic bool           `json:"synthetic"`
	Payload   map[string]any `json:"payload"`
	Media     map[string]any `json:"media"`
	Error     *frameError    `json:"error"`
}

// frameError is a frame's error.
type frameError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// jsonKeys are the keys every --json line has, always (docs/cli.md).
var jsonKeys = []string{"call_id", "direction", "error", "kind", "media", "payload", "sequence", "synthetic"}

// errorCodes are the six error codes (docs/protocol.md §3, Error).
var errorCodes = []string{"provider_error", "transport_error", "unreachable", "cancelled", "timeout", "invalid_frame"}

// parseFrames parses --json output; every line must be one JSON object with
// exactly the eight keys of docs/cli.md.
func parseFrames(t *testing.T, lines []line) []frameLine {
	t.Helper()
	var out []frameLine
	for _, l := range lines {
		var keys map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l.Text), &keys); err != nil {
			assert.Fail(t, fmt.Sprintf("stdout line is not a JSON object (docs/cli.md --json): %q", l.Text))
			continue
		}
		var got []string
		for k := range keys {
			got = append(got, k)
		}
		slices.Sort(got)
		assert.Falsef(t, !slices.Equal(got, jsonKeys), "--json line has keys %v, want exactly %v: %q", got, jsonKeys, l.Text)
		d := json.NewDecoder(strings.NewReader(l.Text))
		d.UseNumber()
		var f frameLine
		if err := d.Decode(&f); err != nil {
			assert.Fail(t, fmt.Sprintf("--json line does not decode: %v: %q", err, l.Text))
			continue
		}
		f.At = l.At
		out = append(out, f)
	}
	return out
}

// checkStream checks what every call's --json output must be: one call id,
// direction provider_to_caller, sequences 0, 1, 2, … without gaps, the
// provider started first and not synthetic, exactly one terminal and it is
// last, synthetic only on the terminal, an error only where the shape table
// allows one (docs/cli.md; docs/protocol.md §4 and §7, synthetic terminals).
func checkStream(t *testing.T, frames []frameLine) {
	t.Helper()
	for i, f := range frames {
		if f.CallID == "" || f.CallID != frames[0].CallID {
			assert.Fail(t, fmt.Sprintf("frame %d: call_id %q, want the same non-empty id on every line (%q)", i, f.CallID, frames[0].CallID))
		}
		assert.EqualValuesf(t, "provider_to_caller", f.Direction, "frame %d: direction %q, want provider_to_caller", i, f.Direction)
		assert.Falsef(t, f.Sequence != int64(i), "frame %d: sequence %d, want %d (no gaps, from 0)", i, f.Sequence, i)
		terminal := isTerminal(f.Kind)
		switch {
		case i == 0 && (f.Kind != "started" || f.Synthetic):
			assert.Fail(t, fmt.Sprintf("frame 0: %s (synthetic %v), want the provider started, not synthetic", f.Kind, f.Synthetic))
		case i > 0 && i < len(frames)-1 && f.Kind != "chunk":
			assert.Fail(t, fmt.Sprintf("frame %d: kind %s before the last frame, want chunk", i, f.Kind))
		case i == len(frames)-1 && i > 0 && !terminal:
			assert.Fail(t, fmt.Sprintf("last frame %d: kind %s, want a terminal", i, f.Kind))
		}
		assert.Falsef(t, f.Synthetic && (!terminal || i != len(frames)-1), "frame %d: synthetic %s; only the last frame, a terminal, may be made up by the host", i, f.Kind)
		switch {
		case f.Kind == "failed" && (f.Error == nil || f.Error.Code == "cancelled"):
			assert.Fail(t, fmt.Sprintf("frame %d: failed with error %+v, want an error whose code is not cancelled", i, f.Error))
		case f.Kind == "cancelled" && f.Error != nil && f.Error.Code != "cancelled":
			assert.Fail(t, fmt.Sprintf("frame %d: cancelled with code %q", i, f.Error.Code))
		case f.Kind != "failed" && f.Kind != "cancelled" && f.Error != nil:
			assert.Fail(t, fmt.Sprintf("frame %d: %s carries an error", i, f.Kind))
		}
		if f.Error != nil && !slices.Contains(errorCodes, f.Error.Code) {
			assert.Fail(t, fmt.Sprintf("frame %d: error code %q is none of %v", i, f.Error.Code, errorCodes))
		}
	}
}

// isTerminal says whether kind ends a direction.
func isTerminal(kind string) bool {
	return kind == "completed" || kind == "failed" || kind == "cancelled"
}

// outcome is what a call's run must end with.
type outcome struct {
	rc        int
	frames    int    // lines, started and terminal included; 0: not checked
	kind      string // the terminal's kind
	code      string // the terminal's error code; "" for none
	synthetic bool   // whether the host made the terminal up
}

// expect checks the exit status, the frame stream and its terminal.
func (res *result) expect(t *testing.T, w outcome) {
	t.Helper()
	assert.Falsef(t, res.rc != w.rc, "exit status %d, want %d", res.rc, w.rc)
	checkStream(t, res.frames)
	assert.Falsef(t, w.frames > 0 && len(res.frames) != w.frames, "%d frames, want %d", len(res.frames), w.frames)
	if len(res.frames) < 2 {
		assert.Fail(t, fmt.Sprintf("no terminal in the output"))
		res.dump(t)
		return
	}
	last := res.frames[len(res.frames)-1]
	code := ""
	if last.Error != nil {
		code = last.Error.Code
	}
	assert.Falsef(t, last.Kind != w.kind || code != w.code || last.Synthetic != w.synthetic, "terminal %s/%q synthetic=%v, want %s/%q synthetic=%v", last.Kind, code, last.Synthetic, w.kind, w.code, w.synthetic)
	if t.Failed() {
		res.dump(t)
	}
}

// terminal is the last frame (the zero frame when there is none).
func (res *result) terminal() frameLine {
	if len(res.frames) == 0 {
		return frameLine{}
	}
	return res.frames[len(res.frames)-1]
}

// dump logs the run's output and events, for a failing test.
func (res *result) dump(t *testing.T) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "skulk-host %s: exit %d after %v\n--- stdout\n", strings.Join(res.args, " "), res.rc, res.exitAt.Sub(res.start).Round(time.Millisecond))
	for _, l := range res.lines {
		b.WriteString(l.Text + "\n")
	}
	b.WriteString("--- stderr\n" + res.stderr + "--- events\n")
	for _, e := range res.events {
		fmt.Fprintf(&b, "+%v %s %s %v\n", e.At.Sub(res.start).Round(time.Millisecond), e.Child, e.Name, e.F)
	}
	t.Log(b.String())
}

// ---------------------------------------------------------------------------
// Events of the children.

// event is one thing a fakechild reported.
type event struct {
	At    time.Time
	Name  string
	Child string
	PID   int
	F     map[string]any
}

// str is a string field ("" when absent).
func (e event) str(k string) string { s, _ := e.F[k].(string); return s }

// num is a number field (-1 when absent).
func (e event) num(k string) int64 {
	switch v := e.F[k].(type) {
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
		if f, err := v.Float64(); err == nil {
			return int64(f)
		}
	}
	return -1
}

// flag is a boolean field.
func (e event) flag(k string) bool { b, _ := e.F[k].(bool); return b }

// find returns the events named name that match (nil matches all).
func (res *result) find(name string, match func(event) bool) []event {
	var out []event
	for _, e := range res.events {
		if e.Name == name && (match == nil || match(e)) {
			out = append(out, e)
		}
	}
	return out
}

// first returns the first event named name that matches; the test fails
// when there is none.
func (res *result) first(t *testing.T, name string, match func(event) bool) (event, bool) {
	t.Helper()
	if evs := res.find(name, match); len(evs) > 0 {
		return evs[0], true
	}
	assert.Fail(t, fmt.Sprintf("the child reported no %q event", name))
	return event{}, false
}

// ofCall matches events about the call id.
func ofCall(id string) func(event) bool {
	return func(e event) bool { return e.str("call_id") == id }
}

// ofChild matches the events of the process that reported itself as id
// (a child's grandchild reports as "<child id>/grandchild"), and match.
func ofChild(id string, match func(event) bool) func(event) bool {
	return func(e event) bool { return e.Child == id && (match == nil || match(e)) }
}

// isSignal matches signal events of the signal named name ("terminated",
// "continued", ...).
func isSignal(name string) func(event) bool {
	return func(e event) bool { return e.str("signal") == name }
}

// ofConn matches events about stream connection n of child id.
func ofConn(child string, n int64) func(event) bool {
	return func(e event) bool { return e.Child == child && e.num("conn") == n }
}

// recorder receives the events of the fakechildren of one run on a Unix
// socket. close stops it; snapshot and changed are safe at any time.
type recorder struct {
	path       string
	ln         *net.UnixListener
	acceptDone chan struct{}
	readers    sync.WaitGroup

	mu     sync.Mutex
	events []event
	conns  []*net.UnixConn
	open   int           // accepted connections not at EOF yet
	notify chan struct{} // closed and replaced on every change
	closed bool
}

// listen starts a recorder on path.
func listen(t *testing.T, path string) *recorder {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	require.NoError(t, err, "event socket")
	rec := &recorder{path: path, ln: ln, acceptDone: make(chan struct{}), notify: make(chan struct{})}
	go rec.acceptLoop() // stopped by close (a deadline, then Close)
	return rec
}

// acceptLoop takes each child's connection.
func (rec *recorder) acceptLoop() {
	defer close(rec.acceptDone)
	for {
		c, err := rec.ln.AcceptUnix()
		if err != nil {
			return
		}
		rec.mu.Lock()
		rec.conns = append(rec.conns, c)
		rec.open++
		rec.readers.Add(1)
		rec.mu.Unlock()
		go rec.read(c) // stopped by EOF (the child exits) or by close closing c
	}
}

// read records one child's events until EOF.
func (rec *recorder) read(c *net.UnixConn) {
	defer rec.readers.Done()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		e := parseEvent(sc.Bytes())
		rec.mu.Lock()
		rec.events = append(rec.events, e)
		rec.broadcastLocked()
		rec.mu.Unlock()
	}
	rec.mu.Lock()
	rec.open--
	rec.broadcastLocked()
	rec.mu.Unlock()
}

// parseEvent decodes one event line.
func parseEvent(b []byte) event {
	e := event{At: time.Now()}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&e.F); err != nil {
		e.F = map[string]any{"ev": "bad_event", "text": string(b)}
	}
	e.Name, _ = e.F["ev"].(string)
	e.Child, _ = e.F["child"].(string)
	if n, ok := e.F["pid"].(json.Number); ok {
		pid, _ := n.Int64()
		e.PID = int(pid)
	}
	return e
}

// broadcastLocked wakes every waiter; rec.mu is held.
func (rec *recorder) broadcastLocked() {
	close(rec.notify)
	rec.notify = make(chan struct{})
}

// changed is closed at the next event or connection end.
func (rec *recorder) changed() <-chan struct{} {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.notify
}

// snapshot returns the events so far.
func (rec *recorder) snapshot() []event {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.events)
}

// openConns is the number of children whose event connection is still open.
func (rec *recorder) openConns() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.open
}

// close accepts what is still pending, waits (bounded) for every connection
// to reach EOF, and stops the recorder. Idempotent.
func (rec *recorder) close() {
	rec.mu.Lock()
	if rec.closed {
		rec.mu.Unlock()
		return
	}
	rec.closed = true
	rec.mu.Unlock()
	rec.ln.SetDeadline(time.Now().Add(100 * time.Millisecond)) //nolint:errcheck // only ends the accept loop
	<-rec.acceptDone
	rec.ln.Close()
	done := make(chan struct{})
	go func() { // stopped once every reader returned; they are forced below
		rec.readers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	rec.mu.Lock()
	for _, c := range rec.conns {
		c.Close()
	}
	rec.mu.Unlock()
	<-done
}

// ---------------------------------------------------------------------------
// Processes.

// proc is one process as /proc shows it.
type proc struct {
	pid, pgid int
	state     byte
	comm      string
}

// String describes p.
func (p proc) String() string {
	return fmt.Sprintf("%s[pid %d pgid %d state %c]", p.comm, p.pid, p.pgid, p.state)
}

// liveProcesses are the processes, zombies excepted, in one of groups or
// with one of pids.
func liveProcesses(groups, pids map[int]bool) []proc {
	ents, _ := os.ReadDir("/proc")
	var out []proc
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		p, err := readProc(pid)
		if err != nil || p.state == 'Z' || p.state == 'X' {
			continue
		}
		if groups[p.pgid] || pids[p.pid] {
			out = append(out, p)
		}
	}
	return out
}

// readProc reads /proc/PID/stat.
func readProc(pid int) (proc, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return proc{}, err
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return proc{}, errors.New("bad stat")
	}
	rest := strings.Fields(s[closing+1:]) // state ppid pgrp ...
	if len(rest) < 3 {
		return proc{}, errors.New("bad stat")
	}
	pgid, _ := strconv.Atoi(rest[2])
	return proc{pid: pid, pgid: pgid, state: rest[0][0], comm: s[open+1 : closing]}, nil
}
