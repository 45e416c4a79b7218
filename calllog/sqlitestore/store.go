// Package sqlitestore is an embedded durable calllog.EventStore: one SQLite
// file (through the pure-Go modernc.org/sqlite) in WAL mode, which several
// processes on one machine can read while one writes. Every operation is
// one short transaction; writers take the write lock at BEGIN (IMMEDIATE)
// and wait for a busy file up to the busy timeout.
//
// The file is marked as a Skulk journal (SQLite's application_id, and its
// format in user_version); Open refuses, untouched, a file that is not one
// (ErrNotJournal). Readers page by bytes (storedevent.PageBytes); whole
// trees are listed (ListTrees) and pruned by age or size (Prune,
// Options.Retention).
//
//	st, err := sqlitestore.Open("calls.db")
//	defer st.Close()
//	h, err := host.Start(ctx, host.Config{Command: cmd,
//		CallLog: calllog.Options{Journal: &calllog.Journal{Store: st}}})
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/internal/storedevent"
)

// defaultBusyTimeout is how long an operation waits for another process's
// write lock when Options.BusyTimeout is 0.
const defaultBusyTimeout = 5 * time.Second

// The file's marks (docs/events.md, "The SQLite store"): SQLite's
// application_id says the file is a Skulk journal, its user_version the
// format of its tables.
const (
	applicationID = 0x536b6c6b // "Sklk"
	formatVersion = 1
)

// Errors of Open.
var (
	// ErrNotJournal: the file is not a Skulk journal (another
	// application's SQLite database, or not SQLite at all). It is left as
	// it was. It matches calllog.ErrStoreUnusable too.
	ErrNotJournal = errors.New("sqlitestore: the file is not a Skulk journal")
	// ErrFormatVersion: the file is a Skulk journal of a later format
	// than this store reads. It matches calllog.ErrStoreUnusable too.
	ErrFormatVersion = errors.New("sqlitestore: the journal's format is newer than this store reads")
	// ErrNotWritten: no journal has been written at the path yet (the
	// file is missing), and Options.ReadOnly or Options.MustExist forbid
	// creating it. It matches fs.ErrNotExist too.
	ErrNotWritten = errors.New("sqlitestore: no journal written at the path yet")
)

// Options configures Open. The zero value is a read-write store that waits
// up to 5 s for another process's lock, creating the file when missing.
type Options struct {
	// BusyTimeout bounds the wait for another process's lock; 0 means 5 s.
	BusyTimeout time.Duration
	// ReadOnly opens the file for reading (followers); Claim and Keep then
	// fail with calllog.ErrStoreUnusable. Nothing is written to the file,
	// and a missing file is ErrNotWritten. A 0-byte file, or one whose
	// tables are not made yet, is a journal not written yet: it holds no
	// tree until a writer makes them.
	ReadOnly bool
	// MustExist refuses to create the journal: a missing file is
	// ErrNotWritten, and the tables of an empty one are not made (it
	// holds no tree). For commands that only act on trees kept already
	// (a takeover).
	MustExist bool
	// Retention prunes whole trees by age or size (Store.Prune): at Open
	// and then at most once a minute as new trees are kept. The zero
	// value keeps every tree. Not used when ReadOnly.
	Retention Retention
}

// Store is a calllog.EventStore in one SQLite file. It is safe for
// concurrent use; Close it when done.
type Store struct {
	db        *sql.DB
	closed    atomic.Bool
	ro        bool
	hasTables atomic.Bool // the journal's tables exist (checked until they do)

	retention Retention
	pruneMu   sync.Mutex // guards lastPrune
	lastPrune time.Time
}

var _ calllog.EventStore = (*Store)(nil)

const schema = `
CREATE TABLE IF NOT EXISTS calllog_trees (
	tree   TEXT PRIMARY KEY,
	writer TEXT NOT NULL,
	epoch  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS calllog_events (
	tree   TEXT NOT NULL,
	seq    INTEGER NOT NULL,
	writer TEXT NOT NULL,
	event  BLOB NOT NULL,
	PRIMARY KEY (tree, seq)
) WITHOUT ROWID;`

// rowsPerInsert bounds the rows of one INSERT statement (4 variables
// each, far below SQLite's limit of 32,766).
const rowsPerInsert = 128

const (
	insertHead = `INSERT INTO calllog_events (tree, seq, writer, event) VALUES `
	insertTail = ` ON CONFLICT (tree, seq) DO NOTHING`
)

// fileState is what inspect found in a file.
type fileState int

const (
	fileMissing fileState = iota // no file
	fileEmpty                    // 0 bytes, or SQLite with no table at all
	fileJournal                  // a Skulk journal (marked, or with its tables)
)

// dsn is the data source name of path with the query q.
func dsn(path string, q url.Values) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// inspect says what the file at path holds, reading it without writing:
// a Skulk journal (marked, or unmarked with both of its tables and
// nothing else's), an empty file, or something else (ErrNotJournal). It
// waits up to busy for a writer that holds the file locked, as one does
// while it creates the journal's tables.
func inspect(ctx context.Context, path string, busy time.Duration) (fileState, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fileMissing, nil
	case err != nil:
		return 0, fmt.Errorf("sqlitestore: open: %w", err)
	case !fi.Mode().IsRegular():
		return 0, fmt.Errorf("%w: %w: not a regular file", ErrNotJournal, calllog.ErrStoreUnusable)
	case fi.Size() == 0:
		return fileEmpty, nil
	}
	q := url.Values{}
	q.Add("mode", "ro")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	if walAlone(path) {
		// A database in WAL mode with no WAL beside it: the file alone is
		// the database (only a checkpoint, which needs a WAL, writes it),
		// so it is read as immutable, which makes SQLite open no -wal or
		// -shm file beside it; a read-only connection otherwise creates
		// both and leaves them. A database in rollback mode creates
		// nothing when read, and is read with its locks.
		q.Add("immutable", "1")
	}
	db, err := sql.Open("sqlite", dsn(path, q))
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: open: %w", err)
	}
	defer db.Close()
	var app, version int64
	if err := db.QueryRowContext(ctx, `PRAGMA application_id`).Scan(&app); err != nil {
		return 0, notJournal(err)
	}
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return 0, notJournal(err)
	}
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type IN ('table', 'view')`)
	if err != nil {
		return 0, notJournal(err)
	}
	defer rows.Close()
	var ours, others int
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return 0, notJournal(err)
		}
		if name == "calllog_trees" || name == "calllog_events" {
			ours++
		} else {
			others++
		}
	}
	if err := rows.Err(); err != nil {
		return 0, notJournal(err)
	}
	switch {
	case app == applicationID && version > formatVersion:
		return 0, fmt.Errorf("%w: %w: format %d, this store reads %d", ErrFormatVersion, calllog.ErrStoreUnusable, version, formatVersion)
	case app == applicationID:
		return fileJournal, nil
	case app != 0:
		return 0, fmt.Errorf("%w: %w: another application's database (application_id)", ErrNotJournal, calllog.ErrStoreUnusable)
	case ours == 2 && others == 0:
		return fileJournal, nil // written before the marks: stamped when opened read-write
	case ours == 0 && others == 0:
		return fileEmpty, nil
	}
	return 0, fmt.Errorf("%w: %w: it holds tables of another application", ErrNotJournal, calllog.ErrStoreUnusable)
}

// walAlone reports whether the file at path is an SQLite database in WAL
// mode (its header's read and write versions are 2) with no WAL file
// beside it.
func walAlone(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var h [20]byte
	if _, err := io.ReadFull(f, h[:]); err != nil || string(h[:16]) != "SQLite format 3\x00" || h[18] != 2 || h[19] != 2 {
		return false
	}
	_, err = os.Lstat(path + "-wal")
	return errors.Is(err, fs.ErrNotExist)
}

// notJournal classes an error met reading a file's header and tables: a
// file SQLite cannot read as a database is not a journal.
func notJournal(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_NOTADB {
		return fmt.Errorf("%w: %w: not an SQLite database", ErrNotJournal, calllog.ErrStoreUnusable)
	}
	return fmt.Errorf("sqlitestore: open: %w", err)
}

// Open opens the store in the file at path, creating it when missing
// (unless ReadOnly or MustExist). A file that is not a Skulk journal is
// refused with ErrNotJournal and left untouched; a journal of a later
// format with ErrFormatVersion.
func Open(path string, opts ...Options) (*Store, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	busy := o.BusyTimeout
	if busy <= 0 {
		busy = defaultBusyTimeout
	}
	// The look at the file and the rest of Open have a bound each, so
	// that a wait for a writer's lock in the first leaves the second its
	// whole busy timeout.
	bound := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), busy+time.Second)
	}
	ictx, icancel := bound()
	state, err := inspect(ictx, path, busy)
	icancel()
	if err != nil {
		return nil, err
	}
	ctx, cancel := bound()
	defer cancel()
	if state == fileMissing && (o.ReadOnly || o.MustExist) {
		return nil, fmt.Errorf("%w: %w", ErrNotWritten, fs.ErrNotExist)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_txlock", "immediate")
	if o.ReadOnly {
		q.Add("mode", "ro")
	} else if state == fileJournal || !o.MustExist {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
	}
	db, err := sql.Open("sqlite", dsn(path, q))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open: %w", err)
	}
	if !o.ReadOnly {
		// One connection: this process's writes are serialised in Go rather
		// than in SQLite's busy handler, whose sleeps are coarse; the
		// transactions are short, and other processes read the WAL file
		// concurrently all the same.
		db.SetMaxOpenConns(1)
	}
	s := &Store{db: db, ro: o.ReadOnly}
	switch {
	case o.ReadOnly || (o.MustExist && state != fileJournal):
		// Nothing is written: the tables are looked for on each read
		// until a writer has made them.
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("sqlitestore: open: %w", err)
		}
		if state != fileJournal {
			s.ro = true // a takeover of a journal not written yet: no tree to claim
		}
	default:
		stamp := fmt.Sprintf("PRAGMA application_id = %d; PRAGMA user_version = %d;", applicationID, formatVersion)
		if _, err := db.ExecContext(ctx, schema+stamp); err != nil {
			db.Close()
			return nil, fmt.Errorf("sqlitestore: create schema: %w", err)
		}
		s.hasTables.Store(true)
		s.retention = o.Retention
		if !o.Retention.zero() {
			if _, err := s.Prune(ctx, o.Retention); err != nil {
				db.Close()
				return nil, err
			}
		}
	}
	return s, nil
}

// tables reports whether the journal's tables exist (a store opened
// read-only on a journal not written yet has none until a writer makes
// them).
func (s *Store) tables(ctx context.Context) (bool, error) {
	if s.hasTables.Load() {
		return true, nil
	}
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN ('calllog_trees', 'calllog_events')`).Scan(&n)
	if err != nil {
		return false, s.classify("read", err)
	}
	if n == 2 {
		s.hasTables.Store(true)
	}
	return n == 2, nil
}

// Close closes the store; later calls fail with calllog.ErrStoreUnusable.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.db.Close()
}

// classify wraps errors that make the store unusable with
// calllog.ErrStoreUnusable; others (busy, context) are returned as they
// are, to be sent again.
func (s *Store) classify(op string, err error) error {
	if err == nil {
		return nil
	}
	if s.closed.Load() || errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("sqlitestore: %s: %w: closed", op, calllog.ErrStoreUnusable)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_READONLY,
			sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH:
			return fmt.Errorf("sqlitestore: %s: %w: %w", op, calllog.ErrStoreUnusable, err)
		}
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
}

func (s *Store) usable(op string) error {
	if s.closed.Load() {
		return fmt.Errorf("sqlitestore: %s: %w: closed", op, calllog.ErrStoreUnusable)
	}
	if s.ro {
		return fmt.Errorf("sqlitestore: %s: %w: opened read-only", op, calllog.ErrStoreUnusable)
	}
	return nil
}

// Claim implements calllog.EventStore.
func (s *Store) Claim(ctx context.Context, tree, writer string) (calllog.Claim, error) {
	if err := s.usable("claim"); err != nil {
		return calllog.Claim{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return calllog.Claim{}, s.classify("claim", err)
	}
	defer tx.Rollback()
	var epoch uint64
	err = tx.QueryRowContext(ctx, `INSERT INTO calllog_trees (tree, writer, epoch) VALUES (?, ?, 1)
		ON CONFLICT (tree) DO UPDATE SET writer = excluded.writer, epoch = epoch + 1
		RETURNING epoch`, tree, writer).Scan(&epoch)
	if err != nil {
		return calllog.Claim{}, s.classify("claim", err)
	}
	var last sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(seq) FROM calllog_events WHERE tree = ?`, tree).Scan(&last); err != nil {
		return calllog.Claim{}, s.classify("claim", err)
	}
	if err := tx.Commit(); err != nil {
		return calllog.Claim{}, s.classify("claim", err)
	}
	return calllog.Claim{Tree: tree, Writer: writer, Epoch: epoch, Last: uint64(last.Int64)}, nil
}

// Keep implements calllog.EventStore: one transaction that checks the claim
// and inserts the events not kept yet.
func (s *Store) Keep(ctx context.Context, c calllog.Claim, events []calllog.Event) error {
	return s.keep(ctx, "keep", c, events, func(tx *sql.Tx) error {
		var writer string
		var epoch uint64
		err := tx.QueryRowContext(ctx, `SELECT writer, epoch FROM calllog_trees WHERE tree = ?`, c.Tree).Scan(&writer, &epoch)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && (writer != c.Writer || epoch != c.Epoch)) {
			return calllog.ErrFenced
		}
		return err
	})
}

// KeepNew implements calllog.EventStore's optional KeepNew: the claim of a new tree and its
// first events in one transaction.
func (s *Store) KeepNew(ctx context.Context, tree, writer string, events []calllog.Event) (calllog.Claim, error) {
	c := calllog.Claim{Tree: tree, Writer: writer, Epoch: 1}
	err := s.keep(ctx, "keep new", c, events, func(tx *sql.Tx) error {
		var w string
		var epoch uint64
		err := tx.QueryRowContext(ctx, `SELECT writer, epoch FROM calllog_trees WHERE tree = ?`, tree).Scan(&w, &epoch)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.ExecContext(ctx, `INSERT INTO calllog_trees (tree, writer, epoch) VALUES (?, ?, 1)`, tree, writer)
			return err
		case err != nil:
			return err
		case w != writer:
			return calllog.ErrTreeExists
		}
		c.Epoch = epoch // this writer's own claim: a retry
		return nil
	})
	if err != nil {
		return calllog.Claim{}, err
	}
	s.pruneDue(ctx)
	return c, nil
}

// keep inserts events in one transaction after check (the claim's rule)
// passes.
func (s *Store) keep(ctx context.Context, op string, c calllog.Claim, events []calllog.Event, check func(*sql.Tx) error) error {
	if err := s.usable(op); err != nil {
		return err
	}
	if err := storedevent.CheckBatch(c, events); err != nil {
		return err
	}
	rows := make([][]byte, len(events))
	for i, e := range events {
		b, err := e.MarshalJSON() // not json.Marshal: that would check and copy the output again
		if err != nil {
			return fmt.Errorf("sqlitestore: %s: %w", op, err)
		}
		rows[i] = b
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.classify(op, err)
	}
	defer tx.Rollback()
	if err := check(tx); err != nil {
		if errors.Is(err, calllog.ErrFenced) || errors.Is(err, calllog.ErrTreeExists) {
			return err
		}
		return s.classify(op, err)
	}
	for len(rows) > 0 {
		n := min(len(rows), rowsPerInsert)
		q := insertHead + strings.Repeat("(?, ?, ?, ?), ", n-1) + "(?, ?, ?, ?)" + insertTail
		args := make([]any, 0, 4*n)
		for i := range n {
			args = append(args, c.Tree, int64(events[i].Seq), events[i].Writer, rows[i])
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return s.classify(op, err)
		}
		rows, events = rows[n:], events[n:]
	}
	return s.classify(op, tx.Commit())
}

// EventsAfter implements calllog.EventStore. It reads without a write lock,
// so followers never hold up the writer. A page ends once its events'
// stored size reaches storedevent.PageBytes; an event larger than
// storedevent.MaxEventBytes is not read (a *calllog.CorruptEventError, as
// for an event that is not the event JSON form).
func (s *Store) EventsAfter(ctx context.Context, tree string, after uint64, limit int) ([]calllog.Event, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("sqlitestore: events after: %w: closed", calllog.ErrStoreUnusable)
	}
	if ok, err := s.tables(ctx); !ok {
		return nil, err
	}
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.db.QueryContext(ctx, `SELECT seq, length(event), CASE WHEN length(event) <= ? THEN event END
		FROM calllog_events WHERE tree = ? AND seq > ? ORDER BY seq LIMIT ?`,
		storedevent.MaxEventBytes, tree, int64(after), limit)
	if err != nil {
		return nil, s.classify("events after", err)
	}
	defer rows.Close()
	var out []calllog.Event
	size := 0
	for size < storedevent.PageBytes && rows.Next() {
		var (
			seq int64
			n   int
			b   sql.RawBytes // decoded before the next row: no copy kept
		)
		if err := rows.Scan(&seq, &n, &b); err != nil {
			return nil, s.classify("events after", err)
		}
		if n > storedevent.MaxEventBytes {
			return out, &calllog.CorruptEventError{Seq: uint64(seq), Err: storedevent.ErrTooLarge}
		}
		e, err := storedevent.Decode(b)
		if err != nil {
			return out, &calllog.CorruptEventError{Seq: uint64(seq), Err: err}
		}
		out = append(out, e)
		size += n
	}
	return out, s.classify("events after", rows.Err())
}

// LatestTree returns the id of the tree whose first claim is the latest
// in the file, or "" when there is none (a journal not written yet
// included): one row read, whatever the number of trees, so a follower
// waiting for the next tree may ask it at every poll.
func (s *Store) LatestTree(ctx context.Context) (string, error) {
	if s.closed.Load() {
		return "", fmt.Errorf("sqlitestore: latest tree: %w: closed", calllog.ErrStoreUnusable)
	}
	if ok, err := s.tables(ctx); !ok {
		return "", err
	}
	var tree string
	err := s.db.QueryRowContext(ctx, `SELECT tree FROM calllog_trees ORDER BY rowid DESC LIMIT 1`).Scan(&tree)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return tree, s.classify("latest tree", err)
}

// Trees lists the ids of the trees in the store, in the order of their
// first claim; LatestTree reads only the last.
func (s *Store) Trees(ctx context.Context) ([]string, error) {
	if ok, err := s.tables(ctx); !ok {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT tree FROM calllog_trees ORDER BY rowid`)
	if err != nil {
		return nil, s.classify("trees", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, s.classify("trees", err)
		}
		out = append(out, t)
	}
	return out, s.classify("trees", rows.Err())
}
