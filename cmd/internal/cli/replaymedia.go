package cli

import (
	"fmt"
	"io"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/cmd/internal/termsafe"
)

// printReplayMedia prints one line per media chunk c's last attempt sent
// (type, size, and how it was sent), at most calllog.MaxReplayMedia of
// them, and a count of the rest.
func printReplayMedia(w io.Writer, c *calllog.ReplayedCall) {
	for _, m := range c.Media {
		how := m.Kind
		if how == "inline" {
			how = "inline, bytes not shown"
		}
		fmt.Fprintf(w, "  media: %s, %s (%s)\n", termsafe.Escape(m.MediaType), formatBytes(m.Bytes), termsafe.Escape(how))
	}
	if more := c.MediaChunks - len(c.Media); more > 0 {
		fmt.Fprintf(w, "  media: %d more\n", more)
	}
}
