package child_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child/demotools"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

func TestHello(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		_, hello := tg.start(t, config{})
		require.Equal(t, []int64{1}, hello.Protocol)
		require.NotEmpty(t, hello.SDK)
		require.Positive(t, hello.PID)
		require.GreaterOrEqual(t, hello.MaxStreams, int64(1000))
		require.Equal(t, packetio.DefaultLimits(), hello.Limits)
		ids := map[string]wire.Tool{}
		for _, tool := range hello.Tools {
			ids[tool.ID] = tool
			require.NotEmpty(t, tool.Version, tool.ID)
			require.LessOrEqual(t, len(tool.Version), 128)
			require.NotNil(t, tool.ArgumentsSchema, tool.ID)
			require.NotNil(t, tool.InputSchema, tool.ID)
			require.NotNil(t, tool.OutputSchema, tool.ID)
			require.NotNil(t, tool.ResultSchema, tool.ID)
		}
		for _, id := range []string{"echo", "upper", "count", "media", "sleep", "fail"} {
			require.Contains(t, ids, id)
		}
		require.Contains(t, ids["sleep"].ArgumentsSchema["properties"], "ignore_cancel")
		if tg.name == "binary" {
			require.Contains(t, ids, "crash")
		}
	})
}

func TestEcho(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		begin(t, s, "e1", "echo", nil)
		require.NoError(t, s.Chunk("e1", 1, payload(map[string]any{"text": "hi"}), nil))
		data := []byte(strings.Repeat("abc", 1000))
		require.NoError(t, s.Chunk("e1", 2, nil, &frame.InlineMedia{Data: data, MediaType: "text/plain"}))
		require.NoError(t, s.Complete("e1", 3, nil))
		res := readCall(t, s, "e1")
		requireTerminal(t, res, frame.KindCompleted, 0)
		ch := res.Chunks()
		require.Len(t, ch, 2)
		txt, _ := ch[0].Payload.Text()
		require.Equal(t, "hi", txt)
		require.Equal(t, data, ch[1].Media.(*frame.InlineMedia).Data)
		require.Equal(t, int64(2), num(t, decode(t, res.Terminal.Payload)["chunks"]))
	})
}

func TestUpperAndReuse(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		for _, id := range []string{"u1", "u2", "u3"} {
			begin(t, s, id, "upper", nil)
			require.NoError(t, s.Chunk(id, 1, payload(map[string]any{"text": "abc " + id}), nil))
			require.NoError(t, s.Complete(id, 2, nil))
			res := readCall(t, s, id)
			requireTerminal(t, res, frame.KindCompleted, 0)
			require.Len(t, res.Chunks(), 1)
			txt, _ := res.Chunks()[0].Payload.Text()
			require.Equal(t, strings.ToUpper("abc "+id), txt)
		}
	})
}

func TestCount(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		begin(t, s, "c1", "count", map[string]any{"n": 5, "size": 10})
		require.NoError(t, s.Complete("c1", 1, nil))
		res := readCall(t, s, "c1")
		requireTerminal(t, res, frame.KindCompleted, 0)
		for i, f := range res.Chunks() {
			m := decode(t, f.Payload)
			require.Equal(t, int64(i), num(t, m["i"]))
			require.Len(t, m["pad"], 10)
			require.Equal(t, uint64(i+1), f.Sequence)
		}
		require.Len(t, res.Chunks(), 5)
		require.Equal(t, int64(5), num(t, decode(t, res.Terminal.Payload)["n"]))
	})
}

func TestMedia(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		const total = 200_001
		begin(t, s, "m1", "media", map[string]any{"bytes": total, "chunk": 65536})
		require.NoError(t, s.Complete("m1", 1, nil))
		res := readCall(t, s, "m1")
		requireTerminal(t, res, frame.KindCompleted, 0)
		hash := sha256.New()
		got := 0
		for _, f := range res.Chunks() {
			m := f.Media.(*frame.InlineMedia)
			require.Equal(t, demotools.MediaType, m.MediaType)
			// One comparison of the chunk: a require per byte cost
			// seconds under -race.
			want := make([]byte, len(m.Data))
			for i := range want {
				want[i] = demotools.MediaByte(int64(got + i))
			}
			require.Truef(t, bytes.Equal(want, m.Data), "media bytes %d to %d differ", got, got+len(m.Data))
			got += len(m.Data)
			hash.Write(m.Data)
		}
		require.Equal(t, total, got)
		require.Len(t, res.Chunks(), 4)
		require.Equal(t, hex.EncodeToString(hash.Sum(nil)), decode(t, res.Terminal.Payload)["sha256"])
	})
}

func TestFail(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		msg := "boom " + strings.Repeat("é", 3000)
		begin(t, s, "f1", "fail", map[string]any{"message": msg})
		require.NoError(t, s.Complete("f1", 1, nil))
		res := readCall(t, s, "f1")
		requireTerminal(t, res, frame.KindFailed, frame.CodeProviderError)
		require.Equal(t, protocol.SanitizeMessage(msg), res.Terminal.Error.Message)
	})
}

func TestUnknownToolKeepsConnection(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		require.NoError(t, s.Invoke("x1", "no-such-tool", nil, 0))
		res := readCall(t, s, "x1")
		requireTerminal(t, res, frame.KindFailed, frame.CodeInvalidFrame)
		require.Equal(t, uint64(1), res.Terminal.Sequence)
		require.Contains(t, res.Terminal.Error.Message, "unknown tool")
		// The caller's frames of the ended call are discarded until its terminal.
		require.NoError(t, s.Started("x1"))
		require.NoError(t, s.Chunk("x1", 1, payload(map[string]any{"a": 1}), nil))
		require.NoError(t, s.Complete("x1", 2, nil))
		requireCountCompletes(t, s, "x2")
	})
}

func TestDiscardAfterEndUntilCallerTerminal(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		begin(t, s, "d1", "count", map[string]any{"n": 2})
		requireTerminal(t, readCall(t, s, "d1"), frame.KindCompleted, 0)
		// The call ended; the caller's direction goes on: more than the
		// queue holds, all discarded.
		for i := uint64(1); i <= 20; i++ {
			require.NoError(t, s.Chunk("d1", i, payload(map[string]any{"i": i}), nil))
		}
		require.NoError(t, s.Complete("d1", 21, nil))
		begin(t, s, "d2", "echo", nil)
		require.NoError(t, s.Complete("d2", 1, nil))
		res := readCall(t, s, "d2")
		requireTerminal(t, res, frame.KindCompleted, 0)
		require.Empty(t, res.Chunks())
	})
}

func TestTimeout(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		start := time.Now()
		require.NoError(t, s.Invoke("t1", "sleep", map[string]any{"ms": 60_000}, 100*time.Millisecond))
		require.NoError(t, s.Started("t1"))
		res := readCall(t, s, "t1")
		requireTerminal(t, res, frame.KindFailed, frame.CodeTimeout)
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
		require.NoError(t, s.Complete("t1", 1, nil))
	})
}
