package remote_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skulkrt/skulk/remote/internal/message"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/replay"
	"github.com/skulkrt/skulk/remote"
	"github.com/skulkrt/skulk/wire"
)

// treesSetup is a JetStream server, a serving host process journaling to
// its store, and a caller host in this process journaling to the same
// store, with a client of the serving host's name.
type treesSetup struct {
	url string // the store's URL
	st  *jetstreamstore.Store
	h   *host.Host
	cl  *remote.Client
}

func startTrees(t *testing.T) *treesSetup {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	url := srv.URL() + "/CALLS"
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	st, err := jetstreamstore.Open(ctx, url, jetstreamstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, st.Close()) })
	startServing(t, exe, []string{srv.URL()}, "far", dir, journalEnv+"="+url)
	h, err := host.Start(ctx, host.Config{
		Command: exe, Args: []string{"-test.run=^$"}, PoolSize: 1,
		ExtraEnv: []string{roleEnv + "=child", dirEnv + "=" + dir, "GORACE=atexit_sleep_ms=0"},
		CallLog:  calllog.Options{FullContent: true, Journal: &calllog.Journal{Store: st, Required: true}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, h.Close(context.Background())) })
	cl := dialTools(t, srv.URL())
	return &treesSetup{url: url, st: st, h: h, cl: cl}
}

// A remote call made inside a program is the program's step in the
// caller's tree, whose request names the serving host's tree; that tree,
// written by the serving host's own journal, names the step as its
// caller; and a replay goes from either tree to the other on the one
// store.
func TestTreesLinkedAcrossHosts(t *testing.T) {
	s := startTrees(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var callerTree, program string
	var rc *remote.Call
	err := s.h.Program(ctx, "fan-out", func(ctx context.Context) error {
		callerTree, program = recorder.Running(ctx).Tree(), recorder.Running(ctx).ID()
		c, err := s.cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0, "n": 2}))
		if err != nil {
			return err
		}
		rc = c
		_, err = c.Wait()
		return err
	})
	require.NoError(t, err)
	remoteTree := rc.Tree()
	require.NotEmpty(t, remoteTree, "the serving host named no tree")
	require.NotEqual(t, callerTree, remoteTree)

	// The caller's tree: the remote call is the program's step, and its
	// request names the remote tree (and the serving host).
	var req *calllog.Event
	for e, err := range calllog.Events(ctx, s.st, callerTree, 0) {
		require.NoError(t, err)
		if e.Call == rc.ID() && e.Kind == calllog.KindRequest {
			req = &e
		}
	}
	require.NotNil(t, req, "the caller's tree has no request for the remote call")
	assert.Equal(t, program, req.Parent)
	assert.Equal(t, "remote:far", req.Child)
	require.NotNil(t, req.Remote)
	assert.Equal(t, calllog.Link{Tree: remoteTree, Call: remoteTree}, *req.Remote)

	// The remote tree, kept by the serving host's own writer: its start
	// names the caller's tree and the step.
	var first *calllog.Event
	for e, err := range calllog.Events(ctx, s.st, remoteTree, 0) {
		require.NoError(t, err)
		if first == nil {
			first = &e
		}
	}
	require.NotNil(t, first, "the remote tree is not in the store")
	assert.Equal(t, calllog.KindStarted, first.Kind)
	assert.Empty(t, first.Parent)
	require.NotNil(t, first.Caller)
	assert.Equal(t, calllog.Link{Tree: callerTree, Call: rc.ID()}, *first.Caller)
	assert.NotEqual(t, req.Writer, first.Writer, "one writer per tree: the trees have their own writers")

	// Replay across: from the caller's tree to the remote one and back.
	rp, err := replay.FromStore(ctx, s.st, callerTree, &replay.Replayer{})
	require.NoError(t, err)
	step := rp.Call(rc.ID())
	require.NotNil(t, step)
	assert.True(t, step.Ended)
	assert.Equal(t, calllog.KindCompleted, step.Outcome.Kind)
	require.Equal(t, []calllog.Link{{Tree: remoteTree, Call: remoteTree}}, rp.Links())
	far, err := replay.FromStore(ctx, s.st, rp.Links()[0].Tree, &replay.Replayer{Frames: true})
	require.NoError(t, err)
	out := far.Call(remoteTree)
	require.NotNil(t, out)
	assert.Equal(t, "tick", out.Tool)
	assert.Equal(t, calllog.KindCompleted, out.Outcome.Kind)
	assert.Len(t, out.Frames, 3, "two chunks and the terminal, kept by the serving host")
	assert.Equal(t, []calllog.Link{{Tree: callerTree, Call: rc.ID()}}, far.Links())
	assert.True(t, slices.ContainsFunc(rp.Calls, func(c *replay.Call) bool { return c.Call == far.Links()[0].Call }))

	// Follow across: from the request's link to the remote tree's end,
	// then back from its start's link to the caller's tree.
	var kinds []calllog.Kind
	var back *calllog.Link
	for e, err := range calllog.Follow(ctx, s.st, req.Remote.Tree, 0, 0) {
		require.NoError(t, err)
		kinds = append(kinds, e.Kind)
		if e.Caller != nil {
			back = e.Caller
		}
	}
	assert.Equal(t, calllog.KindStarted, kinds[0])
	assert.Equal(t, calllog.KindCompleted, kinds[len(kinds)-1])
	require.NotNil(t, back)
	n := 0
	for e, err := range calllog.Follow(ctx, s.st, back.Tree, 0, 0) {
		require.NoError(t, err)
		if e.Call == back.Call {
			n++
		}
	}
	assert.Equal(t, 3, n, "the caller's step: started, request, done")
}

// A caller outside any host call names its caller with WithCaller, and the
// remote tree names it; without either, the remote tree names none.
func TestTreesWithCallerOption(t *testing.T) {
	s := startTrees(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	c, err := s.cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}), remote.WithCaller("agent-7", "agent-7-step-3"))
	require.NoError(t, err)
	_, err = c.Wait()
	require.NoError(t, err)
	require.NotEmpty(t, c.Tree())
	rp, err := replay.FromStore(ctx, s.st, c.Tree(), &replay.Replayer{})
	require.NoError(t, err)
	assert.Equal(t, []calllog.Link{{Tree: "agent-7", Call: "agent-7-step-3"}}, rp.Links())

	// A call without WithCaller or a running call names no caller.
	c, err = s.cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
	require.NoError(t, err)
	_, err = c.Wait()
	require.NoError(t, err)
	rp, err = replay.FromStore(ctx, s.st, c.Tree(), &replay.Replayer{})
	require.NoError(t, err)
	assert.Empty(t, rp.Links())
}

// A serving host's tree message passes the link's rules: a second one, one
// before the accept, or one that is not a call id fails that call at once
// with a synthetic invalid_frame (a call that took it would wait for the
// heartbeat's unreachable instead). The "host" here is the test, answering the
// opens of the name "fake" by hand (its tool list comes from a real
// serving host). A WithCaller that names no call id is refused at once.
func TestTreeMessageRules(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, cl, opens := fakeHost(t)
	tree := func(seq uint64, id string) message.Message {
		return message.Message{Kind: message.KindTree, Seq: seq, Body: []byte(id)}
	}
	answers := map[string][]message.Message{
		"twice":     {fakeAccept, tree(1, "t-1"), tree(2, "t-2")},
		"before":    {tree(0, "t-1")},
		"not an id": {fakeAccept, tree(1, strings.Repeat("a", 129))},
	}
	for name, msgs := range answers {
		c, err := cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
		require.NoError(t, err, name)
		publishAll(t, nc, (<-opens).Reply, msgs...)
		term := terminal(t, c, 10*time.Second)
		require.Equal(t, frame.KindFailed, term.Kind, "%s: %+v", name, term)
		assert.Equal(t, frame.CodeInvalidFrame, term.Error.Code, name)
		assert.True(t, term.Synthetic, name)
	}

	// A good tree message names the tree; the fake host then ends the
	// call as a serving host does (its terminal, end and fin).
	c, err := cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
	require.NoError(t, err)
	open := <-opens
	publishAll(t, nc, open.Reply, fakeAccept, tree(1, "t-9"))
	require.Eventually(t, func() bool { return c.Tree() == "t-9" }, 10*time.Second, 10*time.Millisecond)
	done, err := frame.NewCompleted(openedInvoke(t, open).CallID, frame.ProviderToCaller, 1, nil)
	require.NoError(t, err)
	publishAll(t, nc, open.Reply, message.Message{Kind: message.KindData, Seq: 2, Body: streamBytes(t, &wire.Frame{Frame: done}, &wire.End{CallID: done.CallID})},
		message.Message{Kind: message.KindFin, Seq: 3})
	term := terminal(t, c, 10*time.Second)
	assert.Equal(t, frame.KindCompleted, term.Kind, "%+v", term)
	assert.False(t, term.Synthetic)

	for _, ids := range [][2]string{{"", "c"}, {"t", ""}, {strings.Repeat("x", 129), "c"}} {
		_, err := cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}), remote.WithCaller(ids[0], ids[1]))
		var fe *frame.FieldError
		require.ErrorAs(t, err, &fe, "%q", ids)
		assert.ErrorIs(t, err, frame.ErrInvalid)
	}
}
