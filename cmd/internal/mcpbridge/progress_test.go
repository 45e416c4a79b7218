package mcpbridge

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Once a call's result came (end), a progress notification for it is not
// sent as a chunk (wc.s is nil: a Send would panic) but dropped, counted
// and logged, as is one of a call already gone; a token not ours is left
// to the SDK.
func TestLateProgressDropped(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	w := &Wrapper{logger: slog.New(slog.NewTextHandler(&log, nil)), calls: make(map[string]*wrappedCall)}
	wc := &wrappedCall{}
	w.calls["skulk-1"] = wc
	require.NoError(t, wc.end())
	require.False(t, !w.deliverProgress([]byte(`{"progressToken":"skulk-1","progress":1}`)), "a late notification of a call that has its result was not taken")
	require.False(t, !w.deliverProgress([]byte(`{"progressToken":"skulk-9","progress":1}`)), "a late notification of a call that is gone was not taken")
	require.False(t, w.deliverProgress([]byte(`{"progressToken":"other","progress":1}`)), "a notification with another token was taken")
	if n := w.lateProgress.Load(); n != 2 {
		require.FailNow(t, fmt.Sprintf("dropped %d late notifications, want 2", n))
	}
	if got := strings.Count(log.String(), "after its call's result dropped"); got != 2 {
		require.FailNow(t, fmt.Sprintf("%d log lines of dropped progress, want 2:\n%s", got, log.String()))
	}
}
