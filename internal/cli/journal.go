package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/internal/termsafe"
)

// Reading a whole tree (replay, asif export): journalReadPage events per
// read of the store, at most maxTreeEvents in all (1,000,000) — more could
// not fit in an ASIF document of asif.MaxDocumentBytes anyway, and the
// bound keeps the reader's memory finite.
const (
	journalReadPage = 10_000
	maxTreeEvents   = 1_000_000
)

// followInterval is how often lastTree reads a journal that holds no
// tree yet.
const followInterval = 200 * time.Millisecond

// callJournal is the required journal of call --journal: a SQLite file
// or a JetStream stream (a nats:// URL).
type callJournal struct {
	path string
	st   journalStore
	log  calllog.Options // the host's call log: every event kept in st
}

// openCallJournal opens (creating it when needed) the journal at path (a
// SQLite file or a store URL) and the call log options that keep every
// event in it, required and with full content, so that the log can be
// replayed and exported later.
func openCallJournal(path string) (*callJournal, error) {
	st, err := openStore(path, false)
	if err != nil {
		return nil, err
	}
	return &callJournal{path: path, st: st, log: calllog.Options{
		Content: calllog.ContentFull,
		Journal: &calllog.Journal{Store: st, Required: true},
	}}, nil
}

// close closes the store; call it after the host is closed (the host's
// Close keeps what its journal has queued, as its context allows: a lost
// tail shows as a gap to followers).
func (j *callJournal) close() { _ = j.st.Close() }

// journalRefusal maps a required journal's refusal of the call's start.
func journalRefusal(err error) error {
	return statusErr(ExitFailure, "call refused: the journal did not keep its start, nothing was sent: %v", err)
}

// openJournalReader opens path (a file read-only, or a store URL) for
// follow, replay and asif export. A missing file is reported as such
// (SQLite's own error for it says only that it cannot open the file).
func openJournalReader(path string) (journalStore, error) {
	return openStore(path, true)
}

// readTree reads every kept event of tree from the journal at path,
// read-only, at most maxTreeEvents of them. A tree with no events is an
// error.
func readTree(ctx context.Context, path, tree string) ([]calllog.Event, error) {
	st, err := openJournalReader(path)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var events []calllog.Event
	for after := uint64(0); ; {
		page, err := st.EventsAfter(ctx, tree, after, journalReadPage)
		if err != nil {
			return nil, statusErr(ExitFailure, "cannot read the journal %s: %v", path, err)
		}
		if len(page) == 0 {
			break
		}
		events = append(events, page...)
		if len(events) > maxTreeEvents {
			return nil, statusErr(ExitFailure, "tree %q has more than %d events: too many to read at once", tree, maxTreeEvents)
		}
		after = page[len(page)-1].Seq
	}
	if len(events) == 0 {
		return nil, statusErr(ExitFailure, "the journal %s has no events of tree %q", path, tree)
	}
	return events, nil
}

// lastTree waits until the store holds a tree and returns the latest.
func lastTree(ctx context.Context, st journalStore) (string, error) {
	for {
		tree, err := latestTree(ctx, st)
		if err != nil {
			return "", statusErr(ExitFailure, "reading the journal: %v", err)
		}
		if tree != "" {
			return tree, nil
		}
		select {
		case <-ctx.Done():
			return "", statusErr(ExitCancelled, "interrupted before a call tree appeared in the journal")
		case <-time.After(followInterval):
		}
	}
}

const followUsage = "follow FILE [TREE]"

var followHelp = `
Follow tails a call tree kept in the journal FILE (a SQLite file or a
nats:// store URL, see call --journal; written by
'skulk-host call --journal FILE'), live, from another terminal or process:
it prints every kept event as one JSON line (the event's JSON form,
docs/events.md), from the tree's first event, as it is kept. TREE defaults
to the latest tree in FILE (waiting for one to appear).

Before an event it also prints, each on a line of its own:

	{"takeover":{"from":"W1","to":"W2","seq":N}}
		the event N was written by W2, which took the tree over from W1
		(a restarted host; see 'skulk-host journal takeover');
	{"lost":{"from":A,"to":B}}
		the events A..B were numbered but never kept (a writer died or
		its queue overflowed).

Follow ends (status 0) once the tree's outermost call has ended, or when
interrupted (Ctrl-C, status 13).
`

func runFollow(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("follow", flag.ContinueOnError)
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageErr("want FILE and an optional TREE, e.g. skulk-host follow calls.db")
	}
	st, err := openJournalReader(pos[0])
	if err != nil {
		return err
	}
	defer st.Close()
	tree := ""
	if len(pos) == 2 {
		tree = pos[1]
	} else if tree, err = lastTree(ctx, st); err != nil {
		return err
	}
	f := calllog.NewFollower(st, tree, 0, 0)
	for {
		step, err := f.Next(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case ctx.Err() != nil:
			return statusErr(ExitCancelled, "interrupted")
		case err != nil:
			return statusErr(ExitFailure, "reading the journal: %v", err)
		}
		if err := printStep(env.Stdout, step); err != nil {
			return statusErr(ExitFailure, "writing the output: %v", err)
		}
	}
}

// printStep prints a follower's step as JSON lines.
func printStep(w io.Writer, s calllog.Step) error {
	if s.TakenOverFrom != "" {
		// Encoded as JSON, not quoted as Go strings: a journal's writer
		// names are whatever its writers chose, and Go's \x1b is no JSON
		// escape.
		type takeover struct {
			From string `json:"from"`
			To   string `json:"to"`
			Seq  uint64 `json:"seq"`
		}
		line := struct {
			Takeover takeover `json:"takeover"`
		}{takeover{s.TakenOverFrom, s.Event.Writer, s.Event.Seq}}
		if err := json.NewEncoder(w).Encode(line); err != nil {
			return err
		}
	}
	if s.LostFrom != 0 {
		if _, err := fmt.Fprintf(w, "{\"lost\":{\"from\":%d,\"to\":%d}}\n", s.LostFrom, s.LostTo); err != nil {
			return err
		}
	}
	b, err := s.Event.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

const replayUsage = "replay FILE TREE"

var replayHelp = `
Replay reads the call tree TREE kept in the journal FILE (a SQLite file
or a nats:// store URL) and prints
what a watcher of each call saw, in the order the calls started: the call's
id, tool and version, the text of its output ("text" strings of its chunks;
kept by call --journal, which keeps full content), a line per media chunk
(its type and size), and its value or error —
or "running" when the journal holds no end for it. A gap in the kept
events is reported.
`

func runReplay(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageErr("want FILE and TREE, e.g. skulk-host replay calls.db 1a2b3c4d-1")
	}
	events, err := readTree(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	printReplay(env.Stdout, calllog.Replay(events), tracesOf(events), mediaOf(events))
	return nil
}

// tracesOf returns the spans of the calls of events that name one.
func tracesOf(events []calllog.Event) map[string]*calllog.Span {
	m := map[string]*calllog.Span{}
	for _, e := range events {
		if e.Span != nil {
			m[e.Call] = e.Span
		}
	}
	return m
}

// printReplay prints each call of r: a header line, its trace (when its
// events name one), its text, its end.
func printReplay(w io.Writer, r *calllog.Replayed, traces map[string]*calllog.Span, media map[string][]replayMedia) {
	for _, c := range r.Calls {
		kind := "call"
		if c.Program {
			kind = "program"
		}
		fmt.Fprintf(w, "%s %s %s", kind, termsafe.Escape(c.Call), termsafe.Escape(c.Tool))
		if c.ToolVersion != "" {
			fmt.Fprintf(w, " (version %s)", termsafe.Escape(c.ToolVersion))
		}
		if c.Parent != "" {
			fmt.Fprintf(w, ", step of %s", termsafe.Escape(c.Parent))
		}
		fmt.Fprintf(w, ", %d attempt(s)\n", c.Attempts)
		if tr, ok := traces[c.Call]; ok {
			// Hex digits only: a journal's ids were checked when read.
			fmt.Fprintf(w, "  trace: %s span %s\n", tr.TraceID, tr.SpanID)
		}
		if c.Text != "" {
			fmt.Fprintf(w, "  text: %s\n", strconv.Quote(c.Text))
		}
		printReplayMedia(w, media[c.Call])
		switch {
		case !c.Ended:
			fmt.Fprintln(w, "  running (no end kept)")
		case c.Outcome.Kind == calllog.KindDone:
			v := "(no value)"
			if res := c.Outcome.Result; res != nil {
				v = termsafe.Escape(compactJSON(res))
			}
			fmt.Fprintf(w, "  done: %s\n", v)
		default:
			line := "  " + c.Outcome.Kind.String()
			if e := c.Outcome.Error; e != nil {
				line += ": " + e.Code.String()
				if e.Message != "" {
					line += ": " + termsafe.Escape(oneLine(e.Message))
				}
				if e.Synthetic {
					line += " (synthetic)"
				}
			}
			if c.Outcome.Refused != "" {
				line += " (refused: " + termsafe.Escape(c.Outcome.Refused) + ")"
			}
			fmt.Fprintln(w, line)
		}
	}
	if r.Lost > 0 {
		fmt.Fprintf(w, "lost: %d event(s) were numbered but not kept\n", r.Lost)
	}
}

const journalUsage = "journal takeover FILE TREE"

var journalHelp = `
Journal takeover claims the call tree TREE in the journal FILE (a SQLite
file or a nats:// store URL) for
a new writer — the way a restarted host continues a tree whose host died —
and records the outcome it can prove of every call the journal shows
started and not ended: failed, unreachable, synthetic, steps before their
callers. The previous writer is fenced from then on: it can no longer
append to the tree. The events it kept are printed as JSON lines
(docs/events.md); followers see the takeover.
`

func runJournal(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("journal", flag.ContinueOnError)
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 3 || pos[0] != "takeover" {
		return usageErr("want: journal takeover FILE TREE")
	}
	st, err := openStore(pos[1], false)
	if err != nil {
		return err
	}
	defer st.Close()
	writer := newWriterName()
	kept, err := calllog.TakeOver(ctx, st, pos[2], writer)
	if err != nil {
		return statusErr(ExitFailure, "taking over tree %s: %v", pos[2], err)
	}
	for _, e := range kept {
		b, err := e.MarshalJSON()
		if err != nil {
			return statusErr(ExitFailure, "%v", err)
		}
		env.Stdout.Write(append(b, '\n'))
	}
	fmt.Fprintf(env.Stderr, "skulk-host journal: tree %s taken over by writer %s: %d event(s) recorded\n", pos[2], writer, len(kept))
	return nil
}

// newWriterName returns a random 16-hex-digit writer name, as a host's.
func newWriterName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
