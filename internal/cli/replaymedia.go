package cli

import (
	"fmt"
	"io"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/termsafe"
)

// maxMediaLines bounds the media lines replay prints for one call; the
// rest are counted in one more line.
const maxMediaLines = 20

// replayMedia is what replay shows of one media chunk a call sent.
type replayMedia struct {
	seq  uint64
	info *calllog.MediaInfo
}

// mediaOf returns the media chunks of each call's last attempt in events,
// by call id, in the order they were sent: what replay prints beside a
// call's text, which holds only the chunks' "text" strings.
func mediaOf(events []calllog.Event) map[string][]replayMedia {
	m := map[string][]replayMedia{}
	for _, e := range events {
		switch {
		case e.Kind == calllog.KindRequest || e.Kind == calllog.KindRetry:
			delete(m, e.Call) // a new attempt: its output replaces the last one's
		case e.Kind == calllog.KindOutput && e.FrameKind == frame.KindChunk && e.Media != nil:
			m[e.Call] = append(m[e.Call], replayMedia{seq: e.FrameSeq, info: e.Media})
		}
	}
	return m
}

// printReplayMedia prints one line per media chunk of ms (type, size, and
// how it was sent), at most maxMediaLines of them.
func printReplayMedia(w io.Writer, ms []replayMedia) {
	for i, m := range ms {
		if i == maxMediaLines {
			fmt.Fprintf(w, "  media: %d more\n", len(ms)-i)
			return
		}
		how := m.info.Kind
		if how == "inline" && m.info.Data == nil {
			how = "inline, bytes not kept"
		}
		fmt.Fprintf(w, "  media: chunk %d, %s, %s (%s)\n", m.seq, termsafe.Escape(m.info.MediaType), formatBytes(m.info.Bytes), termsafe.Escape(how))
	}
}
