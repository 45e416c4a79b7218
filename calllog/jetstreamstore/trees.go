package jetstreamstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/internal/storedevent"
)

// treeIDs returns the ids of the trees whose first claim is in the stream,
// oldest first: an ordered consumer of the first claims' headers, deleted
// once read.
func (s *Store) treeIDs(ctx context.Context) ([]string, error) {
	last, err := s.stream.GetLastMsgForSubject(ctx, s.prefix+".*.n")
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, s.classify("list trees", err)
	}
	cons, err := s.js.OrderedConsumer(ctx, s.name, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.prefix + ".*.n"}, HeadersOnly: true,
		InactiveThreshold: inactiveThreshold, MaxResetAttempts: 3,
	})
	if err != nil {
		return nil, s.classify("list trees", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(cursorBuffer))
	if err != nil {
		return nil, s.classify("list trees", err)
	}
	c := &cursor{it: it, cons: cons, js: s.js, name: s.name}
	defer c.stop()
	var ids []string
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, s.classify("list trees", err)
		}
		ids = append(ids, m.Headers().Get(hdrTree))
		md, err := m.Metadata()
		if err != nil {
			return nil, s.classify("list trees", err)
		}
		if md.Sequence.Stream >= last.Sequence || md.NumPending == 0 {
			return ids, nil
		}
	}
}

// ListTrees returns the trees whose first claim is in the stream, newest
// first, each read with three requests to the
// stream leader (its first and last event, its event count from the
// stream's per-subject counts, asked once for every tree). Bytes is 0: the
// stream does not say a subject's size.
func (s *Store) ListTrees(ctx context.Context) ([]calllog.TreeInfo, error) {
	if err := s.readable("list trees"); err != nil {
		return nil, err
	}
	ids, err := s.treeIDs(ctx)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(s.prefix+".*.e"))
	if err != nil {
		return nil, s.classify("list trees", err)
	}
	out := make([]calllog.TreeInfo, 0, len(ids))
	for _, id := range slices.Backward(ids) {
		ti, err := s.info(ctx, id, info.State.Subjects[s.subject(id, "e")])
		if err != nil {
			return nil, err
		}
		out = append(out, ti)
	}
	return out, nil
}

// TreeInfo describes one tree kept in the store; calllog.ErrNoTree when
// the store has no event of it.
func (s *Store) TreeInfo(ctx context.Context, tree string) (calllog.TreeInfo, error) {
	if err := s.readable("tree info"); err != nil {
		return calllog.TreeInfo{}, err
	}
	subj := s.subject(tree, "e")
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return calllog.TreeInfo{}, s.classify("tree info", err)
	}
	n := info.State.Subjects[subj]
	if n == 0 {
		return calllog.TreeInfo{}, calllog.ErrNoTree
	}
	return s.info(ctx, tree, n)
}

// info describes tree, which has n events kept, from its first and last.
func (s *Store) info(ctx context.Context, id string, n uint64) (calllog.TreeInfo, error) {
	ti := calllog.TreeInfo{Tree: id, Events: n}
	if n == 0 {
		return ti, nil
	}
	subj := s.subject(id, "e")
	first, err := s.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj))
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return ti, s.classify("tree info", err)
	}
	if err == nil {
		if e, err := storedevent.Decode(first.Data); err == nil {
			ti.Tool, ti.Program, ti.Start = e.Tool, e.Program, e.At
		}
	}
	last, err := s.stream.GetLastMsgForSubject(ctx, subj)
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return ti, s.classify("tree info", err)
	}
	if err == nil {
		ti.LastSeq, _ = strconv.ParseUint(last.Header.Get(hdrSeq), 10, 64)
		if e, err := storedevent.Decode(last.Data); err == nil {
			ti.Last = e.At
			if e.Kind.IsEnd() && e.Call == id {
				ti.End = e.Kind
			}
		}
	}
	return ti, nil
}

// ErrPruneAge is Prune's error for an age that is not positive.
var ErrPruneAge = errors.New("jetstreamstore: prune: the age must be positive")

// Pruned is what Prune removed.
type Pruned struct {
	// Trees and Messages count what was purged (messages: events and
	// claims).
	Trees, Messages uint64
}

// Prune purges whole trees (their events and claims) whose last message
// is older than maxAge: a pruned tree is gone to readers (no such tree),
// and a writer still holding its claim is fenced. The stream's own
// max_age and max_bytes (Options.MaxAge, MaxBytes) drop the oldest events
// instead, one by one, which readers show as a gap at a tree's start.
func (s *Store) Prune(ctx context.Context, maxAge time.Duration) (Pruned, error) {
	if err := s.usable("prune"); err != nil {
		return Pruned{}, err
	}
	if maxAge <= 0 {
		return Pruned{}, ErrPruneAge
	}
	ids, err := s.treeIDs(ctx)
	if err != nil {
		return Pruned{}, err
	}
	cutoff := time.Now().Add(-maxAge)
	var p Pruned
	for _, id := range ids {
		all := strings.TrimSuffix(s.subject(id, "e"), "e") + ">"
		last, err := s.stream.GetLastMsgForSubject(ctx, all)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return p, s.classify("prune", err)
		}
		if !last.Time.Before(cutoff) {
			continue
		}
		info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(all))
		if err != nil {
			return p, s.classify("prune", err)
		}
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(all)); err != nil {
			return p, s.classify("prune", err)
		}
		s.forget(id)
		p.Trees++
		for _, n := range info.State.Subjects {
			p.Messages += n
		}
	}
	return p, nil
}
