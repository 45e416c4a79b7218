package host

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/logtest"
)

// callMessages are the messages of the host's records about one call:
// each carries call_id and tree_id. TestLogSitesClassified keeps this list
// and otherMessages equal to the host's log calls, read from its source,
// and checks that every call site of these passes both keys;
// checkCallRecords checks their values in every record a test provokes.
var callMessages = map[string]bool{
	"provider broke the protocol":                                       true,
	"call ended by the host":                                            true,
	"nested call cancelled: its parent ended":                           true,
	"no end after the provider terminal: closing the stream connection": true,
}

// otherMessages are the messages of the host's records about a child, a
// slot, a stream connection with no call on it, or the host itself.
var otherMessages = map[string]bool{
	"child started":                                           true,
	"child tools changed":                                     true,
	"child slot gave up restarting":                           true,
	"child restart failed":                                    true,
	"recycling child with stuck handlers":                     true,
	"recycling child that lost calls":                         true,
	"child said bye without a drain":                          true,
	"child dead":                                              true,
	"health timeout fired late: the child gets another":       true,
	"child stopped":                                           true,
	"child wrote on an idle stream connection":                true,
	"call connection closed":                                  true,
	"removed a private directory left by a host that is gone": true,
	"descendants of the child survived SIGKILL":               true,
	"descendants of the child killed":                         true,
	logChildOutput:                                            true, // a child's line: the child's own records are checked in package child
}

// The call log's records (internal/recorder, logged through the host's
// Logger): those about a tree's journal carry tree_id; those about an
// observer are about no call.
var (
	treeMessages = map[string]bool{
		"calllog: journal queue full; events dropped, every call's start and end kept": true,
		"calllog: journal writer stopped":                                              true,
		"calllog: journal writer stopped at close with events not kept":                true,
	}
	recorderOtherMessages = map[string]bool{
		"calllog: observer fell behind; events that do not fit its queue are dropped, every call's start and end kept": true,
		"calllog: journal events not kept at close":            true,
		"calllog: observer failed; it is given no more events": true,
	}
)

// Every log call of the host and of the call log is listed as about a
// call, a tree or neither, so a new one is classified when it is written;
// every call site of a message about a call passes call_id and tree_id,
// and every one about a tree passes tree_id.
func TestLogSitesClassified(t *testing.T) {
	check := func(dir string, lists map[string]map[string]bool, want map[string][]string) {
		t.Helper()
		sites, err := logtest.Sites(dir)
		require.NoError(t, err)
		seen := map[string]bool{}
		for _, s := range sites {
			seen[s.Message] = true
			listed := false
			for name, list := range lists {
				if !list[s.Message] {
					continue
				}
				listed = true
				if keys := want[name]; !s.Has(keys...) {
					assert.Fail(t, fmt.Sprintf("%s/%s: %q is in %s but the call passes %q, not all of %q", dir, s.Pos, s.Message, name, s.Keys, keys))
				}
			}
			assert.Truef(t, listed, "%s/%s: the message %q is in no list of logattrs_test.go: is it about a call?", dir, s.Pos, s.Message)
		}
		for name, list := range lists {
			for m := range list {
				assert.Truef(t, seen[m], "%s lists %q, which nothing in %s logs", name, m, dir)
			}
		}
	}
	check(".", map[string]map[string]bool{"callMessages": callMessages, "otherMessages": otherMessages},
		map[string][]string{"callMessages": {logCallID, logTreeID}})
	check("../internal/recorder", map[string]map[string]bool{"treeMessages": treeMessages, "recorderOtherMessages": recorderOtherMessages},
		map[string][]string{"treeMessages": {logTreeID}})
}

// childLineIDs finds the call_id and tree_id of a child SDK record
// forwarded as a "child output" line (the child logs slog text).
var childLineIDs = regexp.MustCompile(`(?:^| )(call_id|tree_id)=(\S+)`)

// Every log record about a call, the host's and the child's, carries the
// call's id as call_id and its tree's as tree_id, across a call that fails,
// one cancelled, one whose handler ignores the cancel (the host ends it),
// one past its deadline and one whose child is killed; a record that
// names a call in any other attribute fails the test.
func TestLogRecordsCarryCallAndTree(t *testing.T) {
	logs := logtest.NewCapture()
	cfg := fastHealth(realConfig())
	cfg.Logger = slog.New(logs)
	cfg.CancelGrace = 200 * time.Millisecond
	cfg.StuckLimit = -1 // the stuck handler leaves its child alone until the kill
	h, _ := testHost(t, cfg, 2*time.Minute)
	ctx := callCtx(t, time.Minute)
	trees := map[string]string{} // call id → tree id
	note := func(c *Call) { trees[c.ID()] = c.Tree() }

	// Fails: provider_error.
	c, err := h.Call(ctx, "fail", frame.MustPayload(map[string]any{"message": "no"}), WithInput())
	require.NoError(t, err)
	note(c)
	if _, err := c.Wait(); err == nil {
		require.FailNow(t, "fail completed")
	}
	// Past its deadline: the child's timeout.
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	c, err = h.Call(dctx, "sleep", frame.MustPayload(map[string]any{"ms": 10_000}), WithInput())
	require.NoError(t, err)
	note(c)
	c.Wait()
	cancel()
	// The rest are steps of one program: their tree is not their own id.
	err = h.Program(ctx, "logs", func(ctx context.Context) error {
		// Cancelled, and the handler honours it.
		c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 10_000}), WithInput())
		if err != nil {
			return err
		}
		note(c)
		time.Sleep(50 * time.Millisecond)
		c.Cancel()
		c.Wait()
		// Cancelled, and the handler ignores it: the child logs it as
		// stuck, the host ends the call with a synthetic cancelled.
		c, err = h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 60_000, "ignore_cancel": true}), WithInput())
		if err != nil {
			return err
		}
		note(c)
		time.Sleep(50 * time.Millisecond)
		c.Cancel()
		if _, err := c.Wait(); err == nil {
			assert.Fail(t, "a cancelled call completed")
		}
		// Killed: a synthetic unreachable.
		c, err = h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 60_000}), WithInput())
		if err != nil {
			return err
		}
		note(c)
		time.Sleep(50 * time.Millisecond)
		if err := syscall.Kill(h.Children()[0].PID, syscall.SIGKILL); err != nil {
			return err
		}
		if _, err := c.Wait(); err == nil {
			assert.Fail(t, "a killed child's call completed")
		}
		return nil
	})
	require.NoError(t, err)

	hostAbout, childAbout := checkCallRecords(t, logs.Records(), trees)
	// The kill ends a call by the host; the child logs the handler that
	// ignores its cancel.
	assert.Falsef(t, hostAbout < 1 || childAbout < 1, "%d host records and %d child records about calls; want at least 1 and 1", hostAbout, childAbout)
}

// A child that breaks the protocol (a sequence gap) and one that sends no
// end after its terminal: the host's records about each call carry its
// call_id and tree_id.
func TestLogRecordsOfMisbehavingCalls(t *testing.T) {
	logs := logtest.NewCapture()
	cfg := fastHealth(fakeConfig("serve"))
	cfg.Logger = slog.New(logs)
	cfg.endGrace = 200 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	ctx := callCtx(t, time.Minute)
	trees := map[string]string{}
	note := func(c *Call) { trees[c.ID()] = c.Tree() }
	var hostAbout int
	for _, tool := range []string{"gap", "noend"} {
		c, err := h.Call(ctx, tool, nil, WithInput())
		require.NoError(t, err)
		note(c)
		c.Wait()
	}
	// The end grace's warning comes after the terminal: wait for it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		hostAbout, _ = checkCallRecords(t, logs.Records(), trees)
		if hostAbout >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if hostAbout < 3 { // the gap's violation and synthetic end, the missing end
		assert.Fail(t, fmt.Sprintf("%d host records about the gap and noend calls; want 3", hostAbout))
	}
}

// checkCallRecords fails the test for a host record about a call (its
// message is in callMessages) whose call_id and tree_id are not a call of
// trees (call id to tree id) and its tree, whether or not the record names
// the call elsewhere; for a record that names a call or tree other than as
// call_id and tree_id, or names one without being about a call; and for a
// forwarded child record that names a call without its call_id and
// tree_id. It returns how many host records are about a call and how many
// forwarded child records name one.
func checkCallRecords(t *testing.T, recs []logtest.Record, trees map[string]string) (hostAboutCalls, childAboutCalls int) {
	t.Helper()
	ids := map[string]bool{}
	for call, tree := range trees {
		ids[call], ids[tree] = true, true
	}
	for _, r := range recs {
		if r.Msg == logChildOutput {
			// The child SDK's own record, forwarded line by line.
			got := map[string]string{}
			for _, m := range childLineIDs.FindAllStringSubmatch(r.Attrs["line"], -1) {
				got[m[1]] = m[2]
			}
			named := false
			for id := range ids {
				named = named || strings.Contains(r.Attrs["line"], id)
			}
			if !named {
				continue
			}
			childAboutCalls++
			if tree, ok := trees[got[logCallID]]; !ok || got[logTreeID] != tree {
				assert.Fail(t, fmt.Sprintf("child record %q: call_id %q tree_id %q; want a call of the test and its tree", r.Attrs["line"], got[logCallID], got[logTreeID]))
			}
			continue
		}
		about := callMessages[r.Msg]
		assert.Falsef(t, !about && !otherMessages[r.Msg] && !treeMessages[r.Msg] && !recorderOtherMessages[r.Msg], "record %q is in no list of logattrs_test.go", r.Msg)
		for k, v := range r.Attrs {
			if !ids[v] {
				continue
			}
			switch {
			case k != logCallID && k != logTreeID:
				assert.Fail(t, fmt.Sprintf("record %q names a call or tree as %q; the keys are %s and %s", r.Msg, k, logCallID, logTreeID))
			case !about && !(treeMessages[r.Msg] && k == logTreeID):
				assert.Fail(t, fmt.Sprintf("record %q names a call as %s but is not in callMessages", r.Msg, k))
			}
		}
		if !about {
			continue
		}
		hostAboutCalls++
		call, tree := r.Attrs[logCallID], r.Attrs[logTreeID]
		if want, ok := trees[call]; !ok || tree != want {
			assert.Fail(t, fmt.Sprintf("record %q: %s=%q %s=%q; want a call of the test and its tree", r.Msg, logCallID, call, logTreeID, tree))
		}
	}
	return hostAboutCalls, childAboutCalls
}
