package host_test

import (
	"context"
	"iter"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/replay"
)

// What code outside the module reaches of the call log, checked by the
// compiler: a call's read view, the host's configuration and lifecycle, and
// calllog's readers. TestNoPublicWriteSide checks that nothing beyond reads
// is reachable.
var (
	_ interface {
		ID() string
		Tree() string
		Events() iter.Seq[calllog.Event]
	} = (*host.Call)(nil)
	_ = host.Config{CallLog: calllog.Options{
		FullContent: true,
		Observers:   []calllog.Observer{eventstore.ObserverFunc(func(context.Context, calllog.Event) error { return nil })},
		Journal:     &calllog.Journal{Store: (*sqlitestore.Store)(nil), Required: true},
	}}
	_ func(context.Context) error                                                                              = (*host.Host)(nil).FlushObservers
	_ func(context.Context) context.Context                                                                    = host.Detached
	_ func(context.Context, calllog.EventStore, string, uint64, time.Duration) iter.Seq2[calllog.Event, error] = calllog.Follow
	_ func([]calllog.Event) *replay.Tree                                                                       = replay.Events
	_ func(context.Context, calllog.EventStore, string, string) ([]calllog.Event, error)                       = calllog.TakeOver
)
