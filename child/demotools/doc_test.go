package demotools

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docTool is what docs/demo-tools.md says of one tool: its schemas by
// field ("arguments", "input", ...; "arguments, --test-tools" for sleep's
// other schema) and its descriptions (plain, and with --test-tools when the
// page gives a second one).
type docTool struct {
	schemas      map[string]any
	desc, descTT string
}

var (
	docSection = regexp.MustCompile("(?m)^## `([a-z]+)`")
	docRow     = regexp.MustCompile("(?m)^\\| ([^|`]+(?:`--test-tools`)?) \\| `(.*)` \\|$")
	docDesc    = regexp.MustCompile("(?m)^Description: `(.*)`(?:,\\s*\nwith `--test-tools`: `(.*)`)?")
)

// readDemoDoc parses the tools' sections of docs/demo-tools.md, in the
// page's order.
func readDemoDoc(t *testing.T) ([]string, map[string]docTool) {
	t.Helper()
	b, err := os.ReadFile("../../docs/demo-tools.md")
	require.NoError(t, err)
	page := string(b)
	locs := docSection.FindAllStringSubmatchIndex(page, -1)
	var ids []string
	tools := map[string]docTool{}
	for _, l := range locs {
		id := page[l[2]:l[3]]
		end := len(page)
		if next := strings.Index(page[l[1]:end], "\n## "); next >= 0 {
			end = l[1] + next
		}
		sec := page[l[1]:end]
		dt := docTool{schemas: map[string]any{}}
		for _, m := range docRow.FindAllStringSubmatch(sec, -1) {
			var v any
			if err := json.Unmarshal([]byte(m[2]), &v); err != nil {
				require.FailNow(t, fmt.Sprintf("demo-tools.md, %s, %s: schema is not JSON: %v", id, m[1], err))
			}
			for f := range strings.SplitSeq(strings.ReplaceAll(m[1], ", `--test-tools`", " --test-tools"), ", ") {
				dt.schemas[f] = v
			}
		}
		if m := docDesc.FindStringSubmatch(sec); m != nil {
			dt.desc, dt.descTT = m[1], m[2]
		}
		ids = append(ids, id)
		tools[id] = dt
	}
	return ids, tools
}

// asJSON is s as encoding/json reads it back (numbers float64, arrays
// []any); nil, "any object", is {"type": "object"} as the page writes it.
func asJSON(t *testing.T, s map[string]any) any {
	t.Helper()
	if s == nil {
		s = map[string]any{"type": "object"}
	}
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var v any
	require.NoError(t, json.Unmarshal(b, &v))
	return v
}

// TestDocMatchesTools: docs/demo-tools.md names the tools Tools returns, in
// their order, and gives each its schemas and description as the
// descriptors in hello have them, with and without TestTools.
func TestDocMatchesTools(t *testing.T) {
	ids, doc := readDemoDoc(t)
	test := Tools(Options{TestTools: true, Exit: func(int) {}, CallTools: true})
	var got []string
	for _, tool := range test {
		got = append(got, tool.ID)
	}
	require.Truef(t, reflect.DeepEqual(ids, got), "demo-tools.md documents %q, Tools(TestTools) returns %q", ids, got)
	for _, testTools := range []bool{false, true} {
		for _, tool := range Tools(Options{TestTools: testTools, Exit: func(int) {}, CallTools: true}) {
			d := doc[tool.ID]
			desc, args := d.desc, "arguments"
			if testTools && d.descTT != "" {
				desc = d.descTT
			}
			if _, ok := d.schemas["arguments --test-tools"]; testTools && ok {
				args = "arguments --test-tools"
			}
			assert.Falsef(t, tool.Description != desc, "%s (test tools %v): description %q, demo-tools.md says %q", tool.ID, testTools, tool.Description, desc)
			for field, s := range map[string]map[string]any{
				args: tool.ArgumentsSchema, "input": tool.InputSchema,
				"output": tool.OutputSchema, "result": tool.ResultSchema,
			} {
				want, ok := d.schemas[field]
				if !ok {
					assert.Fail(t, fmt.Sprintf("%s: demo-tools.md gives no %s schema", tool.ID, field))
					continue
				}
				if g := asJSON(t, s); !reflect.DeepEqual(g, want) {
					gb, _ := json.Marshal(g)
					wb, _ := json.Marshal(want)
					assert.Fail(t, fmt.Sprintf("%s (test tools %v): %s schema\n%s\ndemo-tools.md says\n%s", tool.ID, testTools, field, gb, wb))
				}
			}
		}
	}
}
