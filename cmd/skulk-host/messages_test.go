package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/cmd/internal/cli"
)

// TestStartFailureSaysWhatTheChildWrote: a program that is no provider
// fails its handshake with one line that names the host and the child
// once, and says whether the child's output is above it.
func TestStartFailureSaysWhatTheChildWrote(t *testing.T) {
	t.Parallel()
	r := run(t, "", "call", "count", "--", "/bin/cat") // stdin is empty: cat exits at once, silent
	assert.Equal(t, cli.ExitStart, r.Status)
	assert.Equal(t, 1, strings.Count(r.Stderr, "\n"), r.Stderr)
	assert.Contains(t, r.Stderr, "host: child c0.1: handshake failed: child exited before its hello")
	assert.Equal(t, 1, strings.Count(r.Stderr, "host: "), r.Stderr)
	assert.Contains(t, r.Stderr, "it wrote nothing")
	assert.NotContains(t, r.Stderr, "output is above")

	r = run(t, "", "call", "count", "--", "/bin/echo", "not a provider")
	assert.Equal(t, cli.ExitStart, r.Status)
	lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
	require.Len(t, lines, 2, r.Stderr)
	assert.Contains(t, lines[0], `line="not a provider"`)
	assert.Contains(t, lines[1], "its output is above")
}

// TestProviderByHand: a provider run without a host says how to run it
// under one.
func TestProviderByHand(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(childBin).CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.True(t, strings.HasPrefix(string(out), "skulk-child: not started by a Skulk host"), "%q", out)
	assert.Contains(t, string(out), "'skulk-host tools -- "+childBin+"'")
}

// TestExportAndReplayName: asif export says which losses its document
// records; replay shows the media chunks a call sent, by type and size.
func TestExportAndReplayName(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "calls.db")
	r := run(t, "", "call", "--journal", db, "media", "--args", `{"bytes": 2500, "chunk": 1000}`, "--", childBin)
	require.Equal(t, 0, r.Status, r.Stderr)
	tree, ok := treeOfLine(r.Stderr)
	require.True(t, ok, r.Stderr)

	rp := run(t, "", "replay", db, tree)
	require.Equal(t, 0, rp.Status, rp.Stderr)
	media := regexp.MustCompile(`(?m)^  media: \S+, ([0-9.]+ [kKM]?i?B) \(inline\)$`).FindAllStringSubmatch(rp.Stdout, -1)
	require.Len(t, media, 3, rp.Stdout)

	out := filepath.Join(t.TempDir(), "session.json")
	ex := run(t, "", "asif", "export", "-o", out, db, tree)
	require.Equal(t, 0, ex.Status, ex.Stderr)
	m := regexp.MustCompile(`; (\d+) loss(?:es)?: ([a-z_, ]+) \(`).FindStringSubmatch(ex.Stderr)
	require.NotNil(t, m, ex.Stderr)
	assert.NotEmpty(t, strings.Split(m[2], ", "))
}
