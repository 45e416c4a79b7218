package calllog

import (
	"context"
	"errors"
	"sync"
)

// Store errors. A store returns them (wrapped or not) so that writers and
// followers can act on them with errors.Is.
var (
	// ErrFenced: the claim given to Keep is no longer the tree's current
	// claim (another writer claimed the tree). The writer stops.
	ErrFenced = errors.New("calllog: writer fenced: the tree was claimed by another writer")
	// ErrStoreUnusable: the store cannot be used at all (closed, corrupt,
	// read-only, wrong schema). A journal writer stops instead of sending
	// again; every other error counts as no answer and is sent again.
	ErrStoreUnusable = errors.New("calllog: store unusable")
	// ErrTreeExists: a new tree's claim found events already kept under
	// its id (two trees with one id); the journal of that tree stops.
	ErrTreeExists = errors.New("calllog: tree id already in the store")
	// ErrNoTree: Recorder.TakeOver was given a tree the store has no event
	// of (a mistyped id): nothing is claimed.
	ErrNoTree = errors.New("calllog: no such tree in the store")
	// ErrBadBatch: Keep was given events of another tree, out of order, or
	// numbered 0.
	ErrBadBatch = errors.New("calllog: bad batch")
)

// Claim is a writer's right to append to a tree. Only the latest claim of a
// tree may append (fencing).
type Claim struct {
	// Tree is the tree's id.
	Tree string
	// Writer names the writer holding the claim.
	Writer string
	// Epoch numbers the tree's claims from 1; a larger one fences the
	// smaller.
	Epoch uint64
	// Last is the highest Seq kept in the tree when the claim was made;
	// the writer continues the numbering after it.
	Last uint64
}

// EventStore keeps trees' logs. Implementations are safe for concurrent
// use; MemoryStore and sqlitestore.Store are two.
//
// Every method must return once its ctx is done.
type EventStore interface {
	// Claim makes writer the tree's only writer from now on, fencing any
	// earlier claim, and says where the numbering stands.
	Claim(ctx context.Context, tree, writer string) (Claim, error)
	// Keep appends events of c.Tree, in ascending Seq order, atomically: all
	// or none. It is idempotent: an event whose (tree, seq) is kept already
	// is skipped. It fails with ErrFenced when c is not the tree's current
	// claim.
	Keep(ctx context.Context, c Claim, events []Event) error
	// EventsAfter returns up to limit kept events of tree with Seq > after,
	// in Seq order; none (and no error) when there are none yet.
	EventsAfter(ctx context.Context, tree string, after uint64, limit int) ([]Event, error)
}

// NewTreeKeeper is an optional EventStore method that saves a round trip
// at the start of every tree: a journal writer whose store has it claims
// and keeps its tree's first batch in one step.
type NewTreeKeeper interface {
	// KeepNew claims tree for writer and keeps events (its first ones), at
	// once and atomically. A tree already claimed by another writer fails
	// with ErrTreeExists; one claimed by this writer (a retry whose answer
	// was lost) keeps its claim, and Keep's rules apply.
	KeepNew(ctx context.Context, tree, writer string, events []Event) (Claim, error)
}

// CheckBatch checks what every store must check before keeping: events of
// c.Tree, Seq ≥ 1, strictly ascending. Stores call it; the error wraps
// ErrBadBatch.
func CheckBatch(c Claim, events []Event) error {
	var prev uint64
	for _, e := range events {
		if e.Tree != c.Tree || e.Seq == 0 || e.Seq <= prev {
			return ErrBadBatch
		}
		prev = e.Seq
	}
	return nil
}

// MemoryStore is an EventStore in memory, for tests and single-process use.
// The zero value is ready to use. It is safe for concurrent use.
type MemoryStore struct {
	mu    sync.Mutex
	trees map[string]*memTree // guarded by mu
}

type memTree struct {
	writer string
	epoch  uint64
	events []Event // ascending Seq
}

func (s *MemoryStore) tree(id string) *memTree {
	if s.trees == nil {
		s.trees = make(map[string]*memTree)
	}
	t := s.trees[id]
	if t == nil {
		t = &memTree{}
		s.trees[id] = t
	}
	return t
}

// Claim implements EventStore.
func (s *MemoryStore) Claim(ctx context.Context, tree, writer string) (Claim, error) {
	if err := ctx.Err(); err != nil {
		return Claim{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tree(tree)
	t.epoch++
	t.writer = writer
	c := Claim{Tree: tree, Writer: writer, Epoch: t.epoch}
	if n := len(t.events); n > 0 {
		c.Last = t.events[n-1].Seq
	}
	return c, nil
}

// Keep implements EventStore.
func (s *MemoryStore) Keep(ctx context.Context, c Claim, events []Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckBatch(c, events); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tree(c.Tree)
	if t.epoch != c.Epoch || t.writer != c.Writer {
		return ErrFenced
	}
	for _, e := range events {
		if n := len(t.events); n > 0 && e.Seq <= t.events[n-1].Seq {
			continue // kept already (idempotent) — seqs only grow
		}
		t.events = append(t.events, e)
	}
	return nil
}

// KeepNew implements NewTreeKeeper.
func (s *MemoryStore) KeepNew(ctx context.Context, tree, writer string, events []Event) (Claim, error) {
	if err := ctx.Err(); err != nil {
		return Claim{}, err
	}
	c := Claim{Tree: tree, Writer: writer, Epoch: 1}
	if err := CheckBatch(c, events); err != nil {
		return Claim{}, err
	}
	s.mu.Lock()
	t := s.tree(tree)
	switch {
	case t.epoch == 0:
		t.epoch, t.writer = 1, writer
	case t.writer != writer:
		s.mu.Unlock()
		return Claim{}, ErrTreeExists
	}
	c.Epoch = t.epoch
	s.mu.Unlock()
	return c, s.Keep(ctx, c, events)
}

// EventsAfter implements EventStore.
func (s *MemoryStore) EventsAfter(ctx context.Context, tree string, after uint64, limit int) ([]Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.trees[tree]
	if t == nil {
		return nil, nil
	}
	var out []Event
	for _, e := range t.events {
		if e.Seq > after {
			if limit > 0 && len(out) == limit {
				break
			}
			out = append(out, e)
		}
	}
	return out, nil
}
