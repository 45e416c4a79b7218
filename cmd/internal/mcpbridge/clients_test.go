package mcpbridge

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClientsFind: a tree's session is found once registered, also when it
// is registered while find waits (the child can ask before the tools/call
// handler registered its call); an unknown tree gives ErrNoClient after
// clientWait, a removed one too, and a done ctx ends the wait at once.
func TestClientsFind(t *testing.T) {
	// In a bubble: synctest.Wait says when find is blocked waiting, and
	// clientWait passes on the bubble's clock, not the machine's.
	synctest.Test(t, testClientsFind)
}

func testClientsFind(t *testing.T) {
	c := NewClients()
	sess := &mcp.ServerSession{}
	ctx := context.Background()

	remove := c.add("t1", ctx, sess)
	cc, err := c.find(ctx, "t1")
	require.NoError(t, err)
	assert.Same(t, sess, cc.session)

	found := make(chan error, 1) // one value, from the goroutine below
	go func() {
		_, err := c.find(ctx, "t2")
		found <- err
	}()
	synctest.Wait() // find is blocked waiting for t2
	remove2 := c.add("t2", ctx, sess)
	select {
	case err := <-found:
		assert.NoError(t, err)
	case <-time.After(clientWait):
		t.Fatal("find did not see a tree added while it waited")
	}
	remove2()

	remove()
	start := time.Now()
	_, err = c.find(ctx, "t1")
	assert.ErrorIs(t, err, ErrNoClient)
	assert.GreaterOrEqual(t, time.Since(start), clientWait)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.find(cctx, "t3")
	assert.ErrorIs(t, err, context.Canceled)
}
