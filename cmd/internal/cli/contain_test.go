package cli

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseSize: sizes as systemd and docker write them.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "4096": 4096, "512K": 512 << 10, "512k": 512 << 10, "128M": 128 << 20,
		"128MiB": 128 << 20, "2G": 2 << 30, "2GB": 2 << 30, "1T": 1 << 40, " 64M ": 64 << 20,
	} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "M", "-1", "1.5G", "12X", "99999999999T", "0x10"} {
		_, err := parseSize(in)
		assert.ErrorIs(t, err, errSize, in)
	}
}

// TestPercentFlag: CPUQuota's percentages, in cores.
func TestPercentFlag(t *testing.T) {
	for in, want := range map[string]float64{"150%": 1.5, "50%": 0.5, "200": 2, "0%": 0} {
		var p percentFlag
		require.NoError(t, p.Set(in), in)
		assert.InDelta(t, want, float64(p), 1e-9, in)
	}
	for _, in := range []string{"", "%", "-5%", "abc", "NaN"} {
		var p percentFlag
		assert.Error(t, p.Set(in), in)
	}
}

// TestContainFlagsReachConfig: the limit and privilege flags (every
// command that starts a child registers childFlags) reach the host
// configuration.
func TestContainFlagsReachConfig(t *testing.T) {
	var cf childFlags
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	cf.register(fs)
	require.NoError(t, fs.Parse([]string{"--memory-max", "64M", "--pids-max", "32", "--cpu-max", "150%", "--user", "nobody", "--group", "nogroup", "--no-new-privs"}))
	cfg := cf.config([]string{"/bin/true"}, Env{Stderr: io.Discard})
	assert.Equal(t, int64(64<<20), cfg.MemoryMax)
	assert.Equal(t, int64(32), cfg.PidsMax)
	assert.InDelta(t, 1.5, cfg.CPUMax, 1e-9)
	assert.Equal(t, "nobody", cfg.User)
	assert.Equal(t, "nogroup", cfg.Group)
	assert.True(t, cfg.NoNewPrivs)
	assert.False(t, cfg.NoCgroups)
}
