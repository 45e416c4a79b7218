// Package jetstreamstore is a calllog.EventStore on NATS JetStream: a
// tree's log kept by a (possibly replicated) stream, followed from any
// machine that reaches the NATS servers. SQLite (calllog/sqlitestore)
// stays the embedded default; this store is for a log that must outlive
// one machine.
//
// Each tree has its own subjects in one stream, created on first use:
//
//	PREFIX.TREE.n  the tree's first claim (epoch 1)
//	PREFIX.TREE.c  every later claim (a takeover)
//	PREFIX.TREE.e  the events, one message each (the event's JSON form)
//
// Every message carries its writer and claim epoch in headers, so the
// tree's last message says who holds the tree and how far its numbering
// goes. Claim and Keep append with the header
// Nats-Expected-Last-Subject-Sequence over PREFIX.TREE.> (the stream
// sequence of the tree's last message, claims included): an append made
// by a writer that has not seen the latest claim is refused by the
// server, never interleaved. A Keep of several events is one atomic batch
// (nats-server 2.12 or later), so it is kept whole or not at all. The
// store keeps no lock of its own anywhere: the stream's sequence is the
// fence.
//
// EventsAfter reads through an ordered consumer that stays open between
// calls while a reader goes on from where it stopped (calllog.Follow),
// after checking with the stream leader how far the tree's log goes, so
// an empty answer always means nothing more is kept. Events the stream's
// retention dropped are simply absent: a reader sees the gap.
//
//	st, err := jetstreamstore.Open(ctx, "nats://127.0.0.1:4222/CALLS", jetstreamstore.Options{})
//	defer st.Close()
//	h, err := host.Start(ctx, host.Config{Command: cmd,
//		CallLog: calllog.Options{Journal: &calllog.Journal{Store: st, Required: true}}})
package jetstreamstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/internal/storedevent"
)

// Headers of the store's messages.
const (
	hdrTree   = "Skulk-Tree"   // claims: the tree's id
	hdrWriter = "Skulk-Writer" // every message: the claim's writer
	hdrEpoch  = "Skulk-Epoch"  // every message: the claim's epoch
	hdrSeq    = "Skulk-Seq"    // events: the event's Seq
	hdrLast   = "Skulk-Last"   // claims: the highest Seq kept when claimed

	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// Bounds.
const (
	// maxAtomicBatch is the most messages one atomic batch carries: the
	// server's default max_batch_size (1,000). A Keep of more events is
	// kept in pieces of this size, in order (see Keep); a server set to a
	// smaller max_batch_size refuses a piece (errTooLargeBatch), and the
	// Store halves its pieces until they fit.
	maxAtomicBatch = 1000
	// maxCursors bounds the ordered consumers a Store keeps open between
	// EventsAfter calls (one per tree being read); past it the oldest
	// is stopped.
	maxCursors = 8
	// cursorBuffer bounds the events one open consumer holds in the
	// client before they are asked for; its bytes are bounded too, by
	// the larger of storedevent.PageBytes and the server's max_payload
	// (cursorBytes).
	cursorBuffer = 512
	// smallRead is the most events a read from the start of an ended tree
	// takes from the stream leader one request each instead of opening a
	// consumer: a small tree read whole leaves nothing on the server.
	smallRead = 8
	// deleteTimeout bounds the request that deletes a reader's consumer.
	deleteTimeout = 2 * time.Second
	// maxStates bounds the trees whose last position a Store remembers
	// for its own appends; past it one is forgotten (and read again from
	// the stream when next appended to).
	maxStates = 4096
	// deliverWait bounds the wait for an event the stream leader says is
	// kept but the consumer has not delivered yet (it was placed on a
	// replica still catching up); past it the events are read from the
	// leader one by one (readLeader).
	deliverWait = 2 * time.Second
	// leaderPage bounds the events one readLeader call returns.
	leaderPage = 256
	// attemptTimeout bounds one request of a write (a read of the tree's
	// last message, an append): a request sent just before its server
	// went away is never answered, and without a bound of its own it
	// would hold the whole Keep until the caller's context ends instead
	// of being sent again over the reconnected connection. It is also
	// what a leader change costs a required journal beyond the election:
	// an append sent to a leader that is stopping is lost, and is sent
	// again only when this bound passes (docs/performance.md measures a
	// clean stop of the leader at 1.0 s with 1 s, 5.0 s with 5 s). An
	// append takes a few milliseconds on a healthy R3 stream; one that
	// takes longer is sent again, which is safe: the resend is fenced by
	// the tree's last message, and one kept already is skipped.
	attemptTimeout = 1 * time.Second
	// inactiveThreshold is how long the server keeps a reader's consumer
	// that nobody pulls from (a reader that died).
	inactiveThreshold = 30 * time.Second
	// duplicateWindow is how long a new stream remembers a claim's
	// message id (a client's resend of it is answered with the first
	// answer).
	duplicateWindow = 2 * time.Minute
)

// Options configures Open. The zero value connects with no credentials
// and creates (when missing) an R1 file stream that keeps every event.
type Options struct {
	// Connect are options of the NATS connection Open dials
	// (nats.UserCredentials, nats.ClientCert, nats.RootCAs, a name...).
	Connect []nats.Option
	// Subject is the prefix of the stream's subjects; "" means
	// "skulk.calllog." followed by the stream's name.
	Subject string
	// Replicas is the number of servers a new stream is kept on; 0
	// means the URL's replicas parameter, or 1.
	Replicas int
	// MaxAge bounds how long a new stream keeps an event; 0 means the
	// URL's max_age, or forever.
	MaxAge time.Duration
	// MaxBytes bounds a new stream's size, oldest events dropped first;
	// 0 means the URL's max_bytes, or no bound.
	MaxBytes int64
	// ReadOnly opens the stream for reading (followers): it is never
	// created (a missing one is ErrNoStream), and Claim and Keep fail with
	// calllog.ErrStoreUnusable.
	ReadOnly bool
	// MustExist never creates the stream (a missing one is ErrNoStream)
	// but may write to it: for commands that act only on trees kept
	// already (a takeover).
	MustExist bool
}

// ErrNoStream is the error of a read-only (or MustExist) Open of a stream
// that does not exist.
var ErrNoStream = errors.New("jetstreamstore: no such stream")

// Store is a calllog.EventStore in one JetStream stream. It is safe for
// concurrent use; Close it when done.
type Store struct {
	nc     *nats.Conn
	ownNC  bool
	js     jetstream.JetStream
	stream jetstream.Stream
	name   string
	prefix string
	ro     bool
	closed atomic.Bool
	// batchMax is the most messages of one atomic batch (maxAtomicBatch,
	// or less for a server whose max_batch_size is smaller).
	batchMax atomic.Int64

	mu      sync.Mutex           // guards the fields below
	states  map[string]treeState // the tree's last message, as this Store appended it
	cursors map[string]*cursor   // open readers, not in use
	order   []string             // cursors' trees, oldest first
}

var _ calllog.EventStore = (*Store)(nil)

// ErrURL is the error of a store URL Open cannot use; it is wrapped
// with the part at fault.
var ErrURL = errors.New("jetstreamstore: bad store URL")

// Open connects to the NATS servers of url and opens (creating it when
// missing) the stream it names:
//
//	nats://HOST:PORT[,HOST:PORT...]/STREAM[?PARAMS]
//	tls://HOST:PORT/STREAM[?PARAMS]
//
// PARAMS are replicas=N, max_age=DURATION, max_bytes=N (used only when
// the stream is created) and, for credentials, the names of files:
// creds=FILE (a NATS credentials file), nkey=FILE (an nkey seed),
// tls_cert=FILE and tls_key=FILE (a client certificate), tls_ca=FILE.
// A URL with a user or password is refused: secrets belong in files or
// in opts.Connect, not in a URL that shows in process lists.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	u, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	copts := append(u.connect, opts.Connect...)
	copts = append([]nats.Option{nats.Name("skulk calllog"), nats.MaxReconnects(-1)}, copts...)
	nc, err := nats.Connect(strings.Join(u.servers, ","), copts...)
	if err != nil {
		return nil, fmt.Errorf("jetstreamstore: connect: %w", err)
	}
	if opts.Replicas == 0 {
		opts.Replicas = u.replicas
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = u.maxAge
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = u.maxBytes
	}
	s, err := New(ctx, nc, u.stream, opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.ownNC = true
	return s, nil
}

// New opens (creating it when missing) the stream named stream over an
// existing connection, which Close leaves open. opts.Connect is not used.
func New(ctx context.Context, nc *nats.Conn, stream string, opts Options) (*Store, error) {
	if !validName(stream) {
		return nil, fmt.Errorf("%w: the stream name must be letters, digits, '-' or '_'", ErrURL)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstreamstore: %w", err)
	}
	prefix := opts.Subject
	if prefix == "" {
		prefix = "skulk.calllog." + stream
	}
	cfg := StreamConfig(stream, prefix, opts)
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) && (opts.ReadOnly || opts.MustExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoStream, stream)
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // created meanwhile by another store
			st, err = js.Stream(ctx, stream)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstreamstore: open stream %s: %w", stream, err)
	}
	if err := checkStream(st.CachedInfo().Config, prefix); err != nil {
		return nil, err
	}
	s := &Store{nc: nc, js: js, stream: st, name: stream, prefix: prefix, ro: opts.ReadOnly,
		states: map[string]treeState{}, cursors: map[string]*cursor{}}
	s.batchMax.Store(maxAtomicBatch)
	return s, nil
}

// StreamConfig is the configuration Open gives a stream it creates
// (docs/events.md, "The JetStream store", says what each setting costs):
// file storage; limits retention, oldest dropped first; no limit per
// subject (each tree's events share a subject); replicas, max age and
// max bytes from opts; a 2-minute duplicate window (the max age when
// that is shorter: the server refuses a longer one); atomic batches on;
// direct gets off, so that every read the store's rules depend on is
// answered by the stream's leader.
func StreamConfig(name, prefix string, opts Options) jetstream.StreamConfig {
	replicas := opts.Replicas
	if replicas <= 0 {
		replicas = 1
	}
	maxBytes := opts.MaxBytes
	if maxBytes <= 0 {
		maxBytes = -1
	}
	dups := duplicateWindow
	if opts.MaxAge > 0 && opts.MaxAge < dups {
		dups = opts.MaxAge
	}
	return jetstream.StreamConfig{
		Name:               name,
		Description:        "Skulk call log (calllog/jetstreamstore)",
		Subjects:           []string{prefix + ".>"},
		Retention:          jetstream.LimitsPolicy,
		Discard:            jetstream.DiscardOld,
		MaxMsgs:            -1,
		MaxBytes:           maxBytes,
		MaxAge:             opts.MaxAge,
		MaxMsgsPerSubject:  -1,
		Storage:            jetstream.FileStorage,
		Replicas:           replicas,
		Duplicates:         dups,
		AllowAtomicPublish: true,
		AllowDirect:        false,
	}
}

// checkStream refuses a stream whose settings break the store's rules.
func checkStream(c jetstream.StreamConfig, prefix string) error {
	covered := false
	for _, s := range c.Subjects {
		if s == prefix+".>" || s == ">" {
			covered = true
		}
	}
	switch {
	case !covered:
		return fmt.Errorf("jetstreamstore: stream %s: %w: its subjects do not include %s.>", c.Name, calllog.ErrStoreUnusable, prefix)
	case !c.AllowAtomicPublish:
		return fmt.Errorf("jetstreamstore: stream %s: %w: allow_atomic is off (atomic batches need nats-server 2.12 or later)", c.Name, calllog.ErrStoreUnusable)
	case c.MaxMsgsPerSubject > 0:
		return fmt.Errorf("jetstreamstore: stream %s: %w: max_msgs_per_subject would drop a tree's events", c.Name, calllog.ErrStoreUnusable)
	case c.Retention != jetstream.LimitsPolicy:
		return fmt.Errorf("jetstreamstore: stream %s: %w: retention must be limits", c.Name, calllog.ErrStoreUnusable)
	}
	return nil
}

// Close stops the store's readers and, when Open dialled it, closes the
// connection; later calls fail with calllog.ErrStoreUnusable.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	cs := s.cursors
	s.cursors, s.order = map[string]*cursor{}, nil
	s.mu.Unlock()
	for _, c := range cs {
		c.stop()
	}
	if s.ownNC {
		s.nc.Close()
	}
	return nil
}

// token is tree as one subject token: itself when it is made of letters,
// digits, '-' and '_', else '~' and its base64url form (no '~' in that
// alphabet, so the two forms never meet).
func token(tree string) string {
	if validName(tree) {
		return tree
	}
	return "~" + base64.RawURLEncoding.EncodeToString([]byte(tree))
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func (s *Store) subject(tree, kind string) string { return s.prefix + "." + token(tree) + "." + kind }

// treeState is where a tree's log stands: its last message.
type treeState struct {
	exists    bool
	streamSeq uint64 // the stream sequence of the tree's last message
	writer    string // the claim under which it was appended
	epoch     uint64
	last      uint64 // the highest event Seq kept
	msgID     string // the message's Nats-Msg-Id (claims only)
}

// usable fails once the store is closed, and for writes when it is
// read-only.
func (s *Store) usable(op string) error {
	if s.closed.Load() {
		return fmt.Errorf("jetstreamstore: %s: %w: closed", op, calllog.ErrStoreUnusable)
	}
	if s.ro {
		return fmt.Errorf("jetstreamstore: %s: %w: opened read-only", op, calllog.ErrStoreUnusable)
	}
	return nil
}

func (s *Store) readable(op string) error {
	if s.closed.Load() {
		return fmt.Errorf("jetstreamstore: %s: %w: closed", op, calllog.ErrStoreUnusable)
	}
	return nil
}

// classify wraps the errors that make the store unusable with
// calllog.ErrStoreUnusable; others (no answer, a server away) are
// returned as they are, to be sent again.
func (s *Store) classify(op string, err error) error {
	if err == nil {
		return nil
	}
	if s.closed.Load() || errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("jetstreamstore: %s: %w: closed", op, calllog.ErrStoreUnusable)
	}
	if errors.Is(err, nats.ErrMaxPayload) { // a claim's message, or a max_payload lowered since
		return fmt.Errorf("jetstreamstore: %s: %w: a message exceeds the server's max_payload: %w", op, calllog.ErrStoreUnusable, err)
	}
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode {
		case jetstream.JSErrCodeStreamNotFound, jetstream.JSErrCodeJetStreamNotEnabled,
			jetstream.JSErrCodeJetStreamNotEnabledForAccount, jetstream.JSErrCodeStreamMessageExceedsMaximum,
			errAtomicDisabled:
			return fmt.Errorf("jetstreamstore: %s: %w: %w", op, calllog.ErrStoreUnusable, err)
		}
	}
	return fmt.Errorf("jetstreamstore: %s: %w", op, err)
}

// Server error codes of atomic batches (nats-server 2.12) that nats.go
// does not name.
const (
	// errAtomicDisabled: the stream's allow_atomic was turned off.
	errAtomicDisabled jetstream.ErrorCode = 10174
	// errTooLargeBatch: the batch has more messages than the server's
	// max_batch_size.
	errTooLargeBatch jetstream.ErrorCode = 10199
)

// shrunk halves the Store's batch size after the server refused a batch of
// n messages as too large, and reports whether err was that refusal (and
// a smaller batch is possible).
func (s *Store) shrunk(err error, n int) bool {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) || ae.ErrorCode != errTooLargeBatch || n < 2 {
		return false
	}
	for {
		cur := s.batchMax.Load()
		next := min(cur, int64(n/2))
		if next >= cur || s.batchMax.CompareAndSwap(cur, next) {
			return true
		}
	}
}

// wrongLast reports whether err is the server's refusal of an expected
// last sequence: code 10071, or 10164, which replicated streams answer
// when another append to the same subjects is still being agreed on.
func wrongLast(err error) bool {
	var ae *jetstream.APIError
	return errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// read asks the stream leader for the tree's last message.
func (s *Store) read(ctx context.Context, op, tree string) (treeState, error) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	m, err := s.stream.GetLastMsgForSubject(ctx, s.prefix+"."+token(tree)+".>")
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return treeState{}, nil
	}
	if err != nil {
		return treeState{}, s.classify(op, err)
	}
	st, err := stateOf(m.Header, m.Subject)
	if err != nil {
		return treeState{}, fmt.Errorf("jetstreamstore: %s: %w: %w", op, calllog.ErrStoreUnusable, err)
	}
	st.streamSeq = m.Sequence
	st.msgID = m.Header.Get(jetstream.MsgIDHeader)
	return st, nil
}

// stateOf reads a message's claim headers.
func stateOf(h nats.Header, subject string) (treeState, error) {
	epoch, err := strconv.ParseUint(h.Get(hdrEpoch), 10, 64)
	if err != nil || h.Get(hdrWriter) == "" {
		return treeState{}, errors.New("a message on the tree's subjects has no claim headers")
	}
	name := hdrLast
	if strings.HasSuffix(subject, ".e") {
		name = hdrSeq
	}
	last, err := strconv.ParseUint(h.Get(name), 10, 64)
	if err != nil {
		return treeState{}, errors.New("a message on the tree's subjects has no sequence header")
	}
	return treeState{exists: true, writer: h.Get(hdrWriter), epoch: epoch, last: last}, nil
}

func (s *Store) remember(tree string, st treeState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.states[tree]; !ok && len(s.states) >= maxStates {
		for k := range s.states {
			delete(s.states, k)
			break
		}
	}
	s.states[tree] = st
}

func (s *Store) remembered(tree string) (treeState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.states[tree]
	return st, ok
}

func (s *Store) forget(tree string) {
	s.mu.Lock()
	delete(s.states, tree)
	s.mu.Unlock()
}

// retryPause is the first wait before appending again after a refusal
// (code 10164 is an append to the tree still in flight on a replicated
// stream) or an error.
const retryPause = 5 * time.Millisecond

// Claim implements calllog.EventStore: it appends a claim with the next
// epoch, fenced by the tree's last message as read, and reads again when
// another append got in first. A claim kept whose answer was lost (a
// server away just then) is found on that read, by its message id, and
// is the answer: the Claim takes one epoch, not two.
func (s *Store) Claim(ctx context.Context, tree, writer string) (calllog.Claim, error) {
	if err := s.usable("claim"); err != nil {
		return calllog.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return calllog.Claim{}, err
	}
	id := nuid.Next() + "-" // one Claim: a resend of its message is deduplicated
	delay := retryPause
	for {
		st, err := s.read(ctx, "claim", tree)
		if err != nil {
			if errors.Is(err, calllog.ErrStoreUnusable) || wait(ctx, &delay) != nil {
				return calllog.Claim{}, err
			}
			continue
		}
		if strings.HasPrefix(st.msgID, id) { // this Claim's own message, kept though not answered
			s.remember(tree, st)
			return calllog.Claim{Tree: tree, Writer: writer, Epoch: st.epoch, Last: st.last}, nil
		}
		c := calllog.Claim{Tree: tree, Writer: writer, Epoch: st.epoch + 1, Last: st.last}
		kind := "c"
		if !st.exists {
			kind = "n"
		}
		m := s.claimMsg(c, kind)
		m.Header.Set(jetstream.MsgIDHeader, id+strconv.FormatUint(c.Epoch, 10))
		ack, err := s.publish(ctx, tree, st.streamSeq, []*nats.Msg{m})
		if err != nil {
			if !wrongLast(err) {
				err = s.classify("claim", err)
				if errors.Is(err, calllog.ErrStoreUnusable) {
					return calllog.Claim{}, err
				}
			}
			if wait(ctx, &delay) != nil {
				return calllog.Claim{}, err
			}
			continue
		}
		s.remember(tree, treeState{exists: true, streamSeq: ack.Sequence, writer: writer, epoch: c.Epoch, last: c.Last})
		return c, nil
	}
}

// maxRetryDelay bounds the wait between two attempts after an error the
// store sends again by itself (a server away, an election, an answer
// lost), until its ctx is done.
const maxRetryDelay = 250 * time.Millisecond

// wait waits *delay, doubling it up to maxRetryDelay; ctx.Err() when ctx
// is done first.
func wait(ctx context.Context, delay *time.Duration) error {
	t := time.NewTimer(*delay)
	defer t.Stop()
	*delay = min(2**delay, maxRetryDelay)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) claimMsg(c calllog.Claim, kind string) *nats.Msg {
	m := nats.NewMsg(s.subject(c.Tree, kind))
	m.Header.Set(hdrTree, c.Tree)
	m.Header.Set(hdrWriter, c.Writer)
	m.Header.Set(hdrEpoch, strconv.FormatUint(c.Epoch, 10))
	m.Header.Set(hdrLast, strconv.FormatUint(c.Last, 10))
	return m
}

// eventMsgs returns the messages that append events under c. An event
// whose message would exceed the server's max_payload is sent without its
// content (its payload's value, marked ValueDropped, and its media's
// data), and left out when even that does not fit: a gap in the tree's
// Seq that readers are shown as a lost event. Refusing it instead would
// make the store unusable and stop the tree's writer, losing every later
// start and end of the tree.
func (s *Store) eventMsgs(c calllog.Claim, events []calllog.Event) ([]*nats.Msg, error) {
	subj := s.subject(c.Tree, "e")
	epoch := strconv.FormatUint(c.Epoch, 10)
	// publish adds the expected last sequence (naming the tree's
	// subjects) and the batch headers: room is held for them.
	limit := int(s.nc.MaxPayload()) - (headerRoom + len(subj))
	out := make([]*nats.Msg, 0, len(events))
	for _, e := range events {
		m, err := eventMsg(subj, c.Writer, epoch, e)
		if err != nil {
			return nil, err
		}
		if m.Size() > limit {
			if m, err = eventMsg(subj, c.Writer, epoch, withoutContent(e)); err != nil {
				return nil, err
			}
			if m.Size() > limit {
				continue // lost: its Seq is a gap
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// headerRoom is the room a message holds, beyond its subject's length,
// for the headers publish adds to it.
const headerRoom = 512

func eventMsg(subj, writer, epoch string, e calllog.Event) (*nats.Msg, error) {
	b, err := e.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("jetstreamstore: keep: %w", err)
	}
	m := nats.NewMsg(subj)
	m.Data = b
	m.Header.Set(hdrWriter, writer)
	m.Header.Set(hdrEpoch, epoch)
	m.Header.Set(hdrSeq, strconv.FormatUint(e.Seq, 10))
	return m, nil
}

// withoutContent returns e without its payload's value (marked
// ValueDropped) and its media's data.
func withoutContent(e calllog.Event) calllog.Event {
	if e.Payload != nil && e.Payload.Value != nil {
		c := *e.Payload
		c.Value, c.ValueDropped = nil, true
		e.Payload = &c
	}
	if e.Media != nil && e.Media.Data != nil {
		m := *e.Media
		m.Data = nil
		e.Media = &m
	}
	return e
}

// publish appends msgs to the tree, all or none, if the tree's last
// message is still the one at stream sequence expect (0: none). One
// message is a plain publish; several are an atomic batch whose first
// message carries the expectation and whose last commits it.
func (s *Store) publish(ctx context.Context, tree string, expect uint64, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	first := msgs[0]
	first.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
	first.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, s.prefix+"."+token(tree)+".>")
	if len(msgs) == 1 {
		return s.js.PublishMsg(ctx, first)
	}
	id := nuid.Next()
	for i, m := range msgs {
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i == len(msgs)-1 {
			m.Header.Set(hdrBatchCommit, "1")
			return s.js.PublishMsg(ctx, m)
		}
		if err := s.nc.PublishMsg(m); err != nil {
			return nil, err
		}
	}
	panic("unreachable")
}

// Keep implements calllog.EventStore. The events not kept yet are
// appended in one atomic batch fenced by the tree's last message: when
// another append got in first (another claim, or this writer's own
// earlier send whose answer was lost), the tree is read again and the
// batch either is refused (ErrFenced) or goes on after what is kept. A
// batch of more than 1,000 events is kept in atomic pieces of 1,000, in
// order: a failure between two leaves the first pieces kept, which a
// resend completes. An event too large for the server's max_payload is
// kept without its content (Content.ValueDropped, and its media without
// data), or left out when even that does not fit (a gap shown to readers
// as a lost event), never refused.
func (s *Store) Keep(ctx context.Context, c calllog.Claim, events []calllog.Event) error {
	return s.keep(ctx, "keep", c, events)
}

func (s *Store) keep(ctx context.Context, op string, c calllog.Claim, events []calllog.Event) error {
	if err := s.usable(op); err != nil {
		return err
	}
	if err := storedevent.CheckBatch(c, events); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	st, ok := s.remembered(c.Tree)
	needRead := !ok || st.writer != c.Writer || st.epoch != c.Epoch
	delay := retryPause
	for {
		if needRead {
			var err error
			if st, err = s.read(ctx, op, c.Tree); err != nil {
				if errors.Is(err, calllog.ErrStoreUnusable) || wait(ctx, &delay) != nil {
					return err
				}
				continue
			}
			needRead = false
		}
		if !st.exists || st.writer != c.Writer || st.epoch != c.Epoch {
			s.forget(c.Tree)
			return calllog.ErrFenced
		}
		for len(events) > 0 && events[0].Seq <= st.last {
			events = events[1:] // kept already
		}
		if len(events) == 0 {
			return nil
		}
		piece := events[:min(len(events), int(s.batchMax.Load()))]
		msgs, err := s.eventMsgs(c, piece)
		if err != nil {
			return err
		}
		if len(msgs) == 0 { // every event of the piece too large: lost
			st.last = piece[len(piece)-1].Seq
			s.remember(c.Tree, st)
			continue
		}
		ack, err := s.publish(ctx, c.Tree, st.streamSeq, msgs)
		if err == nil {
			st.streamSeq, st.last = ack.Sequence, piece[len(piece)-1].Seq
			s.remember(c.Tree, st)
			delay = retryPause
			continue
		}
		if s.shrunk(err, len(msgs)) { // refused whole: nothing of it kept
			continue
		}
		// Refused (another append got in first) or not answered (it may
		// have been kept all the same): read where the tree stands, and
		// go on from there.
		s.forget(c.Tree)
		if !wrongLast(err) {
			if err = s.classify(op, err); errors.Is(err, calllog.ErrStoreUnusable) {
				return err
			}
		}
		if wait(ctx, &delay) != nil {
			return err
		}
		needRead = true
	}
}

// KeepNew implements calllog.EventStore's optional KeepNew: the tree's first claim and
// its first events in one atomic batch, expecting the tree to have no
// message at all.
func (s *Store) KeepNew(ctx context.Context, tree, writer string, events []calllog.Event) (calllog.Claim, error) {
	c := calllog.Claim{Tree: tree, Writer: writer, Epoch: 1}
	if err := s.usable("keep new"); err != nil {
		return calllog.Claim{}, err
	}
	if err := storedevent.CheckBatch(c, events); err != nil {
		return calllog.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return calllog.Claim{}, err
	}
	delay := retryPause
	for {
		piece := events[:min(len(events), int(s.batchMax.Load())-1)]
		msgs, err := s.eventMsgs(c, piece)
		if err != nil {
			return calllog.Claim{}, err
		}
		msgs = append([]*nats.Msg{s.claimMsg(c, "n")}, msgs...)
		ack, err := s.publish(ctx, tree, 0, msgs)
		if s.shrunk(err, len(msgs)) {
			continue
		}
		if err == nil {
			var last uint64
			if len(piece) > 0 {
				last = piece[len(piece)-1].Seq
			}
			s.remember(tree, treeState{exists: true, streamSeq: ack.Sequence, writer: writer, epoch: 1, last: last})
			break
		}
		if !wrongLast(err) {
			if err = s.classify("keep new", err); errors.Is(err, calllog.ErrStoreUnusable) {
				return calllog.Claim{}, err
			}
		}
		// Refused or not answered: the tree has messages now (another
		// writer's, or this one's, kept all the same) or still none.
		if wait(ctx, &delay) != nil {
			return calllog.Claim{}, err
		}
		st, rerr := s.read(ctx, "keep new", tree)
		switch {
		case rerr != nil:
			if errors.Is(rerr, calllog.ErrStoreUnusable) {
				return calllog.Claim{}, rerr
			}
			continue
		case !st.exists:
			continue
		case st.writer != writer:
			return calllog.Claim{}, calllog.ErrTreeExists
		}
		c.Epoch = st.epoch // this writer's own claim: a retry
		s.remember(tree, st)
		break
	}
	if err := s.keep(ctx, "keep new", c, events); err != nil {
		return calllog.Claim{}, err
	}
	return c, nil
}

// LatestTree returns the id of the tree whose first claim is the latest
// in the stream, or "" when there is none.
func (s *Store) LatestTree(ctx context.Context) (string, error) {
	if err := s.readable("latest tree"); err != nil {
		return "", err
	}
	m, err := s.stream.GetLastMsgForSubject(ctx, s.prefix+".*.n")
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", nil
	}
	if err != nil {
		return "", s.classify("latest tree", err)
	}
	return m.Header.Get(hdrTree), nil
}

// cursor is an ordered consumer of one tree's events, positioned after
// the last event it returned.
type cursor struct {
	tree string
	pos  uint64 // the Seq of the last event returned
	it   jetstream.MessagesContext
	cons jetstream.Consumer
	js   jetstream.JetStream
	name string // the stream's
}

// stop stops c's pull and deletes its consumer on the server, so that a
// reader leaves nothing behind (the consumer's inactive threshold is the
// backstop for a reader that dies first).
func (c *cursor) stop() {
	c.it.Stop()
	info := c.cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
	defer cancel()
	_ = c.js.DeleteConsumer(ctx, c.name, info.Name) // gone already, or the connection closed: the threshold removes it
}

// checkout takes the open cursor of tree positioned at after, if any.
func (s *Store) checkout(tree string, after uint64) *cursor {
	s.mu.Lock()
	c := s.cursors[tree]
	if c != nil {
		delete(s.cursors, tree)
		s.order = deleteString(s.order, tree)
	}
	s.mu.Unlock()
	if c != nil && c.pos != after {
		c.stop()
		return nil
	}
	return c
}

// checkin keeps c open for the next read of its tree.
func (s *Store) checkin(c *cursor) {
	var drop []*cursor
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		c.stop()
		return
	}
	if old := s.cursors[c.tree]; old != nil { // another reader's meanwhile
		drop = append(drop, old)
		s.order = deleteString(s.order, c.tree)
	}
	s.cursors[c.tree] = c
	s.order = append(s.order, c.tree)
	for len(s.order) > maxCursors {
		drop = append(drop, s.cursors[s.order[0]])
		delete(s.cursors, s.order[0])
		s.order = s.order[1:]
	}
	s.mu.Unlock()
	for _, d := range drop {
		d.stop()
	}
}

func deleteString(xs []string, x string) []string {
	for i, y := range xs {
		if y == x {
			return append(xs[:i], xs[i+1:]...)
		}
	}
	return xs
}

// EventsAfter implements calllog.EventStore. It asks the stream leader for
// the tree's last event first: when it is not after after, there is none
// (one round trip, the cost of a follower's poll of a quiet tree).
// Otherwise the events come from the tree's ordered consumer, opened at
// the first event after after (found by a binary search over the stream
// when no consumer is there already) and kept open for the next read.
func (s *Store) EventsAfter(ctx context.Context, tree string, after uint64, limit int) ([]calllog.Event, error) {
	if err := s.readable("events after"); err != nil {
		return nil, err
	}
	evSubj := s.subject(tree, "e")
	lastMsg, err := s.stream.GetLastMsgForSubject(ctx, evSubj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, s.classify("events after", err)
	}
	until, err := strconv.ParseUint(lastMsg.Header.Get(hdrSeq), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("jetstreamstore: events after: %w: an event message has no sequence header", calllog.ErrStoreUnusable)
	}
	if until <= after {
		return nil, nil
	}
	c := s.checkout(tree, after)
	if c == nil && after == 0 && until <= smallRead && endsTree(lastMsg.Data, tree) {
		// A small ended tree read whole: no consumer. A running one is
		// read through a consumer a follower goes on with.
		return s.readLeader(ctx, tree, after, lastMsg.Sequence, limit)
	}
	if c == nil {
		if c, err = s.open(ctx, tree, after, lastMsg.Sequence); err != nil {
			return nil, err
		}
	}
	out, err := s.collect(ctx, c, after, until, limit)
	var ce *calllog.CorruptEventError
	switch {
	case errors.Is(err, errNotDelivered):
		c.stop()
		return s.readLeader(ctx, tree, after, lastMsg.Sequence, limit)
	case err != nil && !errors.As(err, &ce):
		c.stop()
		return nil, err
	case len(out) > 0 && out[len(out)-1].Kind.IsEnd() && out[len(out)-1].Call == tree:
		c.stop() // the tree's end: nothing more to read (a takeover of an ended tree adds nothing)
	default:
		s.checkin(c)
	}
	return out, err
}

// open starts an ordered consumer of tree's events at the first one
// whose Seq is after after; lastStream is the stream sequence of the
// tree's last event.
func (s *Store) open(ctx context.Context, tree string, after, lastStream uint64) (*cursor, error) {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{s.subject(tree, "e")},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: inactiveThreshold,
		// A consumer lost (a server away) is made again at most this often
		// before Next fails, rather than being tried without end.
		MaxResetAttempts: 3,
	}
	if after > 0 {
		start, err := s.search(ctx, tree, after, lastStream)
		if err != nil {
			return nil, err
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	cons, err := s.js.OrderedConsumer(ctx, s.name, cfg)
	if err != nil {
		return nil, s.classify("events after", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessagesWithBytesLimit(cursorBuffer, s.cursorBytes()))
	if err != nil {
		return nil, s.classify("events after", err)
	}
	return &cursor{tree: tree, pos: after, it: it, cons: cons, js: s.js, name: s.name}, nil
}

// cursorBytes bounds the bytes one open consumer buffers in the client:
// storedevent.PageBytes, or the server's max_payload and room for the
// headers when that is larger (a consumer whose bound is below one
// message would stall).
func (s *Store) cursorBytes() int {
	return max(storedevent.PageBytes, int(s.nc.MaxPayload())+64<<10)
}

// search returns the stream sequence of tree's first event whose Seq is
// after after: a binary search over [1, lastStream], each probe the next
// event at or after a stream sequence (a tree's Seqs grow with the
// stream's).
func (s *Store) search(ctx context.Context, tree string, after, lastStream uint64) (uint64, error) {
	subj := s.subject(tree, "e")
	lo, hi := uint64(1), lastStream
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := s.stream.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(subj))
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) { // dropped meanwhile
				return hi, nil
			}
			return 0, s.classify("events after", err)
		}
		seq, _ := strconv.ParseUint(m.Header.Get(hdrSeq), 10, 64)
		if seq > after { // starting at mid finds it (nothing of tree between mid and m)
			hi = mid
		} else {
			lo = m.Sequence + 1
		}
	}
	return lo, nil
}

// collect returns the events c delivers after after, up to limit (≤ 0:
// no limit) and through until, the tree's last event as the leader said:
// what was kept when EventsAfter was called (a consumer on a replica that
// lags may deliver it later than the leader keeps it, or report nothing
// pending too early).
func (s *Store) collect(ctx context.Context, c *cursor, after, until uint64, limit int) ([]calllog.Event, error) {
	var out []calllog.Event
	size := 0
	wctx, cancel := context.WithTimeout(ctx, deliverWait)
	defer cancel()
	for (limit <= 0 || len(out) < limit) && c.pos < until && size < storedevent.PageBytes {
		m, err := c.it.Next(jetstream.NextContext(wctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				if len(out) > 0 {
					break
				}
				return nil, errNotDelivered
			}
			return nil, s.classify("events after", err)
		}
		seq, err := strconv.ParseUint(m.Headers().Get(hdrSeq), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("jetstreamstore: events after: %w: an event message has no sequence header", calllog.ErrStoreUnusable)
		}
		if seq <= after || seq <= c.pos {
			continue
		}
		c.pos = seq
		if err := decodeInto(&out, seq, m.Data()); err != nil {
			return out, err
		}
		size += len(m.Data())
	}
	return out, nil
}

// endsTree reports whether data, an event's JSON form, is the end of
// tree's outermost call.
func endsTree(data []byte, tree string) bool {
	e, err := storedevent.Decode(data)
	return err == nil && e.Kind.IsEnd() && e.Call == tree
}

// decodeInto decodes the event seq and appends it to out; an event it
// cannot read is a *calllog.CorruptEventError.
func decodeInto(out *[]calllog.Event, seq uint64, data []byte) error {
	if len(data) > storedevent.MaxEventBytes {
		return &calllog.CorruptEventError{Seq: seq, Err: storedevent.ErrTooLarge}
	}
	e, err := storedevent.Decode(data)
	if err != nil {
		return &calllog.CorruptEventError{Seq: seq, Err: err}
	}
	*out = append(*out, e)
	return nil
}

// errNotDelivered: the consumer delivered nothing within deliverWait
// though the leader has events.
var errNotDelivered = errors.New("jetstreamstore: the consumer delivered nothing")

// readLeader reads tree's events after after from the stream leader, one
// request each, up to limit (and leaderPage): the way round a consumer on
// a replica that lags.
func (s *Store) readLeader(ctx context.Context, tree string, after, lastStream uint64, limit int) ([]calllog.Event, error) {
	if limit <= 0 || limit > leaderPage {
		limit = leaderPage
	}
	next := uint64(1)
	if after > 0 {
		var err error
		if next, err = s.search(ctx, tree, after, lastStream); err != nil {
			return nil, err
		}
	}
	subj := s.subject(tree, "e")
	var out []calllog.Event
	size := 0
	for len(out) < limit && next <= lastStream && size < storedevent.PageBytes {
		m, err := s.stream.GetMsg(ctx, next, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, s.classify("events after", err)
		}
		next = m.Sequence + 1
		seq, _ := strconv.ParseUint(m.Header.Get(hdrSeq), 10, 64)
		if seq <= after {
			continue
		}
		if err := decodeInto(&out, seq, m.Data); err != nil {
			return out, err
		}
		size += len(m.Data)
	}
	return out, nil
}
