package child

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGoBuildID: the ID read from the ELF note is the one the go command
// reports for the same executable; a file that is not ELF has none.
func TestGoBuildID(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	id, ok := goBuildID(exe)
	require.True(t, ok, "the test binary carries a Go build ID")
	out, err := exec.Command("go", "tool", "buildid", exe).Output()
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(out)), id)

	notELF := filepath.Join(t.TempDir(), "script")
	require.NoError(t, os.WriteFile(notELF, []byte("#!/bin/sh\nexit 0\n"), 0o755))
	_, ok = goBuildID(notELF)
	require.False(t, ok)
	_, ok = goBuildID(filepath.Join(t.TempDir(), "missing"))
	require.False(t, ok)
}
