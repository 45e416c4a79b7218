package remote_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/remote"
)

// The permissions of docs/operations.md ("A fleet"), for the service
// "tools", its host "a" and the callers alice and mallory.
func hostPermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			"skulk.tools.call", "skulk.tools.tools", "skulk.tools.h.a.*",
			"$SRV.PING", "$SRV.INFO", "$SRV.STATS", "$SRV.*.tools", "$SRV.*.tools.*",
		}},
	}
}

func callerPermissions(user string) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"skulk.tools.call", "skulk.tools.tools", "skulk.tools.h.*.*", "$SRV.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX." + user + ".>"}},
	}
}

// startLocalHost starts a host in the test process whose children are
// this test binary's test tools.
func startLocalHost(t *testing.T) *host.Host {
	exe, err := os.Executable()
	require.NoError(t, err)
	h, err := host.Start(context.Background(), host.Config{Command: exe, Args: []string{"-test.run=^$"},
		ExtraEnv: []string{roleEnv + "=child", "GORACE=atexit_sleep_ms=0"}})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, h.Close(ctx))
	})
	return h
}

// TestPermissions: with the documented permissions a caller calls, and
// cannot take calls meant for a host nor read another caller's replies.
func TestPermissions(t *testing.T) {
	srv := natstest.Run(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "host-a", Password: "pa", Permissions: hostPermissions()},
			{Username: "alice", Password: "pb", Permissions: callerPermissions("alice")},
			{Username: "mallory", Password: "pc", Permissions: callerPermissions("mallory")},
		}
	})
	h := startLocalHost(t)
	hc, err := nats.Connect(srv.URL(), nats.UserInfo("host-a", "pa"))
	require.NoError(t, err)
	defer hc.Close()
	s, err := remote.Serve(hc, "tools", h, remote.ServeOptions{ID: "a"})
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close(context.Background())) }()
	require.NoError(t, hc.Flush())
	require.NoError(t, hc.LastError(), "the host's permissions suffice")

	var mu sync.Mutex
	var violations []error
	mc, err := nats.Connect(srv.URL(), nats.UserInfo("mallory", "pc"), nats.CustomInboxPrefix("_INBOX.mallory"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			violations = append(violations, err)
			mu.Unlock()
		}))
	require.NoError(t, err)
	defer mc.Close()
	stolen := 0
	for _, subj := range []string{"skulk.tools.call", "skulk.tools.h.a.*", "_INBOX.alice.>"} {
		sub, err := mc.QueueSubscribe(subj, "tools", func(*nats.Msg) {
			mu.Lock()
			stolen++
			mu.Unlock()
		})
		require.NoError(t, err)
		defer sub.Unsubscribe()
	}
	require.NoError(t, mc.Flush())

	ac, err := nats.Connect(srv.URL(), nats.UserInfo("alice", "pb"), nats.CustomInboxPrefix("_INBOX.alice"))
	require.NoError(t, err)
	defer ac.Close()
	cl, err := remote.Dial(ac, "tools", remote.Options{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, cl.Close()) }()
	for range 10 {
		c, err := cl.Call(context.Background(), "echo", nil, remote.WithInput(frame.MustPayload(map[string]any{"n": 1})))
		require.NoError(t, err)
		res, err := c.Wait()
		require.NoError(t, err)
		var r struct{ Chunks int }
		require.NoError(t, res.Decode(&r))
		assert.Equal(t, 1, r.Chunks)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, stolen, "mallory saw nothing of alice's calls")
	require.Len(t, violations, 3, "%v", violations)
	for _, v := range violations {
		assert.True(t, errors.Is(v, nats.ErrPermissionViolation), "%v", v)
	}
}
