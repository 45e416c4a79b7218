// Package eventstore holds the module's test doubles of calllog's
// interfaces: Memory, a calllog.EventStore in memory, and ObserverFunc, a
// function as a calllog.Observer.
package eventstore

import (
	"context"
	"errors"
	"sync"

	"github.com/skulkrt/skulk/calllog"
)

// Memory is a calllog.EventStore in memory, for tests.
// The zero value is ready to use. It is safe for concurrent use.
type Memory struct {
	mu    sync.Mutex
	trees map[string]*memTree // guarded by mu
}

type memTree struct {
	writer string
	epoch  uint64
	events []calllog.Event // ascending Seq
}

func (s *Memory) tree(id string) *memTree {
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

// Claim implements calllog.EventStore.
func (s *Memory) Claim(ctx context.Context, tree, writer string) (calllog.Claim, error) {
	if err := ctx.Err(); err != nil {
		return calllog.Claim{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tree(tree)
	t.epoch++
	t.writer = writer
	c := calllog.Claim{Tree: tree, Writer: writer, Epoch: t.epoch}
	if n := len(t.events); n > 0 {
		c.Last = t.events[n-1].Seq
	}
	return c, nil
}

// Keep implements calllog.EventStore.
func (s *Memory) Keep(ctx context.Context, c calllog.Claim, events []calllog.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkBatch(c, events); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tree(c.Tree)
	if t.epoch != c.Epoch || t.writer != c.Writer {
		return calllog.ErrFenced
	}
	for _, e := range events {
		if n := len(t.events); n > 0 && e.Seq <= t.events[n-1].Seq {
			continue // kept already (idempotent) — seqs only grow
		}
		t.events = append(t.events, e)
	}
	return nil
}

// KeepNew implements calllog.EventStore's optional KeepNew.
func (s *Memory) KeepNew(ctx context.Context, tree, writer string, events []calllog.Event) (calllog.Claim, error) {
	if err := ctx.Err(); err != nil {
		return calllog.Claim{}, err
	}
	c := calllog.Claim{Tree: tree, Writer: writer, Epoch: 1}
	if err := checkBatch(c, events); err != nil {
		return calllog.Claim{}, err
	}
	s.mu.Lock()
	t := s.tree(tree)
	switch {
	case t.epoch == 0:
		t.epoch, t.writer = 1, writer
	case t.writer != writer:
		s.mu.Unlock()
		return calllog.Claim{}, calllog.ErrTreeExists
	}
	c.Epoch = t.epoch
	s.mu.Unlock()
	return c, s.Keep(ctx, c, events)
}

// EventsAfter implements calllog.EventStore.
func (s *Memory) EventsAfter(ctx context.Context, tree string, after uint64, limit int) ([]calllog.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.trees[tree]
	if t == nil {
		return nil, nil
	}
	var out []calllog.Event
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

// errBadBatch is checkBatch's error.
var errBadBatch = errors.New("eventstore: bad batch: events of another tree, numbered 0 or out of order")

// checkBatch is the check of calllog.EventStore's Keep that every store
// makes before it keeps a batch: every event is of c.Tree, Seq ≥ 1,
// strictly ascending.
func checkBatch(c calllog.Claim, events []calllog.Event) error {
	var prev uint64
	for _, e := range events {
		if e.Tree != c.Tree || e.Seq == 0 || e.Seq <= prev {
			return errBadBatch
		}
		prev = e.Seq
	}
	return nil
}
