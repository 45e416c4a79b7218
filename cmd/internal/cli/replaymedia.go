package cli

import (
	"fmt"
	"io"

	"github.com/skulkrt/skulk/cmd/internal/termsafe"
	"github.com/skulkrt/skulk/internal/replay"
)

// printReplayMedia prints one line per media chunk c's last attempt sent
// (type, size, and whether it came inline or as a blob), at most replay.MaxMedia of
// them, and a count of the rest.
func printReplayMedia(w io.Writer, c *replay.Call) {
	for _, m := range c.Media {
		fmt.Fprintf(w, "  media: %s, %s (%s)\n", termsafe.Escape(m.MediaType), formatBytes(m.Bytes), termsafe.Escape(m.Kind))
	}
	if more := c.MediaChunks - len(c.Media); more > 0 {
		fmt.Fprintf(w, "  media: %d more\n", more)
	}
}
