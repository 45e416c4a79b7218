package host

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStatsSayHowChildrenAreContained: Stats reports whether the children
// have cgroups and why not; a host without them says so once in its log,
// at warning level, however many children it starts.
func TestStatsSayHowChildrenAreContained(t *testing.T) {
	var logs syncBuffer
	cfg := realConfig()
	cfg.TempDir = t.TempDir()
	cfg.NoCgroups = true
	cfg.PoolSize = 2
	cfg.StartTimeout = 30 * time.Second // two children under -race on a loaded machine
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := Start(ctx, cfg)
	require.NoError(t, err)
	s := h.Stats()
	require.NoError(t, h.Close(context.Background()))
	assert.False(t, s.Cgroups)
	assert.Empty(t, s.CgroupLayout)
	assert.Equal(t, "cgroups are off for this host", s.CgroupsUnavailable)
	assert.Equal(t, 1, strings.Count(logs.String(), "children run without cgroups of their own"), logs.String())

	cfg.NoCgroups = false
	cfg.Logger = nil
	h, err = Start(ctx, cfg)
	require.NoError(t, err)
	s = h.Stats()
	var pid int
	for _, c := range h.Children() {
		pid = c.PID
	}
	if s.Cgroups {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		require.NoError(t, err)
		assert.Contains(t, string(b), "/skulk-", "a child outside the host's cgroups")
		assert.Contains(t, []string{"v2", "hybrid"}, s.CgroupLayout)
		assert.Empty(t, s.CgroupsUnavailable)
	} else {
		assert.NotEmpty(t, s.CgroupsUnavailable)
		t.Logf("no cgroups here: %s", s.CgroupsUnavailable)
	}
	require.NoError(t, h.Close(context.Background()))
}

// TestUserAndGroupChecked: a user or group that does not exist fails
// Start with ErrConfig naming the field, not echoing the name.
func TestUserAndGroupChecked(t *testing.T) {
	for _, tc := range []struct{ user, group, field string }{
		{"no-such-user-skulk", "", "User"},
		{"", "no-such-group-skulk", "Group"},
	} {
		cfg := realConfig()
		cfg.TempDir = t.TempDir()
		cfg.User, cfg.Group = tc.user, tc.group
		_, err := Start(context.Background(), cfg)
		require.ErrorIs(t, err, ErrConfig)
		assert.Contains(t, err.Error(), tc.field)
		assert.NotContains(t, err.Error(), "no-such")
	}
	cfg := realConfig()
	cfg.CPUMax = 0.001
	assert.ErrorIs(t, cfg.validate(), ErrConfig)
	cfg.CPUMax, cfg.MemoryMax = 0, 1000
	assert.ErrorIs(t, cfg.validate(), ErrConfig)
}
