package sqlitestore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/calllogtest"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/internal/replay"
)

// foreignDB writes another application's SQLite database at path, with
// the DSN's query q (a journal mode).
func foreignDB(t *testing.T, path, q string) []byte {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+q)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO accounts (name) VALUES ('a'), ('b')`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// TestForeignFileRefusedUntouched: another application's database (in
// rollback or WAL mode, and a file that is not SQLite at all) is refused
// by every mode of Open with ErrNotJournal, and no byte of it changes, nor
// does a file appear beside it.
func TestForeignFileRefusedUntouched(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.db")
	before := foreignDB(t, path, "")
	wal := filepath.Join(dir, "wal.db")
	beforeWAL := foreignDB(t, wal, "?_pragma=journal_mode(WAL)")
	text := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(text, []byte("not a database, just some words of text here\n"), 0o644))
	for _, opts := range []sqlitestore.Options{{}, {ReadOnly: true}, {MustExist: true}} {
		for _, p := range []string{path, wal, text} {
			_, err := sqlitestore.Open(p, opts)
			require.ErrorIs(t, err, sqlitestore.ErrNotJournal, "%s %+v", p, opts)
			assert.ErrorIs(t, err, calllog.ErrStoreUnusable)
		}
	}
	for p, b := range map[string][]byte{path: before, wal: beforeWAL} {
		after, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(b, after), "the foreign database %s changed", filepath.Base(p))
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"app.db", "wal.db", "notes.txt"}, names, "no file appears beside them")
}

// TestJournalNotWrittenYet: a missing file is ErrNotWritten to a reader and
// to MustExist, and is not created; a 0-byte file reads as a journal with
// no tree, and stays 0 bytes; once a writer makes the tables, the same
// reader sees its events (the tables are looked for on each read).
func TestJournalNotWrittenYet(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	for _, opts := range []sqlitestore.Options{{ReadOnly: true}, {MustExist: true}} {
		_, err := sqlitestore.Open(missing, opts)
		require.ErrorIs(t, err, sqlitestore.ErrNotWritten)
		require.ErrorIs(t, err, fs.ErrNotExist)
	}
	_, err := os.Stat(missing)
	require.ErrorIs(t, err, fs.ErrNotExist, "a reader created the file")

	empty := filepath.Join(dir, "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	r, err := sqlitestore.Open(empty, sqlitestore.Options{ReadOnly: true})
	require.NoError(t, err)
	defer r.Close()
	evs, err := r.EventsAfter(ctx, "t", 0, 0)
	require.NoError(t, err)
	assert.Empty(t, evs)
	trees, err := r.ListTrees(ctx)
	require.NoError(t, err)
	assert.Empty(t, trees)
	m, err := sqlitestore.Open(empty, sqlitestore.Options{MustExist: true})
	require.NoError(t, err)
	_, err = calllog.TakeOver(ctx, m, "t", "B")
	require.ErrorIs(t, err, calllog.ErrNoTree)
	require.NoError(t, m.Close())
	fi, err := os.Stat(empty)
	require.NoError(t, err)
	require.Zero(t, fi.Size(), "a reader or a takeover wrote to the empty file")

	w := open(t, empty)
	c, err := w.Claim(ctx, "t", "A")
	require.NoError(t, err)
	require.NoError(t, w.Keep(ctx, c, calllogtest.Events("t", "A", 1, 3)))
	evs, err = r.EventsAfter(ctx, "t", 0, 0)
	require.NoError(t, err)
	assert.Len(t, evs, 3)
}

// TestReaderWaitsForALockedFile: a reader that opens the file while a
// writer holds it locked (as one does while it creates the journal: a
// follower started before the first call meets that moment) waits for the
// lock, up to the busy timeout, instead of failing with SQLITE_BUSY.
func TestReaderWaitsForALockedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.db")
	require.NoError(t, open(t, path).Close())
	// Back to rollback mode, where a writer's exclusive lock keeps
	// readers out, and locked for 300 ms.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(DELETE)")
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(context.Background())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(context.Background(), `BEGIN EXCLUSIVE`)
	require.NoError(t, err)
	unlocked := make(chan error, 1)
	start := time.Now()
	go func() { // ends after 300 ms; waited for below
		time.Sleep(300 * time.Millisecond)
		_, err := conn.ExecContext(context.Background(), `COMMIT`)
		unlocked <- err
	}()
	r, err := sqlitestore.Open(path, sqlitestore.Options{ReadOnly: true, BusyTimeout: 10 * time.Second})
	took := time.Since(start)
	require.NoError(t, <-unlocked)
	require.NoError(t, err, "opened %v after the lock was taken", took)
	require.NoError(t, r.Close())
	assert.GreaterOrEqual(t, took, 300*time.Millisecond, "opened while the file was locked")
}

// TestCorruptEventInTheMiddle: one event of a tree is not the JSON form
// (malformed JSON) and another is an unknown kind: each is a
// *CorruptEventError matching ErrFormat, the events around them are read,
// a follower shows them as lost and reaches the tree's end, Replay counts
// them, and the tree can be taken over.
func TestCorruptEventInTheMiddle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "calls.db")
	s := open(t, path)
	c, err := s.Claim(ctx, "t", "A")
	require.NoError(t, err)
	evs := calllogtest.Events("t", "A", 1, 6)
	evs[0].Kind = calllog.KindStarted
	// a step started at 2 that never ends, so a takeover has work to do
	evs[1].Kind, evs[1].Call, evs[1].Parent = calllog.KindStarted, "s1", "t"
	require.NoError(t, s.Keep(ctx, c, evs))
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE calllog_events SET event = CAST('{"format":1,"kind":' AS BLOB) WHERE seq = 3`)
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE calllog_events SET event = CAST(replace(CAST(event AS TEXT), '"output"', '"outburst"') AS BLOB) WHERE seq = 5`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	got, err := s.EventsAfter(ctx, "t", 0, 0)
	var ce *calllog.CorruptEventError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, calllog.ErrFormat)
	assert.EqualValues(t, 3, ce.Seq)
	assert.Len(t, got, 2)
	got, err = s.EventsAfter(ctx, "t", 3, 0)
	require.ErrorIs(t, err, calllog.ErrFormat)
	require.ErrorAs(t, err, &ce)
	assert.EqualValues(t, 5, ce.Seq)
	assert.Len(t, got, 1)

	r, err := replay.FromStore(ctx, s, "t", &replay.Replayer{})
	require.NoError(t, err)
	assert.EqualValues(t, 2, r.Corrupt)
	assert.EqualValues(t, 4, r.Events)
	assert.Zero(t, r.Lost)

	kept, err := calllog.TakeOver(ctx, s, "t", "B")
	require.NoError(t, err)
	require.Len(t, kept, 2, "the step and the tree, open in what the log shows")
	assert.Equal(t, "s1", kept[0].Call)
	assert.Equal(t, "t", kept[1].Call)

	var shown []uint64
	var corrupt []uint64
	for st, err := range replay.Steps(calllog.Follow(ctx, s, "t", 0, 10*time.Millisecond)) {
		if errors.As(err, &ce) {
			corrupt = append(corrupt, ce.Seq)
			continue
		}
		require.NoError(t, err)
		if st.Event.Seq == 4 {
			assert.EqualValues(t, 3, st.LostFrom)
			assert.EqualValues(t, 3, st.LostTo)
			assert.EqualValues(t, 2, st.Event.After)
		}
		shown = append(shown, st.Event.Seq)
	}
	assert.Equal(t, []uint64{3, 5}, corrupt)
	assert.Equal(t, []uint64{1, 2, 4, 6, 7, 8}, shown)
}

// TestListAndPrune: ListTrees gives each tree newest first with its tool,
// times, event count, size and end; Prune by size removes the oldest whole
// trees (never the newest), by age those whose last event is old, and a
// pruned tree is gone to readers and fences its writer.
func TestListAndPrune(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "calls.db"))
	old := time.Now().Add(-48 * time.Hour)
	var claims []calllog.Claim
	for i, id := range []string{"t1", "t2", "t3"} {
		c, err := s.Claim(ctx, id, "A")
		require.NoError(t, err)
		evs := calllogtest.Events(id, "A", 1, 4)
		evs[0].Kind = calllog.KindStarted
		for j := range evs {
			if i == 0 {
				evs[j].At = old.Add(time.Duration(j) * time.Millisecond)
			} else {
				evs[j].At = time.Now()
			}
		}
		if i < 2 {
			evs[3].Kind = calllog.KindCompleted
		}
		require.NoError(t, s.Keep(ctx, c, evs))
		claims = append(claims, c)
	}
	latest, err := s.LatestTree(ctx)
	require.NoError(t, err)
	assert.Equal(t, "t3", latest, "the last tree claimed")
	trees, err := s.ListTrees(ctx)
	require.NoError(t, err)
	require.Len(t, trees, 3)
	assert.Equal(t, []string{"t3", "t2", "t1"}, []string{trees[0].Tree, trees[1].Tree, trees[2].Tree})
	assert.Equal(t, "count", trees[0].Tool)
	assert.EqualValues(t, 4, trees[0].Events)
	assert.EqualValues(t, 4, trees[0].LastSeq)
	assert.Positive(t, trees[0].Bytes)
	assert.Zero(t, trees[0].End, "t3 is running")
	assert.Equal(t, calllog.KindCompleted, trees[1].End)
	assert.WithinDuration(t, old, trees[2].Start, time.Second)

	p, err := s.Prune(ctx, sqlitestore.Retention{MaxAge: 24 * time.Hour})
	require.NoError(t, err)
	assert.EqualValues(t, 1, p.Trees)
	assert.EqualValues(t, 4, p.Events)
	_, err = replay.FromStore(ctx, s, "t1", &replay.Replayer{})
	require.ErrorIs(t, err, calllog.ErrNoTree)
	require.ErrorIs(t, s.Keep(ctx, claims[0], calllogtest.Events("t1", "A", 5, 1)), calllog.ErrFenced)

	p, err = s.Prune(ctx, sqlitestore.Retention{MaxBytes: 1})
	require.NoError(t, err)
	assert.EqualValues(t, 1, p.Trees, "t2 goes, t3 (the newest) stays")
	trees, err = s.ListTrees(ctx)
	require.NoError(t, err)
	require.Len(t, trees, 1)
	assert.Equal(t, "t3", trees[0].Tree)

	empty := open(t, filepath.Join(t.TempDir(), "empty.db"))
	latest, err = empty.LatestTree(ctx)
	require.NoError(t, err)
	assert.Empty(t, latest, "no tree yet")
}

// TestRetentionOption: Options.Retention prunes at Open: a tree whose last
// event is older than MaxAge is gone once the store is opened with it.
func TestRetentionOption(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "calls.db")
	s := open(t, path)
	for _, tc := range []struct {
		tree string
		at   time.Time
	}{{"old", time.Now().Add(-72 * time.Hour)}, {"new", time.Now()}} {
		c, err := s.Claim(ctx, tc.tree, "A")
		require.NoError(t, err)
		evs := calllogtest.Events(tc.tree, "A", 1, 2)
		for i := range evs {
			evs[i].At = tc.at
		}
		evs[1].Kind = calllog.KindCompleted // ended: prunable
		require.NoError(t, s.Keep(ctx, c, evs))
	}
	require.NoError(t, s.Close())
	s = open(t, path, sqlitestore.Options{Retention: sqlitestore.Retention{MaxAge: 24 * time.Hour}})
	trees, err := s.Trees(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"new"}, trees)
}

// TestPruneSparesRunningTrees: a tree that has not ended (its outermost
// call has no end) is never pruned, by size or by age, however old: its
// writer may still be keeping its events. Once it ends, it is.
func TestPruneSparesRunningTrees(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "calls.db"))
	old := time.Now().Add(-48 * time.Hour)
	claims := map[string]calllog.Claim{}
	for _, id := range []string{"running", "ended", "newest"} {
		c, err := s.Claim(ctx, id, "A")
		require.NoError(t, err)
		evs := calllogtest.Events(id, "A", 1, 3)
		evs[0].Kind = calllog.KindStarted
		for j := range evs {
			evs[j].At = old
		}
		if id != "running" {
			evs[2].Kind = calllog.KindCompleted
		}
		require.NoError(t, s.Keep(ctx, c, evs))
		claims[id] = c
	}

	p, err := s.Prune(ctx, sqlitestore.Retention{MaxBytes: 1})
	require.NoError(t, err)
	assert.EqualValues(t, 1, p.Trees, "only the older ended tree goes")
	trees, err := s.Trees(ctx)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"running", "newest"}, trees)
	// Its writer is not fenced: it keeps its end.
	end := calllogtest.Events("running", "A", 4, 1)
	end[0].Kind = calllog.KindCompleted
	end[0].At = old

	p, err = s.Prune(ctx, sqlitestore.Retention{MaxAge: time.Hour})
	require.NoError(t, err)
	assert.EqualValues(t, 1, p.Trees, "the newest goes by age, the running one stays")
	trees, err = s.Trees(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"running"}, trees)

	require.NoError(t, s.Keep(ctx, claims["running"], end))
	p, err = s.Prune(ctx, sqlitestore.Retention{MaxAge: time.Hour})
	require.NoError(t, err)
	assert.EqualValues(t, 1, p.Trees, "ended, it goes")
}
