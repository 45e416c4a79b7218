package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/cmd/internal/cli"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/natstest"
)

// proc is a skulk-host process the test reads line by line.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr <-chan string
}

// startHost starts skulk-host with args; it is killed (if still running)
// when the test ends.
func startHost(ctx context.Context, t *testing.T, args ...string) *proc {
	t.Helper()
	c := exec.CommandContext(ctx, hostBin, args...)
	c.WaitDelay = 5 * time.Second
	out, err := c.StdoutPipe()
	require.NoError(t, err)
	errp, err := c.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, c.Start())
	p := &proc{cmd: c, stdout: lineReader(out), stderr: lineReader(errp)}
	t.Cleanup(func() {
		c.Process.Kill()
		c.Wait()
	})
	return p
}

// wait drains p's output and returns its exit status and its stdout lines.
func (p *proc) wait(t *testing.T) (int, []string) {
	t.Helper()
	var lines []string
	for l := range p.stdout {
		lines = append(lines, l)
	}
	var stderr []string
	for l := range p.stderr {
		stderr = append(stderr, l)
	}
	err := p.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Logf("exit status %d, stderr after the lines read before:\n%s", ee.ExitCode(), strings.Join(stderr, "\n"))
		return ee.ExitCode(), lines
	}
	require.NoError(t, err)
	return 0, lines
}

// treesOf returns the trees of follow's event lines, in order, without
// repeats.
func treesOf(lines []string) []string {
	var out []string
	for _, l := range lines {
		var fl followLine
		if json.Unmarshal([]byte(l), &fl) == nil && fl.Tree != "" && (len(out) == 0 || out[len(out)-1] != fl.Tree) {
			out = append(out, fl.Tree)
		}
	}
	return out
}

// TestFollowWaits: follow without a tree waits for a journal not written
// yet (a missing file, a 0-byte one, a missing stream) and shows the call
// that writes it; started after a tree has ended, it shows the next call's
// tree, not the ended one (on SQLite and JetStream).
func TestFollowWaits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	file := func(t *testing.T) string { return filepath.Join(t.TempDir(), "calls.db") }
	streams := 0
	stream := func(*testing.T) string { streams++; return fmt.Sprintf("%s/S%d", srv.URL(), streams) }
	for _, tc := range []struct {
		name    string
		journal func(t *testing.T) string
		prepare func(db string)
		waitFor string
	}{
		{"file created later", file, func(string) {}, "waiting for the journal"},
		{"table created later", file, func(db string) { require.NoError(t, os.WriteFile(db, nil, 0o644)) }, "waiting for a call tree"},
		{"a new tree after an ended one", file, func(db string) { callTree(t, db, 1) }, "waiting for a call tree"},
		{"stream created later", stream, func(string) {}, "waiting for the journal"},
		{"a new tree after an ended one on JetStream", stream, func(db string) { callTree(t, db, 1) }, "waiting for a call tree"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := tc.journal(t)
			tc.prepare(db)
			f := startHost(ctx, t, "follow", db)
			nextLine(t, f.stderr, 30*time.Second, "follow's wait", func(l string) bool { return strings.Contains(l, tc.waitFor) })
			tree := callTree(t, db, 2)
			status, lines := f.wait(t)
			require.Equal(t, 0, status)
			assert.Equal(t, []string{tree}, treesOf(lines), "follow showed %q", lines)
			assert.Equal(t, 2, strings.Count(strings.Join(lines, "\n"), `"kind":"output"`))
		})
	}
}

// keepDirect writes a tree of n events in the journal at db from the test
// process: the outermost call's start, n-2 chunks of size bytes of text
// each (full content), and its end.
func keepDirect(t *testing.T, db, tree string, n, size int) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(db)
	require.NoError(t, err)
	defer st.Close()
	text := strings.Repeat("x", size)
	c, err := st.Claim(ctx, tree, "W")
	require.NoError(t, err)
	at := time.Now().UTC()
	var batch []calllog.Event
	for seq := uint64(1); seq <= uint64(n); seq++ {
		e := calllog.Event{Kind: calllog.KindOutput, Tree: tree, Writer: "W", Seq: seq, After: seq - 1, At: at, Call: tree, Tool: "count",
			FrameKind: frame.KindChunk, FrameSeq: seq - 1}
		switch seq {
		case 1:
			e.Kind, e.FrameKind, e.FrameSeq = calllog.KindStarted, 0, 0
		case uint64(n):
			e.Kind, e.FrameKind, e.FrameSeq = calllog.KindCompleted, 0, 0
		default:
			p := frame.MustPayload(map[string]any{"text": text})
			e.Payload = &calllog.Content{Type: "object", Bytes: len(p), Keys: 1, Value: p}
		}
		batch = append(batch, e)
		if len(batch) == 16 || seq == uint64(n) {
			require.NoError(t, st.Keep(ctx, c, batch))
			batch = batch[:0]
		}
	}
}

// TestFollowUnknownTree: follow of a tree the journal does not hold fails
// with status 1 and says so; with --wait it waits for the tree and shows
// it once written.
func TestFollowUnknownTree(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := filepath.Join(t.TempDir(), "calls.db")
	callTree(t, db, 1)
	r := run(t, "", "follow", db, "nosuchtree")
	require.Equal(t, 1, r.Status, r.Stderr)
	assert.Contains(t, r.Stderr, `no tree "nosuchtree"`)
	r = run(t, "", "follow", filepath.Join(t.TempDir(), "missing.db"), "nosuchtree")
	require.Equal(t, 1, r.Status, r.Stderr)
	assert.Contains(t, r.Stderr, "not written yet")

	f := startHost(ctx, t, "follow", "--wait", db, "later")
	nextLine(t, f.stderr, 30*time.Second, "follow's wait", func(l string) bool { return strings.Contains(l, "waiting for tree later") })
	keepDirect(t, db, "later", 4, 10)
	status, lines := f.wait(t)
	require.Equal(t, 0, status)
	assert.Equal(t, []string{"later"}, treesOf(lines))
	assert.Len(t, lines, 4)
}

// TestReadCommandsCreateNothing: replay, follow, asif export, journal list,
// takeover and prune of a missing file create no file; of a missing
// JetStream stream, no stream.
func TestReadCommandsCreateNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "missing.db")
	srv := natstest.Run(t)
	url := srv.URL() + "/MISSING"
	for _, j := range []string{db, url} {
		for _, args := range [][]string{
			{"replay", j, "t"}, {"follow", j, "t"}, {"asif", "export", j, "t"},
			{"journal", "takeover", j, "t"}, {"journal", "prune", j, "--older-than", "1h"},
		} {
			r := run(t, "", args...)
			assert.Equal(t, 1, r.Status, "%v: %s", args, r.Stderr)
			if args[0] == "replay" || args[0] == "asif" { // the journal is missing, not the tree
				assert.Contains(t, r.Stderr, "cannot open the journal", "%v", args)
				assert.NotContains(t, r.Stderr, "no events of tree", "%v", args)
			}
		}
		r := run(t, "", "journal", "list", j)
		assert.Equal(t, 0, r.Status, r.Stderr)
		assert.Empty(t, r.Stdout)
		assert.Contains(t, r.Stderr, "no journal "+j+" written yet: no call trees", "journal list of a missing journal")
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "files made by commands that only read")
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	names := js.StreamNames(context.Background())
	var streams []string
	for n := range names.Name() {
		streams = append(streams, n)
	}
	assert.Empty(t, streams, "streams made by commands that only read")
}

// TestForeignDatabaseRefused: call --journal and journal takeover on
// another application's SQLite file refuse it, and it stays byte for
// byte as it was.
func TestForeignDatabaseRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "other.db")
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT); INSERT INTO orders (item) VALUES ('pen')`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, args := range [][]string{
		{"call", "--journal", path, "count", "--args", `{"n":1}`, "--", childBin},
		{"journal", "takeover", path, "t"}, {"replay", path, "t"}, {"follow", path},
		{"journal", "list", path}, {"journal", "prune", path, "--max-bytes", "1MiB"},
	} {
		r := run(t, "", args...)
		assert.Equal(t, 1, r.Status, "%v", args)
		assert.Contains(t, r.Stderr, "not a Skulk journal", "%v", args)
	}
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(before, after), "the other application's file changed")
}

// listed is one line of journal list --json.
type listed struct {
	Tree    string    `json:"tree"`
	Tool    string    `json:"tool"`
	Start   time.Time `json:"start"`
	State   string    `json:"state"`
	Events  uint64    `json:"events"`
	LastSeq uint64    `json:"last_seq"`
}

// testJournalList lists the trees of journal j (a done count call, then a
// refused one), newest first, with filters.
func testJournalList(t *testing.T, j string) {
	done := callTree(t, j, 2)
	r := run(t, "", "call", "--journal", j, "nope", "--", childBin)
	require.Equal(t, 4, r.Status, r.Stderr)
	refused, ok := treeOfLine(r.Stderr)
	require.True(t, ok)

	r = run(t, "", "journal", "list", j, "--json")
	require.Equal(t, 0, r.Status, r.Stderr)
	var got []listed
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		var x listed
		require.NoError(t, json.Unmarshal([]byte(l), &x), l)
		got = append(got, x)
	}
	require.Len(t, got, 2)
	assert.Equal(t, refused, got[0].Tree)
	assert.Equal(t, "failed", got[0].State)
	assert.Equal(t, "nope", got[0].Tool)
	assert.EqualValues(t, 2, got[0].Events)
	assert.Equal(t, done, got[1].Tree)
	assert.Equal(t, "done", got[1].State)
	assert.Equal(t, "count", got[1].Tool)
	assert.Greater(t, got[1].Events, uint64(4))
	assert.WithinDuration(t, time.Now(), got[1].Start, time.Minute)

	r = run(t, "", "journal", "list", j, "--state", "done")
	require.Equal(t, 0, r.Status, r.Stderr)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	require.Len(t, lines, 1)
	assert.True(t, strings.HasPrefix(lines[0], done+"  count  "), lines[0])
	assert.Contains(t, lines[0], "  done  ")
	r = run(t, "", "journal", "list", j, "--since", "1h", "--state", "running")
	require.Equal(t, 0, r.Status, r.Stderr)
	assert.Empty(t, r.Stdout)
	r = run(t, "", "journal", "list", j, "--until", "1h")
	require.Equal(t, 0, r.Status, r.Stderr)
	assert.Empty(t, r.Stdout, "no tree began more than an hour ago")
	r = run(t, "", "journal", "list", j, "--state", "bogus")
	assert.Equal(t, 2, r.Status)
}

func TestJournalListSQLite(t *testing.T) {
	t.Parallel()
	testJournalList(t, filepath.Join(t.TempDir(), "calls.db"))
}

func TestJournalListJetStream(t *testing.T) {
	t.Parallel()
	testJournalList(t, natstest.Run(t).URL()+"/CALLS")
}

// hwmRoleEnv makes the test binary run the skulk-host command whose
// arguments it holds (a JSON array) in a fresh process, and print the
// process's peak memory (VmHWM from /proc/self/status) on standard error
// as its last line.
const hwmRoleEnv = "SKULK_HOST_TEST_MEASURE"

// runMeasured is the test binary in the measuring role.
func runMeasured(argsJSON string) int {
	var args []string
	if err := json.Unmarshal([]byte(argsJSON), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	code := cli.Run(context.Background(), args, cli.Env{Stdin: os.Stdin, Stdout: io.Discard, Stderr: os.Stderr})
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			fmt.Fprintln(os.Stderr, l)
		}
	}
	return code
}

// peak runs the skulk-host command args in a subprocess (the test binary
// in its measuring role, running the command's own code) and returns its
// status, standard error and peak resident memory (VmHWM) in bytes.
func peak(t *testing.T, args ...string) (int, string, int64) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	aj, err := json.Marshal(args)
	require.NoError(t, err)
	c := exec.Command(exe)
	c.Env = append(os.Environ(), hwmRoleEnv+"="+string(aj))
	var stderr bytes.Buffer
	c.Stderr = &stderr
	err = c.Run()
	status := 0
	if ee, ok := err.(*exec.ExitError); ok {
		status = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	out := strings.TrimSpace(stderr.String())
	i := strings.LastIndex(out, "VmHWM:")
	require.GreaterOrEqual(t, i, 0, "no VmHWM line in %q", out)
	var kb int64
	_, err = fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(out[i:], "VmHWM:")), "%d kB", &kb)
	require.NoError(t, err)
	return status, out[:i], kb << 10
}

// TestReadMemoryBounded: a journal far larger than the read bounds (64
// events of 1 MiB of text in one tree) is replayed and followed in a peak
// memory that does not grow with the tree (a tree a quarter its size
// takes about as much), and asif export refuses it once it reaches its
// bound rather than reading it all; an export window within the bound
// works.
func TestReadMemoryBounded(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("writes an 80 MiB journal")
	}
	if raceBuild {
		t.Skip("the race detector's memory would be measured with the command's")
	}
	db := filepath.Join(t.TempDir(), "big.db")
	keepDirect(t, db, "big", 66, 1<<20)
	keepDirect(t, db, "small", 18, 1<<20)
	keepDirect(t, db, "tiny", 4, 10)
	fi, err := os.Stat(db)
	require.NoError(t, err)
	wal, _ := os.Stat(db + "-wal")
	size := fi.Size()
	if wal != nil {
		size += wal.Size()
	}
	require.Greater(t, size, int64(75<<20))
	const mib = 1 << 20

	for _, cmd := range [][]string{{"replay", db, "tiny"}, {"asif", "export", db, "tiny"}} {
		status, stderr, rss := peak(t, cmd...)
		require.Equal(t, 0, status, stderr)
		t.Logf("%s of a tree of 4 small events: peak RSS %.1f MiB", cmd[0], float64(rss)/(1<<20))
	}
	for _, cmd := range []string{"replay", "follow"} {
		status, stderr, small := peak(t, cmd, db, "small")
		require.Equal(t, 0, status, stderr)
		status, stderr, big := peak(t, cmd, db, "big")
		require.Equal(t, 0, status, stderr)
		t.Logf("%s of a tree of 16 MiB: peak RSS %.1f MiB; of 64 MiB: %.1f MiB", cmd, float64(small)/mib, float64(big)/mib)
		assert.Less(t, big, int64(96*mib), "%s's peak memory", cmd)
		// A reader that held the tree would take 48 MiB more for the big
		// one; the garbage collector's timing moves a peak by a few MiB.
		assert.Less(t, big-small, int64(24*mib), "%s's peak memory grows with the tree", cmd)
	}

	status, stderr, rss := peak(t, "asif", "export", db, "big", "-o", filepath.Join(t.TempDir(), "big.json"))
	require.Equal(t, 1, status, stderr)
	assert.Contains(t, stderr, "more than 16 MiB of events")
	t.Logf("asif export refused: peak RSS %.1f MiB", float64(rss)/mib)
	assert.Less(t, rss, int64(128*mib), "export's peak memory before refusing")

	out := filepath.Join(t.TempDir(), "window.json")
	status, stderr, rss = peak(t, "asif", "export", db, "big", "--until", "9", "-o", out)
	require.Equal(t, 0, status, stderr)
	doc, err := os.Stat(out)
	require.NoError(t, err)
	t.Logf("asif export of 8 MiB of events (a %.1f MiB document): peak RSS %.1f MiB", float64(doc.Size())/mib, float64(rss)/mib)
	assert.Less(t, rss, int64(320*mib), "export's peak memory")
}

// A tree whose host died lists as running; once journal takeover ended
// it, as unknown, which --state unknown and --state ended select.
func TestJournalListTakenOverTree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := filepath.Join(t.TempDir(), "calls.db")
	st, err := sqlitestore.Open(j)
	require.NoError(t, err)
	c, err := st.Claim(ctx, "died", "A")
	require.NoError(t, err)
	require.NoError(t, st.Keep(ctx, c, []calllog.Event{{Kind: calllog.KindStarted, Tree: "died", Writer: "A", Seq: 1,
		At: time.Now(), Call: "died", Tool: "count"}}))
	require.NoError(t, st.Close())

	r := run(t, "", "journal", "list", j, "--state", "running")
	require.Equal(t, 0, r.Status, r.Stderr)
	assert.True(t, strings.HasPrefix(r.Stdout, "died  count  "), r.Stdout)
	r = run(t, "", "journal", "takeover", j, "died")
	require.Equal(t, 0, r.Status, r.Stderr)
	r = run(t, "", "journal", "list", j, "--json")
	require.Equal(t, 0, r.Status, r.Stderr)
	var x listed
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &x), r.Stdout)
	assert.Equal(t, "unknown", x.State)
	for _, state := range []string{"unknown", "ended"} {
		r = run(t, "", "journal", "list", j, "--state", state)
		require.Equal(t, 0, r.Status, r.Stderr)
		assert.Contains(t, r.Stdout, "  unknown  ", "--state %s", state)
	}
	r = run(t, "", "journal", "list", j, "--state", "running")
	require.Equal(t, 0, r.Status, r.Stderr)
	assert.Empty(t, r.Stdout)
}
