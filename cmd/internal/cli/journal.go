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
	"strings"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/cmd/internal/termsafe"
	"github.com/skulkrt/skulk/internal/replay"
)

// Bounds of reading a journal (docs/events.md, "Reading is bounded").
const (
	// exportReadBytes bounds the events asif export holds: the tree's
	// events up to --until (their payloads, media and fragments counted,
	// heldBytes); a tree past it is refused as soon as the bound is
	// reached, before more is read.
	exportReadBytes = 16 << 20
	// replayMaxText and replayMaxValue bound what replay keeps of each
	// call's text and value, replayMaxKept of all calls' together; the
	// rest is counted and said.
	replayMaxText  = 16 << 10
	replayMaxValue = 16 << 10
	replayMaxKept  = 8 << 20
)

// followInterval is how often follow looks again for a journal, or a tree
// in it, that is not there yet.
const followInterval = 200 * time.Millisecond

// redactFlag collects repeated --redact KEY[,KEY...] flags: payload keys
// whose values the journal never keeps (calllog.Options.Redact).
type redactFlag []string

func (r *redactFlag) String() string { return "" }

func (r *redactFlag) Set(v string) error {
	for _, k := range strings.Split(v, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			return errors.New("an empty key (give KEY or KEY,KEY...)")
		}
		*r = append(*r, k)
	}
	return nil
}

// checkRedact refuses --redact without --journal: nothing would keep the
// events it redacts.
func checkRedact(r redactFlag, journal string) error {
	if len(r) > 0 && journal == "" {
		return usageErr("--redact needs --journal: it says what the journal does not keep")
	}
	return nil
}

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
	st, err := openStore(path, storeCreate)
	if err != nil {
		return nil, err
	}
	return &callJournal{path: path, st: st, log: calllog.Options{
		FullContent: true,
		Journal:     &calllog.Journal{Store: st, Required: true},
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

// readTree reads the kept events of tree from the journal at path,
// read-only, through until (0: all), holding at most exportReadBytes of
// them: a tree past the bound is refused when the bound is reached, before
// more is read. An unreadable event is left out (the exporter shows the
// gap as a loss) and counted in corrupt. A tree with no events is an
// error.
func readTree(ctx context.Context, path, tree string, until uint64) (events []calllog.Event, corrupt int, err error) {
	st, err := openStore(path, storeRead)
	if err != nil {
		return nil, 0, err // a missing journal: "cannot open the journal FILE: no such file"
	}
	defer st.Close()
	held := 0
	found := false
	for e, err := range calllog.Events(ctx, st, tree, 0) {
		var ce *calllog.CorruptEventError
		if errors.As(err, &ce) {
			corrupt++
			found = true
			continue
		}
		if err != nil {
			return nil, 0, statusErr(ExitFailure, "cannot read the journal %s: %v", path, err)
		}
		found = true
		if until != 0 && e.Seq > until {
			break
		}
		if held += heldBytes(e); held > exportReadBytes {
			return nil, 0, statusErr(ExitFailure, "tree %q holds more than %s of events up to event %d: more than asif export reads at once; export an earlier window with --until", tree, formatSize(exportReadBytes), e.Seq)
		}
		events = append(events, e)
	}
	if !found {
		return nil, 0, statusErr(ExitFailure, "the journal %s has no events of tree %q", path, tree)
	}
	return events, corrupt, nil
}

// heldBytes is about what an event read from a journal holds in memory:
// its fixed part and strings, its payload, media and fragment.
func heldBytes(e calllog.Event) int {
	n := 256 + len(e.Tree) + len(e.Writer) + len(e.Call) + len(e.Parent) + len(e.Tool) + len(e.ToolVersion) + len(e.Child) + len(e.Fragment)
	if e.Payload != nil {
		n += len(e.Payload.Value)
	}
	if e.Media != nil {
		n += len(e.Media.Data) + len(e.Media.MediaType) + len(e.Media.BlobID)
	}
	if e.Error != nil {
		n += len(e.Error.Message)
	}
	return n
}

// waitStore opens the journal at path for reading, waiting (when wait) for
// it to be written; waited says it was not there at first. The wait is
// announced on stderr, so that a caller knows follow is in place.
func waitStore(ctx context.Context, path string, wait bool, stderr io.Writer) (st journalStore, waited bool, err error) {
	for {
		st, err := openStore(path, storeRead)
		if err == nil || !wait || !errors.Is(err, errNotWritten) {
			return st, waited, err
		}
		if !waited {
			fmt.Fprintf(stderr, "skulk-host follow: waiting for the journal %s to be written\n", termsafe.Escape(path))
			waited = true
		}
		if err := pause(ctx); err != nil {
			return nil, waited, statusErr(ExitCancelled, "interrupted before the journal %s was written", path)
		}
	}
}

// pause waits followInterval, or until ctx is done.
func pause(ctx context.Context) error {
	t := time.NewTimer(followInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// treeKept reports whether the store holds an event of tree, readable or
// not.
func treeKept(ctx context.Context, st journalStore, tree string) (bool, error) {
	evs, err := st.EventsAfter(ctx, tree, 0, 1)
	var ce *calllog.CorruptEventError
	if errors.As(err, &ce) {
		return true, nil
	}
	return len(evs) > 0, err
}

// treeToFollow returns the tree follow shows when none is named: the
// latest tree of st while it runs, else the next one to start (so follow
// started before a call shows that call, not the one before it). When the
// journal was not written as follow started (fresh), every tree is new:
// the first to appear is shown even when it has ended already.
func treeToFollow(ctx context.Context, st journalStore, fresh bool, path string, stderr io.Writer) (string, error) {
	seen := ""
	if !fresh {
		var err error
		if seen, err = latestTree(ctx, st); err != nil {
			return "", statusErr(ExitFailure, "reading the journal: %v", err)
		}
	}
	if seen != "" {
		info, err := st.TreeInfo(ctx, seen)
		if err != nil && !errors.Is(err, calllog.ErrNoTree) {
			return "", statusErr(ExitFailure, "reading the journal: %v", err)
		}
		if err == nil && info.End == 0 {
			return seen, nil
		}
	}
	for announced := false; ; announced = true {
		tree, err := latestTree(ctx, st)
		if err != nil {
			return "", statusErr(ExitFailure, "reading the journal: %v", err)
		}
		if tree != "" && tree != seen {
			return tree, nil
		}
		if !announced {
			fmt.Fprintf(stderr, "skulk-host follow: waiting for a call tree to start in %s\n", termsafe.Escape(path))
		}
		if err := pause(ctx); err != nil {
			return "", statusErr(ExitCancelled, "interrupted before a new call tree appeared in the journal")
		}
	}
}

const followUsage = "follow FILE [TREE] [--wait] [--follow-links]"

var followHelp = `
Follow tails a call tree kept in the journal FILE (a SQLite file or a
nats:// store URL, see call --journal; written by
'skulk-host call --journal FILE'), live, from another terminal or process:
it prints every kept event as one JSON line (the event's JSON form,
docs/events.md), from the tree's first event, as it is kept.

Without TREE it follows the tree running in FILE, or when none is running
(the latest tree has ended, or there is none) the next tree to start:
started before a call, it shows that call. It waits for FILE to be written
(a missing or empty file, a stream not created yet) and for a tree to
start, saying so on standard error. To see a tree that has ended, name it
('skulk-host journal list FILE' lists them).

With TREE it follows that tree, from its first event; a TREE the journal
does not hold is an error (status 1), unless --wait.

	--wait
		wait for TREE (and FILE) to appear instead of failing: for a
		tree whose call has not started yet.
	--follow-links
		once the tree has ended, follow the trees its events link to
		in the same FILE, then theirs, each once (at most 64): the tree
		a call made over NATS was recorded in by its serving host (an
		event's "remote"), and the tree of the call that made this one
		over NATS (its start's "caller"). Before each it prints
		{"tree":{"id":"X","linked_from":{"tree":"T","call":"C"}}}; a
		linked tree FILE does not hold is said on standard error and
		skipped.

A call made over NATS (call --via, package remote) is recorded by the
host that runs it as a tree of its own: the caller's "request" event
names it ("remote":{"tree":"X","call":"X"}) and that tree's first event
names the caller ("caller":{"tree":"T","call":"C"}). Follow X to watch
the call's output, or use --follow-links.

Before an event it also prints, each on a line of its own:

	{"takeover":{"from":"W1","to":"W2","seq":N}}
		the event N was written by W2, which took the tree over from W1
		(a restarted host; see 'skulk-host journal takeover');
	{"lost":{"from":A,"to":B}}
		the events A..B were numbered but never kept (a writer died or
		its queue overflowed), or kept but unreadable;
	{"corrupt":{"seq":N}}
		the event N is kept but cannot be read (not the event JSON form,
		or larger than 64 MiB): it is counted in the next lost line.

Follow holds one read of the journal at a time (at most 512 events and
4 MiB of them, or one event up to 64 MiB), whatever the journal's size.
It ends (status 0) once the tree's outermost call has ended, or when
interrupted (Ctrl-C, status 13).
`

func runFollow(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("follow", flag.ContinueOnError)
	wait := fs.Bool("wait", false, "")
	links := fs.Bool("follow-links", false, "")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageErr("want FILE and an optional TREE, e.g. skulk-host follow calls.db")
	}
	named := len(pos) == 2
	if *wait && !named {
		return usageErr("--wait is for a named TREE: without one, follow always waits")
	}
	st, waited, err := waitStore(ctx, pos[0], *wait || !named, env.Stderr)
	if err != nil {
		if named && errors.Is(err, errNotWritten) {
			return statusErr(ExitFailure, "no tree %q: the journal %s is not written yet (--wait waits for it)", pos[1], pos[0])
		}
		return err
	}
	defer st.Close()
	var tree string
	if named {
		tree = pos[1]
		for announced := false; ; {
			ok, err := treeKept(ctx, st, tree)
			if err != nil {
				return statusErr(ExitFailure, "reading the journal: %v", err)
			}
			if ok {
				break
			}
			if !*wait {
				return statusErr(ExitFailure, "no tree %q in the journal %s (--wait waits for it)", tree, pos[0])
			}
			if !announced {
				fmt.Fprintf(env.Stderr, "skulk-host follow: waiting for tree %s to start in %s\n", termsafe.Escape(tree), termsafe.Escape(pos[0]))
				announced = true
			}
			if err := pause(ctx); err != nil {
				return statusErr(ExitCancelled, "interrupted before tree %q appeared", tree)
			}
		}
	} else if tree, err = treeToFollow(ctx, st, waited, pos[0], env.Stderr); err != nil {
		return err
	}
	var q *linkQueue
	if *links {
		q = newLinkQueue(tree)
	}
	if err := followTree(ctx, st, tree, q, env); err != nil {
		return err
	}
	for q != nil {
		lt, ok := q.pop()
		if !ok {
			break
		}
		ok, err := treeKept(ctx, st, lt.tree)
		if err != nil {
			return statusErr(ExitFailure, "reading the journal: %v", err)
		}
		if !ok {
			fmt.Fprintf(env.Stderr, "skulk-host follow: tree %s, linked from call %s of tree %s, is not in %s\n",
				termsafe.Escape(lt.tree), termsafe.Escape(lt.from.Call), termsafe.Escape(lt.from.Tree), termsafe.Escape(pos[0]))
			continue
		}
		if err := printTreeLine(env.Stdout, lt); err != nil {
			return statusErr(ExitFailure, "writing the output: %v", err)
		}
		if err := followTree(ctx, st, lt.tree, q, env); err != nil {
			return err
		}
	}
	if q != nil && q.dropped > 0 {
		fmt.Fprintf(env.Stderr, "skulk-host follow: %d more linked tree(s) not followed (at most %d are)\n", q.dropped, maxLinkedTrees)
	}
	return nil // the trees ended
}

// followTree prints the steps of tree until it ends, queueing the trees
// its events link to in q (nil: none).
func followTree(ctx context.Context, st journalStore, tree string, q *linkQueue, env Env) error {
	for s, err := range replay.Steps(calllog.Follow(ctx, st, tree, 0, 0)) {
		var ce *calllog.CorruptEventError
		switch {
		case ctx.Err() != nil:
			return statusErr(ExitCancelled, "interrupted")
		case errors.As(err, &ce):
			if _, err := fmt.Fprintf(env.Stdout, "{\"corrupt\":{\"seq\":%d}}\n", ce.Seq); err != nil {
				return statusErr(ExitFailure, "writing the output: %v", err)
			}
			continue
		case err != nil:
			return statusErr(ExitFailure, "reading the journal: %v", err)
		}
		if q != nil {
			q.addEvent(s.Event)
		}
		if err := printStep(env.Stdout, s); err != nil {
			return statusErr(ExitFailure, "writing the output: %v", err)
		}
	}
	return nil
}

// printTreeLine prints the line follow --follow-links writes before a
// linked tree's events.
func printTreeLine(w io.Writer, lt linkedTree) error {
	type from struct {
		Tree string `json:"tree"`
		Call string `json:"call"`
	}
	type tree struct {
		ID         string `json:"id"`
		LinkedFrom from   `json:"linked_from"`
	}
	line := struct {
		Tree tree `json:"tree"`
	}{tree{lt.tree, from{lt.from.Tree, lt.from.Call}}}
	return json.NewEncoder(w).Encode(line)
}

// printStep prints a follower's step as JSON lines.
func printStep(w io.Writer, s replay.Step) error {
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

const replayUsage = "replay FILE TREE [--follow-links]"

var replayHelp = `
Replay reads the call tree TREE kept in the journal FILE (a SQLite file
or a nats:// store URL) and prints
what a watcher of each call saw, in the order the calls started: the call's
id, tool and version, the text of its output ("text" strings of its chunks;
kept by call --journal, which keeps full content; the first 16 KiB of it,
and how much more there was), and its value (up to 16 KiB; a larger one is
shown by its size) or error — or "running" when the journal holds no end
for it. Past 8 MiB of text and values for the whole tree, the rest is
shown by its size. A gap in the kept events, and events kept but
unreadable, are reported. Replay reads the journal a page at a time: it
holds one page (at most 4 MiB of events, or one event up to 64 MiB) and
what it prints of each call, whatever the journal's size.

A call made over NATS (call --via, package remote) is recorded by the
host that runs it as a tree of its own. Replay prints the link on the
call that made it,

	remote: tree X (skulk-host replay FILE X)

and on that tree's outermost call, the call that made it:

	caller: call C of tree T

	--follow-links
		after TREE, replay the trees its calls link to in the same
		FILE, then theirs, each once (at most 64), each after a line
		"tree X, linked from call C of tree T". A linked tree FILE
		does not hold is said so and skipped.
`

func runReplay(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	links := fs.Bool("follow-links", false, "")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageErr("want FILE and TREE, e.g. skulk-host replay calls.db 1a2b3c4d-1")
	}
	st, err := openStore(pos[0], storeRead)
	if err != nil {
		return err // a missing journal: "cannot open the journal FILE: no such file"
	}
	defer st.Close()
	r, err := replayTree(ctx, st, pos[1])
	if errors.Is(err, calllog.ErrNoTree) {
		return statusErr(ExitFailure, "the journal %s has no events of tree %q", pos[0], pos[1])
	}
	if err != nil {
		return statusErr(ExitFailure, "cannot read the journal %s: %v", pos[0], err)
	}
	if *links {
		fmt.Fprintf(env.Stdout, "tree %s\n", termsafe.Escape(pos[1]))
	}
	printReplay(env.Stdout, r, pos[0])
	if !*links {
		return nil
	}
	q := newLinkQueue(pos[1])
	queueLinks(q, pos[1], r)
	for {
		lt, ok := q.pop()
		if !ok {
			break
		}
		fmt.Fprintf(env.Stdout, "tree %s, linked from call %s of tree %s\n", termsafe.Escape(lt.tree), termsafe.Escape(lt.from.Call), termsafe.Escape(lt.from.Tree))
		r, err := replayTree(ctx, st, lt.tree)
		if errors.Is(err, calllog.ErrNoTree) {
			fmt.Fprintf(env.Stdout, "  not in the journal %s\n", termsafe.Escape(pos[0]))
			continue
		}
		if err != nil {
			return statusErr(ExitFailure, "cannot read the journal %s: %v", pos[0], err)
		}
		printReplay(env.Stdout, r, pos[0])
		queueLinks(q, lt.tree, r)
	}
	if q.dropped > 0 {
		fmt.Fprintf(env.Stdout, "%d more linked tree(s) not replayed (at most %d are)\n", q.dropped, maxLinkedTrees)
	}
	return nil
}

// replayTree replays tree from st within replay's bounds.
func replayTree(ctx context.Context, st journalStore, tree string) (*replay.Tree, error) {
	return replay.FromStore(ctx, st, tree, &replay.Replayer{MaxText: replayMaxText, MaxValue: replayMaxValue, MaxKept: replayMaxKept})
}

// queueLinks queues the trees the calls of r (the replay of tree) link to.
func queueLinks(q *linkQueue, tree string, r *replay.Tree) {
	for _, c := range r.Calls {
		q.add(tree, c.Call, c.Remote)
		q.add(tree, c.Call, c.Caller)
	}
}

// printReplay prints each call of r: a header line, its trace (when its
// events name one), its links to other trees (path is the journal they
// are read from), its text, its end.
func printReplay(w io.Writer, r *replay.Tree, path string) {
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
		if c.TraceID != "" {
			// Hex digits only: a journal's ids were checked when read.
			fmt.Fprintf(w, "  trace: %s span %s\n", c.TraceID, c.SpanID)
		}
		if l := c.Caller; l != nil {
			fmt.Fprintf(w, "  caller: call %s of tree %s\n", termsafe.Escape(l.Call), termsafe.Escape(l.Tree))
		}
		if l := c.Remote; l != nil {
			fmt.Fprintf(w, "  remote: tree %s (skulk-host replay %s %s)\n", termsafe.Escape(l.Tree), termsafe.Escape(path), termsafe.Escape(l.Tree))
		}
		if c.Text != "" {
			fmt.Fprintf(w, "  text: %s", strconv.Quote(c.Text))
			if more := c.TextBytes - len(c.Text); more > 0 {
				fmt.Fprintf(w, " (and %d more bytes not shown)", more)
			}
			fmt.Fprintln(w)
		}
		printReplayMedia(w, c)
		switch {
		case !c.Ended:
			fmt.Fprintln(w, "  running (no end kept)")
		case c.Outcome.Kind == calllog.KindUnknown:
			fmt.Fprintln(w, "  unknown: the journal kept no end of it; the tree was taken over")
		case c.Outcome.Kind == calllog.KindCompleted:
			v := "(no value)"
			if res := c.Outcome.Result; res != nil {
				v = termsafe.Escape(compactJSON(res))
			} else if c.ResultBytes > 0 {
				v = fmt.Sprintf("(a value of %d bytes, not shown)", c.ResultBytes)
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
	if r.Corrupt > 0 {
		fmt.Fprintf(w, "corrupt: %d event(s) are kept but cannot be read\n", r.Corrupt)
	}
}

const journalUsage = "journal list FILE [--json] [--since T] [--until T] [--state S] | journal prune FILE [--older-than D] [--max-bytes N] | journal takeover FILE TREE"

var journalHelp = `
Journal lists, prunes and takes over the call trees kept in the journal
FILE (a SQLite file or a nats:// store URL, as call --journal writes it).

	skulk-host journal list FILE [--json] [--since T] [--until T] [--state S]

List prints one line per tree, newest first (by when the tree began): its
id, its tool (or program name), when its first kept event was recorded,
its state, and its kept event count (and, when events are missing, the
last event number: events numbered but not kept, or pruned). The state is
done, failed or cancelled once the tree's outermost call has ended,
unknown once 'journal takeover' ended it (its host died before its end
was kept), else running. Nothing is written to FILE.

	--json
		print one JSON object per line: tree, tool, program, start,
		last (RFC 3339), state, events, last_seq, bytes (the events'
		stored size; 0 for a JetStream journal).
	--since T, --until T
		only the trees that began at or after T, before T (RFC 3339,
		or a duration such as 24h meaning that long ago).
	--state S
		only the trees in state S: running, ended (any end), done,
		failed, cancelled or unknown.

	skulk-host journal prune FILE [--older-than D] [--max-bytes N]

Prune removes whole trees: those whose last kept event is older than D
(--older-than, e.g. 168h), and for a SQLite journal the oldest trees until
the kept events take at most N bytes (--max-bytes, e.g. 512MiB; never the
newest tree). A pruned tree is gone: replay, follow, asif export and
journal takeover say the journal has no such tree. A SQLite file does not
shrink (its pages are reused for new trees). A JetStream journal's size is
bounded by its stream's max_bytes instead (max_bytes=N in the URL when the
stream is made), which drops the oldest events one by one.

	skulk-host journal takeover FILE TREE

Takeover claims the call tree TREE for a new writer — the way a restarted
host continues a tree whose host died — and records, for every call the
journal shows started and not ended, that its outcome is unknown (an
"unknown" end, steps before their callers): the journal does not say how
such a call ended, so no failure is made up. The previous writer is
fenced from then on: it can no longer append to the tree. The events it
kept are printed as JSON lines (docs/events.md); followers see the
takeover.

Prune and takeover never create FILE or a stream; list never writes. A
file that is not a Skulk journal (another application's database) is
refused and left unchanged.
`

func runJournal(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		return usageErr("want a subcommand: journal list, prune or takeover")
	}
	switch args[0] {
	case "list":
		return runJournalList(ctx, args[1:], env)
	case "prune":
		return runJournalPrune(ctx, args[1:], env)
	case "takeover":
		return runJournalTakeover(ctx, args[1:], env)
	case "-h", "-help", "--help", "help":
		return flag.ErrHelp
	}
	return usageErr("unknown subcommand: want journal list, prune or takeover")
}

// timeFlag is a point in time on the command line: RFC 3339, or a
// duration meaning that long before now.
type timeFlag struct{ t time.Time }

func (f *timeFlag) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f *timeFlag) Set(v string) error {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		f.t = t
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return errors.New("want an RFC 3339 time or a duration such as 24h")
	}
	f.t = time.Now().Add(-d)
	return nil
}

// treeState names a listed tree's state.
func treeState(ti calllog.TreeInfo) string {
	if ti.End == 0 {
		return "running"
	}
	return ti.End.String()
}

func runJournalList(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("journal list", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	var since, until timeFlag
	fs.Var(&since, "since", "")
	fs.Var(&until, "until", "")
	state := fs.String("state", "", "")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want: journal list FILE")
	}
	switch *state {
	case "", "running", "ended", "done", "failed", "cancelled", "unknown":
	default:
		return usageErr("invalid value for flag %s: want running, ended, done, failed, cancelled or unknown", dashed("state"))
	}
	st, err := openStore(pos[0], storeRead)
	if errors.Is(err, errNotWritten) {
		// A journal not written yet holds no tree: nothing listed, status
		// 0, and a word on stderr for a name mistyped.
		fmt.Fprintf(env.Stderr, "skulk-host journal: no journal %s written yet: no call trees\n", termsafe.Escape(pos[0]))
		return nil
	}
	if err != nil {
		return err
	}
	defer st.Close()
	trees, err := st.ListTrees(ctx)
	if err != nil {
		return statusErr(ExitFailure, "reading the journal %s: %v", pos[0], err)
	}
	enc := json.NewEncoder(env.Stdout)
	for _, ti := range trees {
		s := treeState(ti)
		switch {
		case !since.t.IsZero() && ti.Start.Before(since.t),
			!until.t.IsZero() && !ti.Start.Before(until.t),
			*state == "ended" && s == "running",
			*state != "" && *state != "ended" && *state != s:
			continue
		}
		if *asJSON {
			line := struct {
				Tree    string     `json:"tree"`
				Tool    string     `json:"tool"`
				Program bool       `json:"program,omitempty"`
				Start   *time.Time `json:"start"`
				Last    *time.Time `json:"last"`
				State   string     `json:"state"`
				Events  uint64     `json:"events"`
				LastSeq uint64     `json:"last_seq"`
				Bytes   int64      `json:"bytes"`
			}{ti.Tree, ti.Tool, ti.Program, timeOrNil(ti.Start), timeOrNil(ti.Last), s, ti.Events, ti.LastSeq, ti.Bytes}
			if err := enc.Encode(line); err != nil {
				return statusErr(ExitFailure, "writing the output: %v", err)
			}
			continue
		}
		start := "-"
		if !ti.Start.IsZero() {
			start = ti.Start.UTC().Format(time.RFC3339)
		}
		tool := ti.Tool
		if tool == "" {
			tool = "-"
		}
		line := fmt.Sprintf("%s  %s  %s  %s  %d event(s)", termsafe.Escape(ti.Tree), termsafe.Escape(tool), start, s, ti.Events)
		if ti.LastSeq > ti.Events {
			line += fmt.Sprintf(" of %d", ti.LastSeq)
		}
		if _, err := fmt.Fprintln(env.Stdout, line); err != nil {
			return statusErr(ExitFailure, "writing the output: %v", err)
		}
	}
	return nil
}

// timeOrNil is t for JSON, nil (null) when zero.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func runJournalPrune(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("journal prune", flag.ContinueOnError)
	olderThan := fs.Duration("older-than", 0, "")
	var maxBytes byteSize
	fs.Var(&maxBytes, "max-bytes", "")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want: journal prune FILE --older-than D and/or --max-bytes N")
	}
	if *olderThan < 0 || (*olderThan == 0 && maxBytes == 0) {
		return usageErr("journal prune wants --older-than (a positive duration) or --max-bytes")
	}
	st, err := openStore(pos[0], storeExisting)
	if err != nil {
		return err
	}
	defer st.Close()
	switch st := st.(type) {
	case *sqlitestore.Store:
		p, err := st.Prune(ctx, sqlitestore.Retention{MaxAge: *olderThan, MaxBytes: int64(maxBytes)})
		if err != nil {
			return statusErr(ExitFailure, "pruning the journal %s: %v", pos[0], err)
		}
		fmt.Fprintf(env.Stderr, "skulk-host journal: pruned %d tree(s), %d event(s), %s\n", p.Trees, p.Events, formatSize(p.Bytes))
	case *jetstreamstore.Store:
		if maxBytes != 0 {
			return usageErr("--max-bytes is for a SQLite journal: a JetStream journal is bounded by its stream's max_bytes")
		}
		p, err := st.Prune(ctx, *olderThan)
		if err != nil {
			return statusErr(ExitFailure, "pruning the journal: %v", err)
		}
		fmt.Fprintf(env.Stderr, "skulk-host journal: pruned %d tree(s), %d message(s)\n", p.Trees, p.Messages)
	}
	return nil
}

func runJournalTakeover(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("journal takeover", flag.ContinueOnError)
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageErr("want: journal takeover FILE TREE")
	}
	st, err := openStore(pos[0], storeExisting)
	if err != nil {
		if errors.Is(err, errNotWritten) {
			return statusErr(ExitFailure, "taking over tree %s: %v: %v", pos[1], calllog.ErrNoTree, err)
		}
		return err
	}
	defer st.Close()
	writer := newWriterName()
	kept, err := calllog.TakeOver(ctx, st, pos[1], writer)
	if err != nil {
		return statusErr(ExitFailure, "taking over tree %s: %v", pos[1], err)
	}
	for _, e := range kept {
		b, err := e.MarshalJSON()
		if err != nil {
			return statusErr(ExitFailure, "%v", err)
		}
		env.Stdout.Write(append(b, '\n'))
	}
	fmt.Fprintf(env.Stderr, "skulk-host journal: tree %s taken over by writer %s: %d event(s) recorded\n", pos[1], writer, len(kept))
	return nil
}

// newWriterName returns a random 16-hex-digit writer name, as a host's.
func newWriterName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
