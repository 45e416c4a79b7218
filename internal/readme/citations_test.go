package readme

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// designInput is the name of the design document the protocol grew from,
// which users do not have; spelled in two pieces so that this file does
// not cite it.
var designInput = []byte("PROTOCOL" + ".md")

// citation matches a citation of docs/protocol.md by section ("protocol.md
// §6", "docs/protocol.md §4.2"), and a number after the file name without
// the section sign, which is malformed.
var citation = regexp.MustCompile(`protocol\.md (§?)([0-9]+(?:\.[0-9]+)?)`)

// heading matches a numbered heading of docs/protocol.md ("## 6. A call",
// "### 4.2 Sequence and the fence").
var heading = regexp.MustCompile(`(?m)^#{2,3} ([0-9]+(?:\.[0-9]+)?)\.? `)

// TestProtocolCitations: no Go or Markdown file of the repository cites
// the design input (docs/protocol.md is the users' copy of the contract),
// and every section of docs/protocol.md that a Go file or a page of docs/
// cites by number is one of its headings.
func TestProtocolCitations(t *testing.T) {
	root := filepath.Join("..", "..")
	proto, err := os.ReadFile(filepath.Join(root, "docs", "protocol.md"))
	require.NoError(t, err)
	sections := map[string]bool{}
	for _, m := range heading.FindAllSubmatch(proto, -1) {
		sections[string(m[1])] = true
	}
	for _, s := range []string{"1", "2", "3", "4", "4.1", "4.2", "5", "6", "7", "8"} {
		require.Falsef(t, !sections[s], "docs/protocol.md has no heading §%s: the heading pattern is out of date", s)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(path)
		if ext != ".go" && ext != ".md" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		checked++
		for i, line := range bytes.Split(b, []byte("\n")) {
			assert.Falsef(t, bytes.Contains(line, designInput), "%s:%d cites %s, which users do not have: cite docs/protocol.md's sections", rel, i+1, designInput)
			if ext == ".md" && !strings.HasPrefix(filepath.ToSlash(rel), "docs/") {
				continue
			}
			for _, m := range citation.FindAllSubmatch(line, -1) {
				switch {
				case len(m[1]) == 0:
					assert.Fail(t, fmt.Sprintf("%s:%d: %q: a section of docs/protocol.md is cited as §N", rel, i+1, m[0]))
				case !sections[string(m[2])]:
					assert.Fail(t, fmt.Sprintf("%s:%d: %q: docs/protocol.md has no section %s", rel, i+1, m[0], m[2]))
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Falsef(t, checked < 100, "checked %d files: the walk did not reach the repository", checked)
}
