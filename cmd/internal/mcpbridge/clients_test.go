package mcpbridge

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClientsFind: a tree's session is found once its reservation is set;
// while a reservation is pending (a tool call being started, its tree not
// known yet) find waits for it and finds the tree set then, without a
// fixed wait; with none pending an unknown or removed tree is ErrNoClient
// at once; a cancelled reservation ends the wait; a done ctx ends it too.
func TestClientsFind(t *testing.T) {
	t.Parallel()
	// In a bubble: synctest.Wait says when find is blocked waiting.
	synctest.Test(t, testClientsFind)
}

func testClientsFind(t *testing.T) {
	c := NewClients()
	sess := &mcp.ServerSession{}
	ctx := context.Background()

	remove := c.reserve().set("t1", ctx, sess)
	cc, err := c.find(ctx, "t1")
	require.NoError(t, err)
	assert.Same(t, sess, cc.session)

	// The child asks before its call's handler knew the tree.
	r := c.reserve()
	found := make(chan error, 1) // one value, from the goroutine below
	go func() {
		_, err := c.find(ctx, "t2")
		found <- err
	}()
	synctest.Wait() // find is blocked on the pending reservation
	select {
	case err := <-found:
		require.FailNow(t, fmt.Sprintf("find returned %v while a reservation was pending", err))
	default:
	}
	remove2 := r.set("t2", ctx, sess)
	assert.NoError(t, <-found)
	remove2()

	// Nothing pending: an unknown tree fails at once.
	remove()
	_, err = c.find(ctx, "t1")
	assert.ErrorIs(t, err, ErrNoClient)

	// A reservation given up (the call was refused) ends the wait.
	r = c.reserve()
	go func() {
		_, err := c.find(ctx, "t3")
		found <- err
	}()
	synctest.Wait()
	r.cancel()
	assert.ErrorIs(t, <-found, ErrNoClient)

	r = c.reserve()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.find(cctx, "t3")
	assert.ErrorIs(t, err, context.Canceled)
	r.cancel()
	var nilRes *clientReservation
	nilRes.cancel()
	nilRes.set("t4", ctx, sess)()
}
