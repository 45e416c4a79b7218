package readme

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docFiles are the pages whose shell blocks .ci/docs-blocks runs.
var docFiles = []string{
	"README.md", "docs/cli.md", "docs/demo-tools.md", "docs/mcp.md", "docs/operations.md",
	"docs/performance.md", "docs/provider.md", "docs/testing.md", "python/README.md", "bench/README.md",
}

// notRun is the visible marker of a line (or, in a block's leading
// comment lines, a block) that .ci/docs-blocks checks for syntax only.
const notRun = "(not run by CI: "

// needsMarker matches commands that take minutes, need an outside
// service or a program the reader supplies, or never end: a block line
// with one must carry the marker, or .ci/docs-blocks would hang or fail
// on them.
var needsMarker = regexp.MustCompile(`go test -race \./\.\.\.|-sweeps|nats-server|my-mcp-server|--http |OTEL_EXPORTER_OTLP_ENDPOINT|/path/to/|cmd/compare($| -quick| --json)|-bench |go get |go install `)

// TestDocBlocksMarked: every shell block of the pages .ci/docs-blocks
// runs is either run (no marker) or marked where a reader sees it, and
// every line that would hang or need what CI has not is marked; .ci/run
// lists the script, so that the unmarked lines are run.
func TestDocBlocksMarked(t *testing.T) {
	root := filepath.Join("..", "..")
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	require.NoError(t, err)
	assert.False(t, !bytes.Contains(ci, []byte(".ci/docs-blocks")), ".ci/run does not run .ci/docs-blocks")
	blocks := 0
	for _, name := range docFiles {
		b, err := os.ReadFile(filepath.Join(root, name))
		require.NoError(t, err)
		sc := bufio.NewScanner(bytes.NewReader(b))
		in, whole, first, n := false, false, false, 0
		for sc.Scan() {
			line := sc.Text()
			n++
			switch {
			case !in && regexp.MustCompile("^```(sh|bash|shell)\\s*$").MatchString(line):
				in, first, whole = true, true, false
				blocks++
				continue
			case in && strings.HasPrefix(line, "```"):
				in = false
				continue
			case !in:
				continue
			}
			// The block's marker is in its leading comment lines (a
			// script's shebang may come first), as .ci/docs-blocks reads it.
			if first && strings.HasPrefix(line, "#") {
				whole = whole || strings.Contains(line, notRun)
			} else {
				first = false
			}
			assert.Falsef(t, !whole && needsMarker.MatchString(line) && !strings.Contains(line, notRun), "%s:%d: %q needs minutes, a service or a program CI lacks, and has no %q marker", name, n, line, notRun)
		}
	}
	assert.Falsef(t, blocks < 40, "%d shell blocks found: the pattern is out of date", blocks)
}
