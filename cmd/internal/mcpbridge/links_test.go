package mcpbridge

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func readLink(l *linkStore, uri string) ([]byte, error) {
	res, err := l.read(context.Background(), &mcp.ReadResourceRequest{Params: &mcp.ReadResourceParams{URI: uri}})
	if err != nil {
		return nil, err
	}
	return res.Contents[0].Blob, nil
}

// Links are read back, the oldest go first past the bound, and an id says
// nothing about the others: counting up from one link reaches no other.
func TestLinkStore(t *testing.T) {
	t.Parallel()
	l := newLinkStore(10)
	a, ok := l.put([]byte("aaaa"), "image/png")
	b, ok2 := l.put([]byte("bbbb"), "image/png")
	require.Falsef(t, !ok || !ok2 || a == b || !strings.HasPrefix(a, linkPrefix), "put: %q %v, %q %v", a, ok, b, ok2)
	for _, guess := range []string{linkPrefix + "1", linkPrefix + "2", linkPrefix, "skulk://other/" + strings.TrimPrefix(a, linkPrefix)} {
		if _, err := readLink(l, guess); err == nil {
			assert.Fail(t, fmt.Sprintf("read %q: found", guess))
		}
	}
	if got, err := readLink(l, a); err != nil || !bytes.Equal(got, []byte("aaaa")) {
		require.FailNow(t, fmt.Sprintf("read a: %q %v", got, err))
	}
	c, ok := l.put([]byte("cccc"), "image/png") // 12 bytes > 10: a goes
	require.False(t, !ok, "put c refused")
	if _, err := readLink(l, a); err == nil {
		assert.Fail(t, "a still there past the bound")
	}
	for _, u := range []string{b, c} {
		if _, err := readLink(l, u); err != nil {
			assert.Fail(t, fmt.Sprintf("read %q: %v", u, err))
		}
	}
	if _, ok := l.put(make([]byte, 11), "image/png"); ok {
		assert.Fail(t, "a put larger than the store was kept")
	}
}
