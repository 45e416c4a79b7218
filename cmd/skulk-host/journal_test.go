package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/stretchr/testify/require"
)

// lineReader delivers the lines of r on a channel, closed at EOF. The
// goroutine ends when r does (the process's pipe closes).
func lineReader(r io.Reader) <-chan string {
	ch := make(chan string, 1024) // bounded by the test's output; the tests read everything
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// nextLine returns the next line of ch that satisfies match, failing the
// test after limit.
func nextLine(t *testing.T, ch <-chan string, limit time.Duration, what string, match func(string) bool) string {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-ch:
			require.Truef(t, ok, "%s: the output ended", what)
			if match(l) {
				return l
			}
		case <-timer.C:
			require.FailNow(t, fmt.Sprintf("%s: nothing in %v", what, limit))
		}
	}
}

// followLine is one line of skulk-host follow.
type followLine struct {
	Kind     string `json:"kind"`
	Tree     string `json:"tree"`
	Writer   string `json:"writer"`
	Seq      uint64 `json:"seq"`
	Call     string `json:"call"`
	Takeover *struct {
		From, To string
		Seq      uint64
	} `json:"takeover"`
	Lost *struct{ From, To uint64 } `json:"lost"`
}

// A host process writing a required SQLite journal is killed with SIGKILL
// mid-call; a second process takes the tree over; a follower started
// before the kill sees every kept event of both writers in order, the
// takeover, and no duplicate; the first writer is fenced.
func TestJournalCrashTakeover(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "calls.db")
	crashTakeover(t, db, func(t *testing.T, readOnly bool) calllog.EventStore {
		st, err := sqlitestore.Open(db, sqlitestore.Options{ReadOnly: readOnly})
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		return st
	})
}

// crashTakeover is TestJournalCrashTakeover on the journal db (a file or
// a store URL), whose store open opens in the test process.
func crashTakeover(t *testing.T, db string, open func(t *testing.T, readOnly bool) calllog.EventStore) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	a := exec.CommandContext(ctx, hostBin, "call", "--json", "--journal", db, "--input", "-", "echo", "--", childBin)
	a.WaitDelay = 5 * time.Second
	// The host is killed below and cannot remove its child's directory
	// (and socket): let it make it where the test cleans up.
	a.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	stdin, err := a.StdinPipe()
	require.NoError(t, err)
	aOut, _ := a.StdoutPipe()
	aErr, _ := a.StderrPipe()
	require.NoError(t, a.Start())
	aOutLines, aErrLines := lineReader(aOut), lineReader(aErr)
	defer func() {
		a.Process.Kill()
		a.Wait()
	}()
	tree := treeID(t, aErrLines)

	f := exec.CommandContext(ctx, hostBin, "follow", db, tree)
	f.WaitDelay = 5 * time.Second
	fOut, _ := f.StdoutPipe()
	var fErr strings.Builder
	f.Stderr = &fErr
	require.NoError(t, f.Start())
	defer func() {
		f.Process.Kill()
		f.Wait()
	}()
	fLines := lineReader(fOut)
	var followed []string
	for i := range 3 {
		_, err := io.WriteString(stdin, "line "+string(rune('a'+i))+"\n")
		require.NoError(t, err)
		nextLine(t, aOutLines, 30*time.Second, "an echoed chunk", func(l string) bool { return strings.Contains(l, `"kind":"chunk"`) })
	}
	// The follower shows the kept events live, before the kill.
	nextLine(t, fLines, 30*time.Second, "a live output event", func(l string) bool {
		followed = append(followed, l)
		return strings.Contains(l, `"kind":"output"`)
	})

	require.NoError(t, a.Process.Signal(syscall.SIGKILL))
	a.Wait()

	b := run(t, "", "journal", "takeover", db, tree)
	require.EqualValuesf(t, 0, b.Status, "takeover: status %d, stderr %q", b.Status, b.Stderr)
	for l := range fLines { // the follower ends at the tree's end
		followed = append(followed, l)
	}
	if err := f.Wait(); err != nil {
		require.FailNow(t, fmt.Sprintf("follow: %v (stderr %q)", err, fErr.String()))
	}

	st := open(t, true)
	kept, err := st.EventsAfter(ctx, tree, 0, 100_000)
	require.NoError(t, err)
	var events []followLine
	takeovers := 0
	for _, l := range followed {
		var fl followLine
		require.NoErrorf(t, json.Unmarshal([]byte(l), &fl), "follow line %q", l)
		switch {
		case fl.Takeover != nil:
			takeovers++
			require.Falsef(t, len(events) == 0 || fl.Takeover.From != events[len(events)-1].Writer || fl.Takeover.From == fl.Takeover.To, "takeover line %q after %+v", l, events)
		case fl.Lost != nil:
			// A tail the killed writer had numbered but not kept.
		default:
			require.Falsef(t, fl.Kind == "" || fl.Tree != tree, "follow line %q", l)
			events = append(events, fl)
		}
	}
	t.Logf("followed %d lines; %d events kept", len(followed), len(kept))
	require.EqualValuesf(t, 1, takeovers, "%d takeover lines in %q", takeovers, followed)
	require.Falsef(t, len(events) != len(kept), "followed %d events, %d kept", len(events), len(kept))
	writers := map[string]bool{}
	for i, e := range events {
		if e.Seq != kept[i].Seq || e.Writer != kept[i].Writer || e.Kind != kept[i].Kind.String() {
			require.FailNow(t, fmt.Sprintf("event %d: followed %+v, kept %+v", i, e, kept[i]))
		}
		if i > 0 && e.Seq <= events[i-1].Seq {
			require.FailNow(t, fmt.Sprintf("event %d: seq %d after %d (duplicate or out of order)", i, e.Seq, events[i-1].Seq))
		}
		writers[e.Writer] = true
	}
	first, last := kept[0], kept[len(kept)-1]
	require.Falsef(t, len(writers) != 2 || last.Writer == first.Writer || last.Kind != calllog.KindUnknown || last.Call != tree ||
		last.Error != nil, "the takeover's end: %+v (writers %v)", last, writers)
	outputs := 0
	for _, e := range kept {
		if e.Writer == first.Writer && e.Kind == calllog.KindOutput {
			outputs++
		}
	}
	require.NotEqualValues(t, 0, outputs, "no output event of the first writer was kept")

	// The first writer, back, cannot append: its claim is fenced.
	rw := open(t, false)
	late := first
	late.Seq = last.Seq + 1
	late.Kind = calllog.KindCompleted
	err = rw.Keep(ctx, calllog.Claim{Tree: tree, Writer: first.Writer, Epoch: 1, Last: 0}, []calllog.Event{late})
	require.ErrorIsf(t, err, calllog.ErrFenced, "the first writer's Keep: %v, want ErrFenced", err)
}

func TestJournalReplayAndRefusal(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "calls.db")
	tree := callTree(t, db, 3)
	rp := run(t, "", "replay", db, tree)
	require.Falsef(t, rp.Status != 0 || !strings.Contains(rp.Stdout, "call "+tree+" count") || !strings.Contains(rp.Stdout, `done: {"n":3}`), "replay: %d %q %q", rp.Status, rp.Stdout, rp.Stderr)
	// follow of an ended tree, named, prints it and ends.
	fl := run(t, "", "follow", db, tree)
	require.Falsef(t, fl.Status != 0 || strings.Count(fl.Stdout, `"kind":"output"`) != 3 || !strings.Contains(fl.Stdout, `"kind":"done"`), "follow: %d %q %q", fl.Status, fl.Stdout, fl.Stderr)
	// A refused call is in the log too, and its tree is named.
	r := run(t, "", "call", "--journal", db, "nope", "--", childBin)
	require.EqualValuesf(t, 4, r.Status, "refused call: %d %q", r.Status, r.Stderr)
	refused, ok := treeOfLine(r.Stderr)
	require.Falsef(t, !ok || refused == tree, "refused call: no tree of its own named in %q", r.Stderr)
	rp = run(t, "", "replay", db, refused)
	require.Falsef(t, rp.Status != 0 || !strings.Contains(rp.Stdout, "call "+refused+" nope") || !strings.Contains(rp.Stdout, "unknown_tool"), "replay of the refused call: %d %q %q", rp.Status, rp.Stdout, rp.Stderr)
	fl = run(t, "", "follow", db, refused)
	require.Falsef(t, fl.Status != 0 || !strings.Contains(fl.Stdout, `"refused":"unknown_tool"`), "follow of the refused call: %d %q", fl.Status, fl.Stdout)
}

// treeID reads a call command's standard error up to the line that names
// its journal tree, and returns the id.
func treeID(t *testing.T, stderr <-chan string) string {
	t.Helper()
	var tree string
	nextLine(t, stderr, 30*time.Second, "the tree id", func(l string) bool {
		var ok bool
		tree, ok = treeOfLine(l)
		return ok
	})
	return tree
}

// treeOfLine returns the tree id a call command's "journal: tree ID" line
// names, if s holds one.
func treeOfLine(s string) (string, bool) {
	_, rest, ok := strings.Cut(s, "journal: tree ")
	tree, _, _ := strings.Cut(rest, " ")
	return tree, ok && tree != ""
}

// callTree runs call --journal journal count n against the demo child,
// which must succeed, and returns the tree id its journal line names.
func callTree(t *testing.T, journal string, n int) string {
	t.Helper()
	r := run(t, "", "call", "--journal", journal, "count", "--args", fmt.Sprintf(`{"n":%d}`, n), "--", childBin)
	require.EqualValuesf(t, 0, r.Status, "call: %d %q", r.Status, r.Stderr)
	tree, ok := treeOfLine(r.Stderr)
	require.Truef(t, ok, "call: no journal tree line in %q", r.Stderr)
	return tree
}

// TestJournalEndNotConfirmed: a call whose tree is taken over while it
// runs cannot have its end confirmed by its (fenced) journal: the command
// still prints the outcome, then fails with status 1 saying why.
//
// It runs alone (not t.Parallel): the takeover must end while the call
// sleeps, and other tests' commands beside it would slow it into the
// rounds with longer sleeps.
func TestJournalEndNotConfirmed(t *testing.T) {
	// The takeover is another skulk-host process: on a loaded machine it
	// can take longer than the call's sleep, and a call that ended first
	// shows nothing. Such a round is run again with a longer sleep.
	for _, ms := range []int{1500, 6000, 24000} {
		if journalEndNotConfirmed(t, ms) {
			return
		}
		t.Logf("the takeover took longer than a %d ms call: again with a longer one", ms)
	}
	require.FailNow(t, "the takeover never ended while the call ran")
}

// journalEndNotConfirmed runs one round of TestJournalEndNotConfirmed with
// a call that sleeps ms; it returns false, having checked nothing, when
// the takeover ended too late to be sure the call was still running.
func journalEndNotConfirmed(t *testing.T, ms int) bool {
	db := filepath.Join(t.TempDir(), "calls.db")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := exec.CommandContext(ctx, hostBin, "call", "--journal", db, "sleep", "--args", fmt.Sprintf(`{"ms": %d}`, ms), "--", childBin)
	a.WaitDelay = 5 * time.Second
	aErr, _ := a.StderrPipe()
	require.NoError(t, a.Start())
	defer func() {
		a.Process.Kill()
		a.Wait()
	}()
	lines := lineReader(aErr)
	tree := treeID(t, lines)
	running := time.Now() // the call is running: its journal line came
	if b := run(t, "", "journal", "takeover", db, tree); b.Status != 0 {
		require.FailNow(t, fmt.Sprintf("takeover: status %d, stderr %q", b.Status, b.Stderr))
	}
	// The journal line comes after the call began, by as long as the pipe
	// and the scheduler take: a takeover within three quarters of the
	// sleep leaves that much room.
	inTime := time.Since(running) < time.Duration(ms)*time.Millisecond*3/4
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	err := a.Wait()
	if !inTime {
		return false
	}
	var ee *exec.ExitError
	require.ErrorAsf(t, err, &ee, "want exit status 1; stderr %q", rest)
	require.Equalf(t, 1, ee.ExitCode(), "exit %v, want status 1; stderr %q", err, rest)
	all := strings.Join(rest, "\n")
	status := strings.Index(all, "completed")
	failure := strings.Index(all, "did not confirm the call's end")
	require.Falsef(t, status < 0 || failure < status, "want the outcome, then the journal's failure; stderr %q", all)
	return true
}

// TestJournalTakeoverUnknownTree: a mistyped tree id is refused, and the
// journal gains no tree of that id (follow's default stays the real one).
func TestJournalTakeoverUnknownTree(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "calls.db")
	if r := run(t, "", "call", "--journal", db, "count", "--args", `{"n": 1}`, "--", childBin); r.Status != 0 {
		require.FailNow(t, fmt.Sprintf("call: status %d, stderr %q", r.Status, r.Stderr))
	}
	r := run(t, "", "journal", "takeover", db, "nosuchtree")
	require.Falsef(t, r.Status != 1 || !strings.Contains(r.Stderr, "no such tree"), "takeover of an unknown tree: status %d, stderr %q", r.Status, r.Stderr)
	st, err := sqlitestore.Open(db, sqlitestore.Options{ReadOnly: true})
	require.NoError(t, err)
	defer st.Close()
	trees, err := st.Trees(context.Background())
	require.NoError(t, err)
	require.Falsef(t, len(trees) != 1 || trees[0] == "nosuchtree", "trees %v", trees)
}

// TestJournalRedact: call --redact KEY keeps "[redacted]" in the journal
// in place of the key's values, marks the payloads, and the tree replays
// and follows as any other; the caller's own output is not redacted.
// --redact without --journal is a usage error.
func TestJournalRedact(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "calls.db")
	r := run(t, "", "call", "--journal", db, "--redact", "pad", "--json", "count", "--args", `{"n":2,"size":7}`, "--", childBin)
	require.Falsef(t, r.Status != 0 || !strings.Contains(r.Stdout, "xxxxxxx"), "call: %d %q %q", r.Status, r.Stdout, r.Stderr)
	tree, ok := treeOfLine(r.Stderr)
	require.Truef(t, ok, "call: no journal tree line in %q", r.Stderr)
	fl := run(t, "", "follow", db, tree)
	if fl.Status != 0 || strings.Count(fl.Stdout, `"pad":"[redacted]"`) != 2 || strings.Count(fl.Stdout, `"redacted":true`) != 2 ||
		strings.Contains(fl.Stdout, "xxxxxxx") {
		require.FailNow(t, fmt.Sprintf("follow: %d %q %q", fl.Status, fl.Stdout, fl.Stderr))
	}
	if rp := run(t, "", "replay", db, tree); rp.Status != 0 || !strings.Contains(rp.Stdout, `done: {"n":2}`) {
		require.FailNow(t, fmt.Sprintf("replay: %d %q %q", rp.Status, rp.Stdout, rp.Stderr))
	}
	if u := run(t, "", "call", "--redact", "pad", "count", "--", childBin); u.Status != 2 || !strings.Contains(u.Stderr, "--redact needs --journal") {
		require.FailNow(t, fmt.Sprintf("--redact without --journal: %d %q", u.Status, u.Stderr))
	}
}
