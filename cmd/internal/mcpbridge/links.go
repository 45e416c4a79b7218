package mcpbridge

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// linkTemplate is the URI template of the media the server keeps for
// resource links; linkPrefix the URIs' common start.
const (
	linkTemplate = "skulk://media/{id}"
	linkPrefix   = "skulk://media/"
)

// linkStore keeps media for resource links, bounded by bytes: putting more
// than max drops the oldest first (a link to them then reads as not
// found). A link's id is random (crypto/rand), so that over HTTP one
// client cannot read the media of another's calls by counting. Safe for
// concurrent use.
type linkStore struct {
	max int64

	mu    sync.Mutex
	bytes int64
	order []string // ids, oldest first
	items map[string]linkItem
}

type linkItem struct {
	data      []byte // the frame's data, kept by reference (host.Call.Recv lets a caller keep it)
	mediaType string
}

func newLinkStore(max int64) *linkStore {
	return &linkStore{max: max, items: make(map[string]linkItem)}
}

// put keeps data and returns its URI; false when data alone is larger than
// the store.
func (l *linkStore) put(data []byte, mediaType string) (string, bool) {
	n := int64(len(data))
	if n > l.max {
		return "", false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.bytes+n > l.max && len(l.order) > 0 {
		old := l.order[0]
		l.order = l.order[1:]
		l.bytes -= int64(len(l.items[old].data))
		delete(l.items, old)
	}
	id := rand.Text()
	l.items[id] = linkItem{data: data, mediaType: mediaType}
	l.order = append(l.order, id)
	l.bytes += n
	return linkPrefix + id, true
}

// read serves resources/read of a link.
func (l *linkStore) read(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := strings.CutPrefix(uri, linkPrefix)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	l.mu.Lock()
	it, ok := l.items[id]
	l.mu.Unlock()
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: it.mediaType, Blob: it.data}}}, nil
}
