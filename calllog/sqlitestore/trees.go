package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/internal/storedevent"
)

// listQuery reads each tree's first and last kept event with SQLite's
// JSON functions (an unreadable event gives NULLs, not an error), newest
// tree first.
const listQuery = `
WITH t AS (
	SELECT rowid AS r, tree,
		(SELECT event FROM calllog_events e WHERE e.tree = calllog_trees.tree ORDER BY seq LIMIT 1) AS fe,
		(SELECT event FROM calllog_events e WHERE e.tree = calllog_trees.tree ORDER BY seq DESC LIMIT 1) AS le,
		(SELECT seq FROM calllog_events e WHERE e.tree = calllog_trees.tree ORDER BY seq DESC LIMIT 1) AS ls,
		(SELECT count(*) FROM calllog_events e WHERE e.tree = calllog_trees.tree) AS n,
		(SELECT coalesce(sum(length(event)), 0) FROM calllog_events e WHERE e.tree = calllog_trees.tree) AS b
	FROM calllog_trees WHERE ? = '' OR tree = ?)
SELECT tree, coalesce(ls, 0), n, b,
	CASE WHEN json_valid(fe) THEN json_extract(fe, '$.tool') END,
	CASE WHEN json_valid(fe) THEN json_extract(fe, '$.program') END,
	CASE WHEN json_valid(fe) THEN json_extract(fe, '$.at') END,
	CASE WHEN json_valid(le) THEN json_extract(le, '$.at') END,
	CASE WHEN json_valid(le) THEN json_extract(le, '$.kind') END,
	CASE WHEN json_valid(le) THEN json_extract(le, '$.call') END
FROM t ORDER BY r DESC`

// ListTrees returns every tree in the file, newest first (by its first
// claim).
func (s *Store) ListTrees(ctx context.Context) ([]calllog.TreeInfo, error) {
	return s.list(ctx, "")
}

// TreeInfo describes one tree kept in the store; calllog.ErrNoTree when
// the store has no event of it.
func (s *Store) TreeInfo(ctx context.Context, tree string) (calllog.TreeInfo, error) {
	if tree == "" {
		return calllog.TreeInfo{}, calllog.ErrNoTree
	}
	l, err := s.list(ctx, tree)
	if err != nil {
		return calllog.TreeInfo{}, err
	}
	if len(l) == 0 || l[0].Events == 0 {
		return calllog.TreeInfo{}, calllog.ErrNoTree
	}
	return l[0], nil
}

// list lists every tree, or only the tree named when it is not "".
func (s *Store) list(ctx context.Context, only string) ([]calllog.TreeInfo, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("sqlitestore: list trees: %w: closed", calllog.ErrStoreUnusable)
	}
	if ok, err := s.tables(ctx); !ok {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, listQuery, only, only)
	if err != nil {
		return nil, s.classify("list trees", err)
	}
	defer rows.Close()
	var out []calllog.TreeInfo
	for rows.Next() {
		var (
			ti                              calllog.TreeInfo
			last, n                         int64
			tool, start, end, kind, endCall sql.NullString
			program                         sql.NullBool
		)
		if err := rows.Scan(&ti.Tree, &last, &n, &ti.Bytes, &tool, &program, &start, &end, &kind, &endCall); err != nil {
			return nil, s.classify("list trees", err)
		}
		ti.LastSeq, ti.Events, ti.Tool, ti.Program = uint64(last), uint64(n), tool.String, program.Bool
		ti.Start, _ = time.Parse(time.RFC3339Nano, start.String)
		ti.Last, _ = time.Parse(time.RFC3339Nano, end.String)
		if k, ok := storedevent.ParseKind(kind.String); ok && k.IsEnd() && endCall.String == ti.Tree {
			ti.End = k
		}
		out = append(out, ti)
	}
	return out, s.classify("list trees", rows.Err())
}

// Retention says which whole trees Prune removes. The zero value removes
// none. A tree that has not ended (its outermost call has no end event:
// running, or left by a writer that stopped) is never removed, by age or
// by size; calllog.TakeOver ends a tree whose writer stopped.
type Retention struct {
	// MaxAge removes the ended trees whose last kept event is older than
	// it; 0 means no age limit.
	MaxAge time.Duration
	// MaxBytes removes the oldest ended trees (by first claim) until the
	// kept events' stored size is at most MaxBytes (trees not ended count
	// in that size and stay), never the newest tree; 0 means no size limit. The
	// file does not shrink: SQLite reuses the freed pages (VACUUM gives
	// them back).
	MaxBytes int64
}

func (r Retention) zero() bool { return r.MaxAge <= 0 && r.MaxBytes <= 0 }

// Pruned is what Prune removed.
type Pruned struct {
	// Trees and Events count what was removed; Bytes is the events'
	// stored size.
	Trees, Events, Bytes int64
}

// endedCond holds for a calllog_trees row whose tree has ended: its last
// kept event is the end of its outermost call (whose id is the tree's).
// Prune never removes a tree not ended, whose writer may still be keeping
// its events.
const endedCond = `EXISTS (SELECT 1 FROM (SELECT event FROM calllog_events e
	WHERE e.tree = calllog_trees.tree ORDER BY seq DESC LIMIT 1) l
	WHERE json_valid(l.event) AND json_extract(l.event, '$.call') = calllog_trees.tree
	AND json_extract(l.event, '$.kind') IN ('done', 'failed', 'cancelled', 'unknown'))`

// pruneEvery bounds how often Options.Retention is applied as new trees
// are kept.
const pruneEvery = time.Minute

// Prune removes whole trees (their events and claims) by r, in one
// transaction. A pruned tree is gone: readers find no such tree, and a
// writer still holding its claim is fenced (calllog.ErrFenced).
func (s *Store) Prune(ctx context.Context, r Retention) (Pruned, error) {
	if ok, err := s.tables(ctx); !ok || s.closed.Load() {
		if err == nil && s.closed.Load() {
			err = fmt.Errorf("sqlitestore: prune: %w: closed", calllog.ErrStoreUnusable)
		}
		return Pruned{}, err // a journal not written yet: nothing to prune
	}
	if err := s.usable("prune"); err != nil {
		return Pruned{}, err
	}
	s.pruneMu.Lock()
	s.lastPrune = time.Now()
	s.pruneMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Pruned{}, s.classify("prune", err)
	}
	defer tx.Rollback()
	var p Pruned
	_, err = tx.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS calllog_prune (tree TEXT PRIMARY KEY); DELETE FROM calllog_prune`)
	if err != nil {
		return Pruned{}, s.classify("prune", err)
	}
	if r.MaxAge > 0 {
		cutoff := time.Now().Add(-r.MaxAge).UTC().Format("2006-01-02T15:04:05.000000000Z07:00")
		_, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO calllog_prune (tree)
			SELECT tree FROM calllog_trees WHERE
			(SELECT CASE WHEN json_valid(event) THEN json_extract(event, '$.at') END FROM calllog_events e
				WHERE e.tree = calllog_trees.tree ORDER BY seq DESC LIMIT 1) < ? AND `+endedCond, cutoff)
		if err != nil {
			return Pruned{}, s.classify("prune", err)
		}
	}
	if r.MaxBytes > 0 {
		// Oldest first, until what stays fits: a running total of the
		// trees' sizes from the newest down; those past MaxBytes go.
		_, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO calllog_prune (tree)
			SELECT tree FROM (SELECT tree, ended, sum(b) OVER (ORDER BY r DESC) AS total FROM (
				SELECT rowid AS r, tree, (SELECT coalesce(sum(length(event)), 0) FROM calllog_events e
					WHERE e.tree = calllog_trees.tree) AS b, `+endedCond+` AS ended FROM calllog_trees))
			WHERE total > ? AND ended AND tree != (SELECT tree FROM calllog_trees ORDER BY rowid DESC LIMIT 1)`, r.MaxBytes)
		if err != nil {
			return Pruned{}, s.classify("prune", err)
		}
	}
	err = tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM calllog_prune), count(*), coalesce(sum(length(event)), 0)
		FROM calllog_events WHERE tree IN (SELECT tree FROM calllog_prune)`).Scan(&p.Trees, &p.Events, &p.Bytes)
	if err != nil {
		return Pruned{}, s.classify("prune", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM calllog_events WHERE tree IN (SELECT tree FROM calllog_prune);
		DELETE FROM calllog_trees WHERE tree IN (SELECT tree FROM calllog_prune); DELETE FROM calllog_prune`); err != nil {
		return Pruned{}, s.classify("prune", err)
	}
	return p, s.classify("prune", tx.Commit())
}

// pruneDue applies Options.Retention when it is set and was not applied
// within pruneEvery. A prune that fails (a busy file) is not the new
// tree's error: it is tried again at a new tree once pruneEvery passed.
func (s *Store) pruneDue(ctx context.Context) {
	if s.retention.zero() {
		return
	}
	s.pruneMu.Lock()
	due := time.Since(s.lastPrune) >= pruneEvery
	s.pruneMu.Unlock()
	if due {
		_, _ = s.Prune(ctx, s.retention)
	}
}
