// Package sqlitestore is an embedded durable calllog.EventStore: one SQLite
// file (through the pure-Go modernc.org/sqlite) in WAL mode, which several
// processes on one machine can read while one writes. Every operation is
// one short transaction; writers take the write lock at BEGIN (IMMEDIATE)
// and wait for a busy file up to the busy timeout.
//
//	st, err := sqlitestore.Open("calls.db")
//	defer st.Close()
//	h, err := host.Start(ctx, host.Config{Command: cmd,
//		CallLog: calllog.Options{Journal: &calllog.Journal{Store: st}}})
package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/skulkrt/skulk/calllog"
)

// defaultBusyTimeout is how long an operation waits for another process's
// write lock when Options.BusyTimeout is 0.
const defaultBusyTimeout = 5 * time.Second

// Options configures Open. The zero value is a read-write store that waits
// up to 5 s for another process's lock.
type Options struct {
	// BusyTimeout bounds the wait for another process's lock; 0 means 5 s.
	BusyTimeout time.Duration
	// ReadOnly opens the file for reading (followers); Claim and Keep then
	// fail with calllog.ErrStoreUnusable. The file must exist.
	ReadOnly bool
}

// Store is a calllog.EventStore in one SQLite file. It is safe for
// concurrent use; Close it when done.
type Store struct {
	db     *sql.DB
	closed atomic.Bool
	ro     bool
}

var (
	_ calllog.EventStore       = (*Store)(nil)
	_ calllog.FirstBatchKeeper = (*Store)(nil)
)

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

// Open opens (creating when needed, unless read-only) the store in the file
// at path.
func Open(path string, opts ...Options) (*Store, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	busy := o.BusyTimeout
	if busy <= 0 {
		busy = defaultBusyTimeout
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_txlock", "immediate")
	if o.ReadOnly {
		q.Add("mode", "ro")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
	}
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
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
	ctx, cancel := context.WithTimeout(context.Background(), busy+time.Second)
	defer cancel()
	if !o.ReadOnly {
		if _, err := db.ExecContext(ctx, schema); err != nil {
			db.Close()
			return nil, fmt.Errorf("sqlitestore: create schema: %w", err)
		}
	} else if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: open: %w", err)
	}
	return s, nil
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

// KeepNew implements calllog.FirstBatchKeeper: the claim of a new tree and its
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
	return c, nil
}

// keep inserts events in one transaction after check (the claim's rule)
// passes.
func (s *Store) keep(ctx context.Context, op string, c calllog.Claim, events []calllog.Event, check func(*sql.Tx) error) error {
	if err := s.usable(op); err != nil {
		return err
	}
	if err := c.CheckBatch(events); err != nil {
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
// so followers never hold up the writer.
func (s *Store) EventsAfter(ctx context.Context, tree string, after uint64, limit int) ([]calllog.Event, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("sqlitestore: events after: %w: closed", calllog.ErrStoreUnusable)
	}
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.db.QueryContext(ctx, `SELECT event FROM calllog_events WHERE tree = ? AND seq > ? ORDER BY seq LIMIT ?`,
		tree, int64(after), limit)
	if err != nil {
		return nil, s.classify("events after", err)
	}
	defer rows.Close()
	var out []calllog.Event
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, s.classify("events after", err)
		}
		var e calllog.Event
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("sqlitestore: events after: %w", err)
		}
		out = append(out, e)
	}
	return out, s.classify("events after", rows.Err())
}

// Trees lists the ids of the trees in the store, in the order of their
// first claim (for tools such as a follow command that picks the latest).
func (s *Store) Trees(ctx context.Context) ([]string, error) {
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
