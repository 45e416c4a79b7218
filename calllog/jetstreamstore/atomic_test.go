package jetstreamstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/calllogtest"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/natstest"
)

// A Keep (and a KeepNew) refused part-way through is kept not at all: the
// second of three events exceeds the stream's max_msg_size (64 KiB; the
// server refuses the batch, where an event over the client's max_payload is kept
// without its content, see TestEventOverMaxPayload), and the first, sent
// before it, must not be in the log. Appending the events one
// message at a time, each fenced on the one before, would keep the first
// and break the store rule that a Keep is all or none.
func TestRefusedKeepKeepsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	huge := frame.MustPayload(map[string]any{"text": strings.Repeat("x", 128<<10)})
	cfg := jetstreamstore.StreamConfig("ATOMIC", "skulk.calllog.ATOMIC", jetstreamstore.Options{})
	cfg.MaxMsgSize = 64 << 10
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	batch := func(tree, writer string) []calllog.Event {
		evs := calllogtest.Events(tree, writer, 1, 3)
		evs[1].Payload.Value = huge
		return evs
	}

	s := open(t, srv.URL()+"/ATOMIC")
	c, err := s.Claim(ctx, "t", "A")
	require.NoError(t, err)
	// The server answers such a batch "incomplete", which the store
	// sends again until its ctx ends.
	refused, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	if err := s.Keep(refused, c, batch("t", "A")); err == nil {
		require.FailNow(t, "keep with an event over max_msg_size succeeded")
	}
	if got, err := s.EventsAfter(ctx, "t", 0, 0); err != nil || len(got) != 0 {
		require.FailNow(t, fmt.Sprintf("a refused keep left %d events (%v), want none", len(got), err))
	}
	// The claim is untouched: the same writer keeps on, from event 1.
	require.NoError(t, s.Keep(ctx, c, calllogtest.Events("t", "A", 1, 2)))

	// KeepNew: neither the claim nor the first event is kept, so another
	// writer can start the tree.
	s2 := open(t, srv.URL()+"/ATOMIC")
	refused2, stop2 := context.WithTimeout(ctx, 2*time.Second)
	defer stop2()
	if _, err := s2.KeepNew(refused2, "n", "A", batch("n", "A")); err == nil {
		require.FailNow(t, "keep new with an event over max_msg_size succeeded")
	}
	if got, err := s2.EventsAfter(ctx, "n", 0, 0); err != nil || len(got) != 0 {
		require.FailNow(t, fmt.Sprintf("a refused keep new left %d events (%v), want none", len(got), err))
	}
	if c, err := s2.KeepNew(ctx, "n", "B", calllogtest.Events("n", "B", 1, 1)); err != nil || c.Epoch != 1 {
		require.FailNow(t, fmt.Sprintf("another writer's keep new after a refused one = %+v, %v; want epoch 1", c, err))
	}
}
