package calllog

import (
	"context"
	"errors"
	"strconv"
	"time"
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
	// ErrTreeExists: a new tree's claim (KeepNew, see EventStore) found
	// events already kept under its id (two trees with one id); the
	// journal of that tree stops.
	ErrTreeExists = errors.New("calllog: tree id already in the store")
	// ErrNoTree: TakeOver was given a tree the store has no event of (a
	// mistyped id): nothing is claimed.
	ErrNoTree = errors.New("calllog: no such tree in the store")
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
// use; sqlitestore.Store is one, and calllogtest.TestStore checks the
// rules below.
//
// Every method must return once its ctx is done.
//
// A store may also have the method
//
//	KeepNew(ctx context.Context, tree, writer string, events []Event) (Claim, error)
//
// that claims tree for writer and keeps events (its first ones) at once
// and atomically: a journal writer whose store has it saves a round trip
// at the start of every tree (with a required journal, a wait of every
// outermost call's start). A tree already claimed by another writer fails
// with ErrTreeExists; one claimed by this writer (a retry whose answer was
// lost) keeps its claim, and Keep's rules apply. Both module stores have
// it.
type EventStore interface {
	// Claim makes writer the tree's only writer from now on, fencing any
	// earlier claim, and says where the numbering stands.
	Claim(ctx context.Context, tree, writer string) (Claim, error)
	// Keep appends events of c.Tree, in ascending Seq order, atomically: all
	// or none. It is idempotent: an event whose (tree, seq) is kept already
	// is skipped. It fails with ErrFenced when c is not the tree's current
	// claim, and with an error of its own, keeping nothing, when an event
	// is of another tree than c.Tree, numbered 0, or not after the one
	// before it: it checks that before anything else of the batch
	// (calllogtest.TestStore checks it).
	Keep(ctx context.Context, c Claim, events []Event) error
	// EventsAfter returns up to limit kept events of tree with Seq > after,
	// in Seq order; none (and no error) when there are none yet. It may
	// return fewer than limit (the module's stores stop a page at 4 MiB of
	// stored events). When a kept event cannot be read (corrupt, or larger
	// than the store reads: 64 MiB for the module's stores) it returns the
	// events before it and a *CorruptEventError naming it; a read after
	// that Seq goes on past it.
	EventsAfter(ctx context.Context, tree string, after uint64, limit int) ([]Event, error)
}

// CorruptEventError is a kept event that cannot be read: its stored form
// is not the event JSON form, or it is larger than the store reads. It
// matches ErrFormat (errors.Is). Readers show it as a loss of that one
// event and go on after it: the rest of the tree stays readable.
type CorruptEventError struct {
	// Seq is the event's number in the tree that was read.
	Seq uint64
	// Err says what is wrong with it; it matches ErrFormat.
	Err error
}

func (e *CorruptEventError) Error() string {
	return "calllog: event " + strconv.FormatUint(e.Seq, 10) + " of the tree cannot be read: " + e.Err.Error()
}

// Unwrap returns Err.
func (e *CorruptEventError) Unwrap() error { return e.Err }

// TreeInfo describes one tree kept in a store, as a listing shows it
// (the module's stores' ListTrees and TreeInfo).
type TreeInfo struct {
	// Tree is the tree's id.
	Tree string
	// Tool is the tool (or program name) of the tree's first kept event:
	// its outermost call's, unless that event was lost. "" when the first
	// kept event cannot be read.
	Tool string
	// Program is true when that event is a program's.
	Program bool
	// Start is when the first kept event was recorded; Last, the last.
	Start, Last time.Time
	// Events counts the kept events; LastSeq is the last one's Seq
	// (LastSeq - Events events were lost or pruned, when no corrupt one
	// is among them).
	Events, LastSeq uint64
	// Bytes is the events' stored size; 0 when the store does not say.
	Bytes int64
	// End is the kind of the tree's end (its outermost call's done,
	// failed or cancelled, or unknown when a takeover ended it) when the
	// last kept event is that end; 0 while the tree runs, or when its end
	// was never kept.
	End Kind
}
