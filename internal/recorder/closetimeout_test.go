package recorder_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/recorder"
)

// TestCloseTimeoutMatchesContext: an observer that ignores its context
// keeps Close waiting past ctx; Close then says ErrCloseTimeout (its
// message unchanged) and matches ctx's error, which a user of the host,
// who cannot name ErrCloseTimeout, matches.
func TestCloseTimeoutMatchesContext(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1) // one signal is enough: the first event
	obs := eventstore.ObserverFunc(func(context.Context, calllog.Event) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release // ignores its context on purpose
		return nil
	})
	r, err := recorder.New(calllog.Options{Observers: []calllog.Observer{obs}}, nil)
	require.NoError(t, err)
	rec, err := r.Begin(testCtx(t), recorder.CallInfo{ID: "c"})
	require.NoError(t, err)
	<-entered
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = r.Close(short)
	close(release)
	require.ErrorIs(t, err, recorder.ErrCloseTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, recorder.ErrCloseTimeout.Error(), err.Error())
	_ = rec.End(context.Background(), recorder.Done(nil)) // the recorder is closed: refused
}
