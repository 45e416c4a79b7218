// Package readme keeps the docs' Go honest: its tests compile every Go
// code block of README.md as a program of this module, type-check every
// Go block of docs/*.md (a fragment in a scaffold of what its prose takes
// as given),
// and check that command blocks CI cannot run are marked and that
// citations of docs/protocol.md name sections it has.
package readme

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/internal/testnet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

func TestREADMEExamplesCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs")
	}
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	blocks := goBlock.FindAllSubmatch(readme, -1)
	require.Falsef(t, len(blocks) < 2, "README has %d Go blocks, want the provider and the host examples", len(blocks))
	// The programs live in testdata (which ./... ignores) inside this module,
	// so they build against the working tree without a go.mod of their own.
	root, err := os.MkdirTemp("testdata", "readme-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	for i, b := range blocks {
		dir := filepath.Join(root, "example"+strconv.Itoa(i))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), b[1], 0o644))
		if n := len(regexp.MustCompile("\n").FindAll(b[1], -1)); n > 40 {
			assert.Fail(t, fmt.Sprintf("README example %d is %d lines; keep it short", i, n))
		}
		// Built as this test binary was, from the packages its compile
		// (and the other packages' tests) put in the build cache.
		_, err := testnet.BuildCommandAs(os.DevNull, "./"+dir)
		assert.NoErrorf(t, err, "README example %d does not build: %v", i, err)
	}
}
