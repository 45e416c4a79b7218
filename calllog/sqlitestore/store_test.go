package sqlitestore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/calllogtest"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/replay"
	"github.com/skulkrt/skulk/internal/testnet"
)

// The test binary doubles as a writer process: with roleEnv set it runs
// that role instead of the tests (as os/exec's tests do).
const (
	roleEnv = "CALLLOG_SQLITE_ROLE"
	dbEnv   = "CALLLOG_SQLITE_DB"
	crashID = "crash-tree"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		testnet.QuickRaceExit() // for this binary re-executed as a writer
		goleak.VerifyTestMain(m)
	case "writer":
		os.Exit(runWriter(os.Getenv(dbEnv)))
	case "takeover":
		os.Exit(runTakeover(os.Getenv(dbEnv)))
	default:
		os.Exit(2)
	}
}

func open(t testing.TB, path string, opts ...sqlitestore.Options) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreRules(t *testing.T) {
	calllogtest.TestStore(t, func(t *testing.T) calllog.EventStore {
		return open(t, filepath.Join(t.TempDir(), "calls.db"))
	})
}

func TestFullContentRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "calls.db"))
	c, _ := s.Claim(ctx, "t", "w")
	ev := calllogtest.Events("t", "w", 1, 1)
	ev[0].Payload.Value = frame.MustPayload(map[string]any{"text": "héllo", "n": 3})
	require.NoError(t, s.Keep(ctx, c, ev))
	got, err := s.EventsAfter(ctx, "t", 0, 0)
	require.False(t, err != nil || len(got) != 1, len(got), err)
	if txt, _ := got[0].Payload.Value.Text(); txt != "héllo" {
		require.FailNow(t, fmt.Sprintf("payload value lost: %q", txt))
	}
}

func TestClosedAndReadOnlyStoresAreUnusable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "calls.db")
	s := open(t, path)
	ro := open(t, path, sqlitestore.Options{ReadOnly: true})
	if _, err := ro.Claim(ctx, "t", "w"); !errors.Is(err, calllog.ErrStoreUnusable) {
		require.FailNow(t, fmt.Sprintf("read-only claim = %v", err))
	}
	s.Close()
	if _, err := s.Claim(ctx, "t", "w"); !errors.Is(err, calllog.ErrStoreUnusable) {
		require.FailNow(t, fmt.Sprintf("closed claim = %v", err))
	}
	// A journal over an unusable store refuses required calls at once and
	// stops its writer.
	r, _ := recorder.New(calllog.Options{Journal: &calllog.Journal{Store: s, Required: true}}, nil)
	defer r.Close(ctx)
	if _, err := r.Begin(ctx, recorder.CallInfo{ID: "x"}); !errors.Is(err, calllog.ErrJournalStart) || !errors.Is(err, calllog.ErrStoreUnusable) {
		require.FailNow(t, fmt.Sprintf("Begin over a closed store = %v", err))
	}
}

// runWriter is the first writer process: a program whose steps stream
// output, with a required journal, until it is killed.
func runWriter(path string) int {
	st, err := sqlitestore.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	r, err := recorder.New(calllog.Options{Writer: "A", Journal: &calllog.Journal{Store: st, Required: true, Timeout: 10 * time.Second}}, nil)
	if err != nil {
		return 1
	}
	err = r.Program(ctx, recorder.CallInfo{ID: crashID, Tool: "loop"}, func(ctx context.Context) error {
		for i := 0; ; i++ {
			rec, err := r.Begin(ctx, recorder.CallInfo{ID: fmt.Sprintf("s%d", i), Tool: "count", ToolVersion: "1"})
			if err != nil {
				return err
			}
			rec.Request(recorder.RequestInfo{Child: "c1"})
			for j := range 5 {
				f, _ := frame.NewChunk(rec.ID(), frame.ProviderToCaller, uint64(j+1), frame.MustPayload(map[string]any{"i": j}), nil)
				rec.Output(f)
			}
			if err := rec.End(ctx, recorder.Done(nil)); err != nil {
				return err
			}
			if i == 0 {
				fmt.Println("ready")
			}
		}
	})
	fmt.Fprintln(os.Stderr, "writer stopped:", err)
	return 1
}

// runTakeover is the second writer process: it claims the tree and records
// the outcome it can prove.
func runTakeover(path string) int {
	st, err := sqlitestore.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wrote, err := calllog.TakeOver(ctx, st, crashID, "B")
	if err != nil {
		fmt.Fprintln(os.Stderr, "takeover:", err)
		return 1
	}
	fmt.Println(len(wrote))
	return 0
}

func TestCrashedWriterTakenOverAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "calls.db")

	writer := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	writer.Env = append(os.Environ(), roleEnv+"=writer", dbEnv+"="+path)
	writer.Stderr = os.Stderr
	out, err := writer.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, writer.Start())
	killed := false
	defer func() {
		if !killed {
			writer.Process.Kill()
			writer.Wait()
		}
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.Falsef(t, err != nil || line != "ready\n", "writer said %q, %v", line, err)

	// The follower reads the file from this process, read-only, started
	// before the kill.
	ro := open(t, path, sqlitestore.Options{ReadOnly: true})
	type result struct {
		steps []replay.Step
		err   error
	}
	seen := make(chan int, 1)
	res := make(chan result, 1)
	go func() { // stopped by the tree's end or ctx
		var r result
		for st, err := range replay.Steps(calllog.Follow(ctx, ro, crashID, 0, 20*time.Millisecond)) {
			if err != nil {
				r.err = err
				break
			}
			r.steps = append(r.steps, st)
			if len(r.steps) == 200 {
				seen <- len(r.steps)
			}
		}
		res <- r
	}()
	select {
	case <-seen:
	case r := <-res:
		require.FailNow(t, fmt.Sprintf("follower stopped: %v", r.err))
	}
	// Kill the writer mid-write.
	if err := writer.Process.Kill(); err != nil { // SIGKILL
		require.FailNow(t, fmt.Sprint(err))
	}
	writer.Wait()
	killed = true

	take := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	take.Env = append(os.Environ(), roleEnv+"=takeover", dbEnv+"="+path)
	take.Stderr = os.Stderr
	tout, err := take.Output()
	require.NoError(t, err, "takeover process")
	var wrote int
	fmt.Sscan(strings.TrimSpace(string(tout)), &wrote)
	require.Falsef(t, wrote < 1, "takeover recorded %d outcomes; want at least the program's", wrote)

	r := <-res
	require.NoError(t, r.err)
	// Every kept event, in order, no duplicate, the takeover shown once.
	all, err := ro.EventsAfter(ctx, crashID, 0, 0)
	require.NoError(t, err)
	require.Falsef(t, len(r.steps) != len(all), "follower saw %d events, the store kept %d", len(r.steps), len(all))
	takeovers := 0
	for i, st := range r.steps {
		if st.Event.Seq != all[i].Seq || st.Event.Seq != uint64(i+1) {
			require.FailNow(t, fmt.Sprintf("step %d has seq %d (store: %d)", i, st.Event.Seq, all[i].Seq))
		}
		require.EqualValuesf(t, 0, st.LostFrom, "step %d shows a gap %d..%d in a required journal", i, st.LostFrom, st.LostTo)
		if st.TakenOverFrom != "" {
			takeovers++
			require.Falsef(t, st.TakenOverFrom != "A" || st.Event.Writer != "B", "takeover %q → %q", st.TakenOverFrom, st.Event.Writer)
		}
	}
	require.EqualValuesf(t, 1, takeovers, "%d takeovers shown, want 1", takeovers)
	last := r.steps[len(r.steps)-1].Event
	require.Falsef(t, last.Call != crashID || last.Kind != calllog.KindUnknown || last.Error != nil || last.Writer != "B", "last event = %+v; want the program's unknown end by B", last)
	if got := len(r.steps) - wrote; r.steps[got].Event.Writer != "B" || r.steps[got-1].Event.Writer != "A" {
		require.FailNow(t, "B's events are not exactly the last ones")
	}
	t.Logf("writer A kept %d events before SIGKILL; B recorded %d outcomes", len(all)-wrote, wrote)

	// The first writer, if it came back with its claim, is fenced.
	rw := open(t, path)
	err = rw.Keep(ctx, calllog.Claim{Tree: crashID, Writer: "A", Epoch: 1}, calllogtest.Events(crashID, "A", all[len(all)-1].Seq+1, 1))
	require.ErrorIsf(t, err, calllog.ErrFenced, "old writer's keep = %v, want ErrFenced", err)
}
