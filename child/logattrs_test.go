package child_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/logtest"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/skulktest"
	"github.com/skulkrt/skulk/wire"
)

// The keys of a call's ids in a record, the host's too (docs/operations.md,
// "Logs").
const (
	keyCall = "call_id"
	keyTree = "tree_id"
)

// callMessages are the messages of the SDK's records about one call: each
// carries call_id and tree_id. TestLogSitesClassified keeps this list and
// otherMessages equal to the package's log calls, read from its source,
// and checks that every call site of these passes both keys;
// TestLogRecordsCarryCallAndTree checks their values in records.
var callMessages = map[string]bool{
	"handler ignores cancellation":           true,
	"handler panicked":                       true,
	"handler result refused":                 true,
	"stream connection: packet out of order": true,
	"stream connection: read failed":         true,
}

// otherMessages are the messages of the SDK's records about the child, its
// listener or a stream connection with no call on it.
var otherMessages = map[string]bool{
	"started": true,
	"drain: abandoning handlers that ignore cancellation": true,
	"accepting a stream connection failed":                true,
	"abandoning handlers that ignore cancellation":        true,
	"stream connection: packet before an invoke":          true,
	"tool list changed":                                   true,
	"tool list not changed":                               true,
}

// Every log call of the package is listed as about a call or not, so a
// new one is classified when it is written, and every call site of a
// message about a call passes call_id and tree_id.
func TestLogSitesClassified(t *testing.T) {
	sites, err := logtest.Sites(".")
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, s := range sites {
		seen[s.Message] = true
		switch {
		case callMessages[s.Message]:
			assert.Truef(t, s.Has(keyCall, keyTree), "%s: %q is about a call but the call passes %q, not %s and %s", s.Pos, s.Message, s.Keys, keyCall, keyTree)
		case !otherMessages[s.Message]:
			assert.Fail(t, fmt.Sprintf("%s: the message %q is in no list of logattrs_test.go: is it about a call?", s.Pos, s.Message))
		}
	}
	for _, list := range []map[string]bool{callMessages, otherMessages} {
		for m := range list {
			assert.Truef(t, seen[m], "logattrs_test.go lists %q, which nothing in the package logs", m)
		}
	}
}

// The SDK's records about a call carry its call_id and tree_id (the
// invoke's tree, or the call's own id when none is given), whatever they
// say: a handler that panics, one that ignores its cancellation, one whose
// result cannot be sent, a packet out of order in the middle of a call and
// a stream connection that breaks under one. A record whose message is
// about a call is checked whether or not it names one.
func TestLogRecordsCarryCallAndTree(t *testing.T) {
	big := strings.Repeat("x", int(packetio.DefaultLimits().MaxHeader)+1)
	tools := []child.Tool{{
		ID: "panics",
		Handler: func(context.Context, *child.Stream) (frame.Payload, error) {
			panic("no")
		},
	}, {
		ID: "huge",
		Handler: func(context.Context, *child.Stream) (frame.Payload, error) {
			return frame.MustPayload(map[string]any{"s": big}), nil
		},
	}}
	logs := logtest.NewCapture()
	opts := demoOptions(tools...)
	opts.Logger = slog.New(logs)
	srv := serveChild(t, config{}, opts)
	h := srv.host
	st := skulktest.DefaultStartup()
	st.CancelGraceMS = 100
	_, err := h.Handshake(ctxT(t), st)
	require.NoError(t, err)
	trees := map[string]string{} // call id → tree id
	invoke := func(s interface{ Write(wire.Packet) error }, call, tree, tool string, args map[string]any) {
		t.Helper()
		trees[call] = tree
		if tree == call {
			tree = "" // not given: the call's own id
		}
		pl, err := frame.PayloadOf(args)
		require.NoError(t, err)
		require.NoError(t, s.Write(&wire.Invoke{CallID: call, ToolID: tool, Arguments: pl, Tree: tree}))
	}

	s := dial(t, h)
	invoke(s, "lp1", "lp1", "panics", map[string]any{})
	require.NoError(t, s.Started("lp1"))
	requireTerminal(t, readCall(t, s, "lp1"), frame.KindFailed, frame.CodeProviderError)

	s = dial(t, h)
	invoke(s, "lh1", "tree-h", "huge", map[string]any{})
	require.NoError(t, s.Started("lh1"))
	requireTerminal(t, readCall(t, s, "lh1"), frame.KindFailed, frame.CodeProviderError)

	// Ignores its cancellation past the 100 ms grace.
	s = dial(t, h)
	invoke(s, "ls1", "tree-s", "sleep", map[string]any{"ms": 1500, "ignore_cancel": true})
	require.NoError(t, s.Started("ls1"))
	pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 1 })
	require.NoError(t, h.Cancel("ls1", "test"))
	readCall(t, s, "ls1")

	// An invoke in the middle of a call: out of order for that call.
	s2 := dial(t, h)
	invoke(s2, "lo1", "tree-o", "sleep", map[string]any{"ms": 60_000})
	require.NoError(t, s2.Started("lo1"))
	pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 1 })
	invoke(s2, "lo2", "lo2", "sleep", map[string]any{"ms": 1})
	pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 0 })

	// Bytes that are no packet in the middle of a call: the read fails.
	s3 := dial(t, h)
	invoke(s3, "lr1", "tree-r", "sleep", map[string]any{"ms": 60_000})
	require.NoError(t, s3.Started("lr1"))
	pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 1 })
	require.NoError(t, s3.WriteRaw([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}))
	pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 0 })

	ids := map[string]bool{}
	for call, tree := range trees {
		ids[call], ids[tree] = true, true
	}
	saw := map[string]bool{}
	for _, r := range logs.Records() {
		about := callMessages[r.Msg]
		assert.Falsef(t, !about && !otherMessages[r.Msg], "record %q is in no list of logattrs_test.go", r.Msg)
		for k, v := range r.Attrs {
			assert.Falsef(t, ids[v] && (!about || (k != keyCall && k != keyTree)), "record %q names a call or tree as %q", r.Msg, k)
		}
		if !about {
			continue
		}
		saw[r.Msg] = true
		call, tree := r.Attrs[keyCall], r.Attrs[keyTree]
		if want, ok := trees[call]; !ok || tree != want {
			assert.Fail(t, fmt.Sprintf("record %q: %s=%q %s=%q; want a call of the test and its tree", r.Msg, keyCall, call, keyTree, tree))
		}
	}
	for m := range callMessages {
		assert.Truef(t, saw[m], "no record %q: the test provoked none to check", m)
	}
}
