package export

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/asif/internal/asifdoc"
	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/recorder"
)

// A tree taken over with a call running: the takeover's unknown end is no
// terminal result (nothing is made up), the checkpoint lists the call as
// outcome_unknown, and an outcome_unknown loss names it.
func TestUnknownEndIsNoResult(t *testing.T) {
	j := newJournal(t)
	r := j.begin("u", "count", map[string]any{"n": 3})
	r.Request(recorder.RequestInfo{Child: "child-0"})
	r.Output(chunk(t, "u", 1, map[string]any{"text": "a"}, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wrote, err := calllog.TakeOver(ctx, j.store, "u", "w2")
	require.NoError(t, err)
	require.Len(t, wrote, 1)
	// The old writer's end is refused by the fence: it is never kept.
	assert.ErrorIs(t, r.End(ctx, recorder.Done(nil)), calllog.ErrFenced)

	doc, rep, _ := exportCheck(t, j.events("u"), Options{})
	st := callState(t, rep, "u")
	assert.False(t, st.Terminal, "no terminal result for an unknown end")
	assert.Empty(t, st.Outcome, "no outcome made up")
	for _, e := range eventsOfKind(doc, asifdoc.EventToolResult) {
		d, ok := e.Data.(*asifdoc.ToolResultData)
		require.True(t, ok)
		assert.False(t, d.Terminal, "no terminal result made up")
	}
	require.Len(t, doc.Checkpoints, 1)
	assert.True(t, slices.ContainsFunc(doc.Checkpoints[0].OpenCalls, func(o asifdoc.OpenCall) bool {
		return o.CallID == "u" && o.State == "outcome_unknown"
	}), "checkpoint %+v", doc.Checkpoints[0].OpenCalls)
	assert.Equal(t, "ended", doc.Checkpoints[0].Status)
	assert.True(t, hasLoss(doc, "outcome_unknown"))
	assert.False(t, hasLoss(doc, "synthetic_outcome"))
}

// A redacted payload is exported as the journal kept it, and a
// content_redacted loss names the call and the resources it touches.
func TestRedactedContentIsALoss(t *testing.T) {
	store := &eventstore.Memory{}
	rec, err := recorder.New(calllog.Options{Writer: "w1", FullContent: true, Redact: []string{"password"},
		Journal: &calllog.Journal{Store: store, Required: true}}, nil)
	require.NoError(t, err)
	j := &journal{t: t, store: store, rec: rec}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rec.Close(ctx))
	})
	r := j.begin("c", "login", map[string]any{"user": "ada", "password": "hunter2"})
	r.Request(recorder.RequestInfo{Child: "child-0"})
	r.Output(chunk(t, "c", 1, map[string]any{"ok": true, "password": "again"}, nil))
	end(t, r, recorder.Done(nil))

	doc, _, data := exportCheck(t, j.events("c"), Options{})
	assert.NotContains(t, string(data), "hunter2")
	assert.NotContains(t, string(data), "again")
	assert.Contains(t, string(data), recorder.RedactedValue)
	var loss *asifdoc.Loss
	for i := range doc.Losses {
		if doc.Losses[i].Kind == "content_redacted" {
			loss = &doc.Losses[i]
		}
	}
	require.NotNil(t, loss)
	var refs []string
	for _, ref := range loss.References {
		refs = append(refs, ref.Type+":"+ref.ID)
	}
	assert.Contains(t, refs, "call:c")
	assert.True(t, slices.ContainsFunc(refs, func(s string) bool { return strings.HasPrefix(s, "resource:chunk-") }), "refs %v", refs)
}
