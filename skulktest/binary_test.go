package skulktest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/skulktest"
)

// TestBinary: Build compiles a provider's main package into a binary named
// after it, and StartHost runs it under a real host whose calls reach it;
// BuildIn names the binary likewise and reports a package that does not
// build as an error.
func TestBinary(t *testing.T) {
	bin := skulktest.Build(t, "../cmd/skulk-child")
	if filepath.Base(bin) != "skulk-child" {
		assert.Fail(t, fmt.Sprintf("Build named the binary %q, want skulk-child", filepath.Base(bin)))
	}
	h := skulktest.StartHost(t, host.Config{Command: bin})
	c, err := h.Call(t.Context(), "count", frame.MustPayload(map[string]any{"n": 2}))
	require.NoError(t, err)
	o := skulktest.Collect(t, c)
	require.Falsef(t, o.Err != nil, "count: %v", o.Err)
	skulktest.JSONEqual(t, o.Result, `{"n": 2}`)
	if ch := o.ChunkPayloads(); len(ch) != 2 {
		assert.Fail(t, fmt.Sprintf("count of 2: %d chunks", len(ch)))
	} else {
		skulktest.JSONEqual(t, ch[1], `{"i": 1}`)
	}

	dir := t.TempDir()
	bin2, err := skulktest.BuildIn(dir, "github.com/skulkrt/skulk/cmd/skulk-child")
	require.NoError(t, err)
	if bin2 != filepath.Join(dir, "skulk-child") {
		assert.Fail(t, fmt.Sprintf("BuildIn: %q, want %q", bin2, filepath.Join(dir, "skulk-child")))
	}
	if fi, err := os.Stat(bin2); err != nil || fi.Mode()&0o111 == 0 {
		assert.Fail(t, fmt.Sprintf("BuildIn's binary: %v, %v", fi, err))
	}
	if _, err := skulktest.BuildIn(dir, "./no-such-package"); err == nil || !strings.Contains(err.Error(), "go build") {
		assert.Fail(t, fmt.Sprintf("BuildIn of a missing package: %v, want a go build error", err))
	}
}
