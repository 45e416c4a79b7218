package hostconf

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRefusedCalls checks docs/protocol.md §7 "Refused calls": "Refuse a
// call before anything is sent when the tool is unknown, the arguments
// break `arguments_schema`, or the `invoke` ... is larger than the
// effective `max_header`", and no `started` is given:
// exit status 4 (docs/cli.md), nothing on standard output, no invoke at
// the child, and the offending value in no output ("never the value
// itself"; -v adds the host's own log).
func TestRefusedCalls(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, mode, tool, args, secret string
	}{
		{"unknown_tool", "ok", "nosuch", `{}`, ""},                                                         // §7 "Refused calls": unknown tool
		{"argument_type", "ok", "t", `{"n": "SECRET-ARG-1234"}`, "SECRET-ARG-1234"},                        // §7 arguments_schema: n is an integer
		{"argument_too_long", "ok", "t", `{"name": "SECRET-LONG-NAME"}`, "SECRET-LONG-NAME"},               // §7 arguments_schema: maxLength 5
		{"argument_fraction", "ok", "t", `{"n": 1.5}`, ""},                                                 // §7 arguments_schema: an integer
		{"over_max_header", "hello_small_limits", "t", `{"pad": "` + strings.Repeat("p", 2000) + `"}`, ""}, // §2 effective max_header; §7 "Refused calls"
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runCall(t, tc.mode, tc.tool, "--args", tc.args, "-v")
			checkRefused(t, res, 4)
			assert.Falsef(t, len(res.find("conn", nil)) > 0, "the host opened a stream connection for a refused call")
			assert.Falsef(t, tc.secret != "" && strings.Contains(res.stderr, tc.secret), "the refusal shows the offending value %q (docs/protocol.md §7 \"Schemas\")", tc.secret)
		})
	}
}

// TestArgumentDefaults checks that the defaults arguments_schema declares
// are filled in before the invoke (docs/cli.md --args; docs/protocol.md
// §7 "Schemas").
func TestArgumentDefaults(t *testing.T) {
	t.Parallel()
	res := runCall(t, "ok", "t", "--args", `{"n": 1}`)
	res.expect(t, outcome{rc: 0, frames: 4, kind: "completed"})
	if inv, ok := res.first(t, "invoke", nil); ok {
		got := normalize(t, inv.F["arguments"])
		if want := normalize(t, map[string]any{"n": 1, "d": 7}); !reflect.DeepEqual(got, want) {
			assert.Fail(t, fmt.Sprintf("invoke arguments %v, want %v", got, want))
		}
	}
}

// TestInputRefused checks docs/protocol.md §7 "Schemas": "Validate caller
// payloads against `input_schema` before sending": an input line that breaks it never reaches
// the child, the call is cancelled and the exit status is 4 (docs/cli.md
// exit statuses), and the line's value appears in no output.
func TestInputRefused(t *testing.T) {
	t.Parallel()
	const secret = "SECRET-INPUT-LINE"
	in := filepath.Join(t.TempDir(), "input.txt")
	require.NoError(t, os.WriteFile(in, []byte("ok-line\n"+secret+"\n"), 0o600))
	res := runCall(t, "cancel_aware", "t", "--input", in)
	assert.EqualValuesf(t, 4, res.rc, "exit status %d, want 4", res.rc)
	checkStream(t, res.frames)
	var texts []string
	for _, e := range res.find("recv", nil) {
		if p, ok := e.F["payload"].(map[string]any); ok {
			s, _ := p["text"].(string)
			texts = append(texts, s)
		}
	}
	// docs/cli.md: a text line is sent as {"text": line} with its line
	// ending kept.
	assert.Falsef(t, !reflect.DeepEqual(texts, []string{"ok-line\n"}), "the child got caller chunks %q, want only the valid line, with its newline", texts)
	assert.Falsef(t, strings.Contains(res.stderr, secret) || strings.Contains(linesText(res), secret), "the refusal shows the offending value (docs/protocol.md §7 \"Schemas\")")
	if last := res.terminal(); last.Kind != "cancelled" {
		assert.Fail(t, fmt.Sprintf("terminal %s, want cancelled (docs/cli.md: the call is then cancelled)", last.Kind))
	}
	if t.Failed() {
		res.dump(t)
	}
}
