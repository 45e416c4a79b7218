package host

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
)

// The schema engine's refusals reach callers as *SchemaError, fields
// intact and with the host's prefix, never quoting the value.
func TestSchemaErrors(t *testing.T) {
	cat, err := newCatalog([]wire.Tool{{ID: "t", ArgumentsSchema: map[string]any{
		"type":       "object",
		"properties": map[string]any{"name": map[string]any{"type": "string", "maxLength": int8(3)}},
	}}})
	require.NoError(t, err)
	tl := cat.Tool("t")
	_, err = checkArguments(tl, frame.MustPayload(map[string]any{"name": "toolong-secret"}))
	var se *SchemaError
	require.Falsef(t, !errors.As(err, &se) || se.Schema != "arguments" || se.Field != "/name" || se.Keyword != "maxLength" || se.Value != "string of 14 bytes", "got %#v, want a *SchemaError for /name, maxLength", err)
	if msg := err.Error(); !strings.HasPrefix(msg, "host: arguments payload breaks its schema at /name") || strings.Contains(msg, "secret") {
		assert.Fail(t, fmt.Sprintf("message %q", msg))
	}
	if _, err := checkArguments(tl, frame.Payload{0xc1}); !errors.As(err, &se) || se.Value != "unreadable payload" {
		require.FailNow(t, fmt.Sprintf("unreadable arguments: %#v", err))
	}
}

func TestCatalogRefusesBadSchemas(t *testing.T) {
	for _, tools := range [][]wire.Tool{
		{{ID: "a"}, {ID: "a"}},
		{{ID: "a", InputSchema: map[string]any{"type": "no-such-type"}}},
		{{ID: "a", OutputSchema: map[string]any{"$ref": "https://example.com/remote.json"}}},
	} {
		if _, err := newCatalog(tools); !errors.Is(err, ErrHandshake) {
			assert.Fail(t, fmt.Sprintf("%+v: %v", tools, err))
		}
	}
}

func TestTailBuffer(t *testing.T) {
	var tb tailBuffer
	tb.Write([]byte(strings.Repeat("a", stderrTail-1)))
	tb.Write([]byte("bc"))
	s := tb.String()
	require.Falsef(t, len(s) != stderrTail || !strings.HasSuffix(s, "abc") || s[0] != 'a', "tail of %d bytes", len(s))
	tb.Write([]byte(strings.Repeat("é", stderrTail))) // 2 bytes each: the cut lands mid-character
	s = tb.String()
	require.Falsef(t, len(s) > stderrTail || !strings.HasPrefix(s, "é"), "tail not cut on a character boundary")
}

func TestBackoff(t *testing.T) {
	h := &Host{cfg: Config{Restart: RestartPolicy{BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second}}}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 50: time.Second} {
		for range 20 {
			d := h.backoff(n)
			require.Falsef(t, d < want/2 || d > want, "backoff(%d) = %v, want in [%v, %v]", n, d, want/2, want)
		}
	}
}
