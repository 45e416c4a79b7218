package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/natstest"
)

// keepLinkedTrees keeps, in a JetStream store, a caller's tree c1 (a
// program whose step c1-2 was made over NATS and recorded by its serving
// host as the tree r1; its step c1-3 names a tree the store does not
// hold) and the tree r1, written by another writer, naming its caller.
func keepLinkedTrees(t *testing.T) (url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	url = srv.URL() + "/CALLS"
	st, err := jetstreamstore.Open(ctx, url, jetstreamstore.Options{})
	require.NoError(t, err)
	defer st.Close()
	at := time.Date(2026, 11, 29, 22, 10, 0, 0, time.UTC)
	ev := func(k calllog.Kind, tree, writer string, seq uint64, call, parent, tool string) calllog.Event {
		return calllog.Event{Kind: k, Tree: tree, Writer: writer, Seq: seq, After: seq - 1, At: at.Add(time.Duration(seq) * time.Millisecond),
			Call: call, Parent: parent, Tool: tool}
	}
	prog := ev(calllog.KindStarted, "c1", "wa", 1, "c1", "", "fan-out")
	prog.Program = true
	req := ev(calllog.KindRequest, "c1", "wa", 3, "c1-2", "c1", "echo")
	req.Attempt, req.Child, req.Remote = 1, "remote:far", &calllog.Link{Tree: "r1", Call: "r1"}
	req2 := ev(calllog.KindRequest, "c1", "wa", 6, "c1-3", "c1", "echo")
	req2.Attempt, req2.Child, req2.Remote = 1, "remote:gone", &calllog.Link{Tree: "gone-1", Call: "gone-1"}
	progEnd := ev(calllog.KindCompleted, "c1", "wa", 8, "c1", "", "fan-out")
	progEnd.Program = true
	caller := []calllog.Event{prog, ev(calllog.KindStarted, "c1", "wa", 2, "c1-2", "c1", "echo"), req,
		ev(calllog.KindCompleted, "c1", "wa", 4, "c1-2", "c1", "echo"),
		ev(calllog.KindStarted, "c1", "wa", 5, "c1-3", "c1", "echo"), req2,
		ev(calllog.KindCompleted, "c1", "wa", 7, "c1-3", "c1", "echo"), progEnd}
	_, err = st.KeepNew(ctx, "c1", "wa", caller)
	require.NoError(t, err)

	start := ev(calllog.KindStarted, "r1", "wb", 1, "r1", "", "echo")
	start.Caller = &calllog.Link{Tree: "c1", Call: "c1-2"}
	out := ev(calllog.KindOutput, "r1", "wb", 3, "r1", "", "echo")
	text := frame.MustPayload(map[string]any{"text": "hi"})
	out.Attempt, out.FrameKind, out.FrameSeq = 1, frame.KindChunk, 1
	out.Payload = &calllog.Content{Type: "object", Bytes: len(text), Keys: 1, Value: text}
	r1req := ev(calllog.KindRequest, "r1", "wb", 2, "r1", "", "echo")
	r1req.Attempt, r1req.Child = 1, "child-0"
	_, err = st.KeepNew(ctx, "r1", "wb", []calllog.Event{start, r1req, out, ev(calllog.KindCompleted, "r1", "wb", 4, "r1", "", "echo")})
	require.NoError(t, err)
	return url
}

// TestReplayFollowsLinks: replay prints a call's remote tree and a tree's
// caller, and with --follow-links replays the linked trees after the
// named one, each once, saying which is not in the journal.
func TestReplayFollowsLinks(t *testing.T) {
	url := keepLinkedTrees(t)

	code, stdout, stderr := runCLI(t, "replay", url, "c1")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, stdout, "  remote: tree r1 (skulk-host replay "+url+" r1)\n")
	assert.NotContains(t, stdout, "tree r1, linked")

	code, stdout, stderr = runCLI(t, "replay", url, "r1")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, stdout, "  caller: call c1-2 of tree c1\n")
	assert.Contains(t, stdout, `text: "hi"`)

	code, stdout, stderr = runCLI(t, "replay", url, "c1", "--follow-links")
	require.Equal(t, ExitOK, code, stderr)
	assert.True(t, strings.HasPrefix(stdout, "tree c1\n"), stdout)
	r1 := strings.Index(stdout, "tree r1, linked from call c1-2 of tree c1\n")
	gone := strings.Index(stdout, "tree gone-1, linked from call c1-3 of tree c1\n  not in the journal")
	require.Positive(t, r1, stdout)
	require.Greater(t, gone, r1, stdout)
	assert.Contains(t, stdout[r1:], `text: "hi"`)
	assert.Equal(t, 1, strings.Count(stdout, "program c1 fan-out"), "the caller's tree is replayed once: %s", stdout)
}

// TestFollowFollowsLinks: follow --follow-links follows the remote tree's
// caller after it, with a line naming the link, and says on standard
// error which linked tree is not in the journal.
func TestFollowFollowsLinks(t *testing.T) {
	url := keepLinkedTrees(t)
	code, stdout, stderr := runCLI(t, "follow", url, "r1", "--follow-links")
	require.Equal(t, ExitOK, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 4+1+8, stdout)
	var first calllog.Event
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.NotNil(t, first.Caller)
	assert.Equal(t, calllog.Link{Tree: "c1", Call: "c1-2"}, *first.Caller)
	assert.JSONEq(t, `{"tree":{"id":"c1","linked_from":{"tree":"r1","call":"r1"}}}`, lines[4])
	var e calllog.Event
	require.NoError(t, json.Unmarshal([]byte(lines[12]), &e))
	assert.Equal(t, "c1", e.Tree)
	assert.Equal(t, calllog.KindCompleted, e.Kind)
	assert.Contains(t, stderr, "tree gone-1, linked from call c1-3 of tree c1, is not in")

	// Without the flag, follow stops at the tree's end.
	code, stdout, stderr = runCLI(t, "follow", url, "r1")
	require.Equal(t, ExitOK, code, stderr)
	assert.Len(t, strings.Split(strings.TrimSpace(stdout), "\n"), 4)
}
