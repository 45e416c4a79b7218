package testnet

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBuildsTakeTurns: while one build holds the lock another waits, until
// its context ends; once the first lets go, the next gets it.
func TestBuildsTakeTurns(t *testing.T) {
	unlock, err := lockBuilds(context.Background())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = lockBuilds(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a second build while the first holds the lock")
	unlock()
	unlock2, err := lockBuilds(context.Background())
	require.NoError(t, err, "the lock once released")
	unlock2()
}

// TestBuildAs builds a main package to the named file and reports a
// package that does not exist as a go build error with the compiler's
// words.
func TestBuildAs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	bin := filepath.Join(t.TempDir(), "child")
	got, err := BuildAs(bin, "github.com/skulkrt/skulk/internal/fakechild")
	require.NoError(t, err)
	require.Equal(t, bin, got)
	fi, err := os.Stat(bin)
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&0o100, "the binary is executable")
	_, err = BuildAs(filepath.Join(t.TempDir(), "x"), "./no-such-package")
	require.ErrorContains(t, err, "go build ./no-such-package")
}
