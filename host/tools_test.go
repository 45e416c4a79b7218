package host

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
)

// mediaByte is cmd/skulk-child's media pattern (child/demotools).
func mediaByte(i int64) byte { return byte(i % 251) }

// requireMediaBytes checks that data holds the media tool's bytes from
// offset off on (mediaByte), and names the first that differs. It
// compares the whole slice at once: a check per byte cost about 10 µs a
// byte under -race, which took a 15 MiB test past its deadline on a
// loaded machine.
func requireMediaBytes(t *testing.T, data []byte, off int64) {
	t.Helper()
	var period [251]byte
	for i := range period {
		period[i] = mediaByte(int64(i))
	}
	want := make([]byte, len(data))
	for n := 0; n < len(want); {
		n += copy(want[n:], period[(off+int64(n))%251:])
	}
	if bytes.Equal(data, want) {
		return
	}
	for i := range data {
		if data[i] != want[i] {
			require.FailNow(t, fmt.Sprintf("byte %d differs", off+int64(i)))
		}
	}
}

// collect reads a call to its end and returns its frames, terminal last.
func collect(t *testing.T, c *Call) []frame.Frame {
	t.Helper()
	var out []frame.Frame
	for f, err := range c.Frames() {
		require.NoError(t, err, "Frames")
		out = append(out, f)
	}
	if _, err := c.Recv(callCtx(t, time.Second)); !errors.Is(err, io.EOF) {
		require.FailNow(t, fmt.Sprintf("Recv after the terminal: %v, want io.EOF", err))
	}
	checkSequence(t, out)
	return out
}

// checkSequence asserts started(0), then consecutive sequences, one terminal
// last.
func checkSequence(t *testing.T, fs []frame.Frame) {
	t.Helper()
	require.Falsef(t, len(fs) < 2, "got %d frames, want started and a terminal at least", len(fs))
	if fs[0].Kind != frame.KindStarted || fs[0].Sequence != 0 || fs[0].Direction != frame.ProviderToCaller {
		require.FailNow(t, fmt.Sprintf("first frame: %v seq %d, want provider started 0", fs[0].Kind, fs[0].Sequence))
	}
	for i, f := range fs {
		require.Falsef(t, f.Sequence != uint64(i), "frame %d has sequence %d", i, f.Sequence)
		require.Falsef(t, f.Kind.IsTerminal() != (i == len(fs)-1), "frame %d (%v): terminal only last", i, f.Kind)
	}
}

func TestRealEcho(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "echo", nil)
	require.NoError(t, err)
	var want []string
	for i := range 5 {
		p := frame.MustPayload(map[string]any{"k": i})
		want = append(want, string(p))
		require.NoError(t, c.Send(ctx, p, nil))
	}
	require.NoError(t, c.Send(ctx, nil, &frame.InlineMedia{Data: []byte("raw\x00bytes"), MediaType: "application/octet-stream"}))
	require.NoError(t, c.CloseSend())
	if err := c.Send(ctx, frame.MustPayload(map[string]any{"late": true}), nil); !errors.Is(err, ErrSendClosed) {
		require.FailNow(t, fmt.Sprintf("Send after CloseSend: %v, want ErrSendClosed", err))
	}
	fs := collect(t, c)
	require.Falsef(t, len(fs) != 1+6+1, "got %d frames, want 8", len(fs))
	for i, w := range want {
		assert.Falsef(t, string(fs[1+i].Payload) != w, "chunk %d payload differs", i)
	}
	if m, ok := fs[6].Media.(*frame.InlineMedia); !ok || string(m.Data) != "raw\x00bytes" {
		assert.Fail(t, fmt.Sprintf("media chunk did not round-trip"))
	}
	last := fs[len(fs)-1]
	require.Falsef(t, last.Kind != frame.KindCompleted || last.Synthetic, "terminal %v synthetic=%v", last.Kind, last.Synthetic)
	var res struct {
		Chunks int `json:"chunks"`
	}
	if err := last.Payload.Decode(&res); err != nil || res.Chunks != 6 {
		require.FailNow(t, fmt.Sprintf("result %+v, %v", res, err))
	}
}

func TestRealUpper(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "upper", nil)
	require.NoError(t, err)
	// A payload that breaks input_schema is refused and nothing is sent.
	var se *SchemaError
	if err := c.Send(ctx, frame.MustPayload(map[string]any{"text": 42}), nil); !errors.As(err, &se) {
		require.FailNow(t, fmt.Sprintf("Send of a bad input: %v, want *SchemaError", err))
	} else if se.Schema != "input" || se.Field != "/text" || se.Keyword != "type" || se.Value != "integer" {
		require.FailNow(t, fmt.Sprintf("schema error %+v", se))
	}
	for _, s := range []string{"hello", "wörld"} {
		require.NoError(t, c.Send(ctx, frame.MustPayload(map[string]any{"text": s}), nil))
	}
	c.CloseSend()
	fs := collect(t, c)
	var got []string
	for _, f := range fs[1 : len(fs)-1] {
		s, _ := f.Payload.Text()
		got = append(got, s)
	}
	require.Falsef(t, len(got) != 2 || got[0] != "HELLO" || got[1] != "WÖRLD", "got %q", got)
}

func TestRealCount(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 1000, "size": 100}))
	require.NoError(t, err)
	c.CloseSend()
	fs := collect(t, c)
	require.EqualValuesf(t, 1002, len(fs), "got %d frames, want 1002", len(fs))
	for i, f := range fs[1:1001] {
		var v struct {
			I   int    `json:"i"`
			Pad string `json:"pad"`
		}
		if err := f.Payload.Decode(&v); err != nil || v.I != i || len(v.Pad) != 100 {
			require.FailNow(t, fmt.Sprintf("chunk %d: %+v %v", i, v, err))
		}
	}
}

func TestRealFail(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "fail", frame.MustPayload(map[string]any{"message": "no luck"}))
	require.NoError(t, err)
	_, err = c.Wait()
	var ce *frame.Error
	require.Falsef(t, !errors.As(err, &ce) || ce.Code != frame.CodeProviderError || ce.Synthetic || ce.Message != "no luck", "Wait: %#v", err)
	// The call ended on the provider's side before the caller half-closed:
	// the host closed the caller's direction itself, so CloseSend has
	// nothing to do; a second CloseSend is the caller's own mistake.
	if err := c.CloseSend(); err != nil {
		require.FailNow(t, fmt.Sprintf("CloseSend after the provider's terminal: %v, want nil", err))
	}
	if err := c.CloseSend(); !errors.Is(err, ErrSendClosed) {
		require.FailNow(t, fmt.Sprintf("second CloseSend: %v, want ErrSendClosed", err))
	}
}

// Cancel closes the caller's direction at once, even before its cancelled
// frame is written: a CloseSend after it is refused.
func TestCloseSendAfterCancel(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "echo", nil)
	require.NoError(t, err)
	c.Cancel()
	if err := c.CloseSend(); !errors.Is(err, ErrSendClosed) {
		require.FailNow(t, fmt.Sprintf("CloseSend after Cancel: %v, want ErrSendClosed", err))
	}
	term, _ := recvUntilTerminal(t, c, 10*time.Second)
	require.Falsef(t, term.Kind != frame.KindCancelled, "terminal %v, want cancelled", term.Kind)
}

func TestRealSleep(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	start := time.Now()
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 200}))
	require.NoError(t, err)
	res, err := c.Wait()
	require.NoError(t, err)
	var v struct {
		SleptMS int `json:"slept_ms"`
	}
	if res.Decode(&v); v.SleptMS != 200 || time.Since(start) < 200*time.Millisecond {
		require.FailNow(t, fmt.Sprintf("result %+v after %v", v, time.Since(start)))
	}
}

func testMedia(t *testing.T, size int64) {
	cfg := realConfig()
	h, _ := testHost(t, cfg, 2*time.Minute)
	ctx := callCtx(t, time.Minute)
	// Provider to caller: media sends size bytes in chunks of at most 4 MiB.
	c, err := h.Call(ctx, "media", frame.MustPayload(map[string]any{"bytes": size, "chunk": 4 << 20}))
	require.NoError(t, err)
	c.CloseSend()
	var got []byte
	var res frame.Payload
	for f, err := range c.Frames() {
		require.NoError(t, err)
		if m, ok := f.Media.(*frame.InlineMedia); ok {
			got = append(got, m.Data...)
		}
		if f.Kind == frame.KindCompleted {
			res = f.Payload
		} else if f.Kind.IsTerminal() {
			require.FailNow(t, fmt.Sprintf("terminal %v %v", f.Kind, f.Error))
		}
	}
	require.Falsef(t, int64(len(got)) != size, "got %d bytes, want %d", len(got), size)
	requireMediaBytes(t, got, 0)
	sum := sha256.Sum256(got)
	var v struct {
		SHA256 string `json:"sha256"`
	}
	res.Decode(&v)
	require.Falsef(t, v.SHA256 != hex.EncodeToString(sum[:]), "sha256 differs")

	// Caller to provider and back: echo carries one frame of size bytes.
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	c, err = h.Call(ctx, "echo", nil)
	require.NoError(t, err)
	// Read concurrently: echo writes the chunk back while we send.
	errc := make(chan error, 1)
	go func() { // stopped by the call's end; waited for below
		err := c.Send(ctx, nil, &frame.InlineMedia{Data: data, MediaType: "application/octet-stream"})
		if err == nil {
			err = c.CloseSend()
		}
		errc <- err
	}()
	fs := collect(t, c)
	require.NoError(t, <-errc)
	m, ok := fs[1].Media.(*frame.InlineMedia)
	require.Falsef(t, !ok || !bytes.Equal(m.Data, data), "echoed media differs")
}

func TestRealMedia1MiB(t *testing.T)  { testMedia(t, 1<<20) }
func TestRealMedia15MiB(t *testing.T) { testMedia(t, 15<<20) }

// Recycled inline frames are read into again: every byte still arrives
// as the child sent it, and later attachments reuse recycled memory.
func TestRealMediaRecycle(t *testing.T) {
	h, _ := testHost(t, realConfig(), 2*time.Minute)
	ctx := callCtx(t, time.Minute)
	// More chunks than the reader can run ahead of the caller (outQueue
	// frames, and one it holds), so that later ones must reuse memory.
	const chunk, chunks = 64 << 10, 2*outQueue + 16
	c, err := h.Call(ctx, "media", frame.MustPayload(map[string]any{"bytes": chunk * chunks, "chunk": chunk}))
	require.NoError(t, err)
	released := map[*byte]bool{}
	reused, off := 0, int64(0)
	for f, err := range c.Frames() {
		require.NoError(t, err)
		m, ok := f.Media.(*frame.InlineMedia)
		if !ok {
			continue
		}
		requireMediaBytes(t, m.Data, off)
		off += int64(len(m.Data))
		if released[&m.Data[0]] {
			reused++
		}
		released[&m.Data[0]] = true
		c.Recycle(f)
	}
	require.Falsef(t, off != chunk*chunks, "got %d bytes", off)
	// The reader runs at most outQueue+1 frames ahead of the caller.
	require.NotEqualValues(t, 0, reused, "no attachment was read into recycled memory")
	c.Recycle(frame.Frame{}) // no media: nothing happens
}

// TestRealWithInput: a call made WithInput sends its input with the invoke
// and closes the caller's direction; the provider sees every chunk, Send
// and CloseSend are closed, and the call log has the caller's frames.
// Input that breaks the tool's input_schema refuses the call.
func TestRealWithInput(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	in := []frame.Payload{frame.MustPayload(map[string]any{"text": "ab"}), frame.MustPayload(map[string]any{"text": "cd"})}
	for range 3 { // on one connection, reused
		c, err := h.Call(ctx, "upper", nil, WithInput(in...))
		require.NoError(t, err)
		if err := c.Send(ctx, in[0], nil); !errors.Is(err, ErrSendClosed) {
			require.FailNow(t, fmt.Sprintf("Send: %v, want ErrSendClosed", err))
		}
		if err := c.CloseSend(); !errors.Is(err, ErrSendClosed) {
			require.FailNow(t, fmt.Sprintf("CloseSend: %v, want ErrSendClosed", err))
		}
		fs := collect(t, c)
		var got []string
		for _, f := range fs[1 : len(fs)-1] {
			s, _ := f.Payload.Text()
			got = append(got, s)
		}
		require.EqualValuesf(t, "AB,CD", strings.Join(got, ","), "output %q, want AB,CD", got)
		if term := fs[len(fs)-1]; term.Kind != frame.KindCompleted {
			require.FailNow(t, fmt.Sprintf("terminal %v, want completed", term.Kind))
		}
		var inputs []string
		for e := range c.Events() {
			if e.Kind == calllog.KindInput {
				inputs = append(inputs, e.FrameKind.String())
			}
		}
		require.EqualValuesf(t, "started,chunk,chunk,completed", strings.Join(inputs, ","), "input events %v", inputs)
	}
	c, err := h.Call(ctx, "echo", nil, WithInput())
	require.NoError(t, err)
	if fs := collect(t, c); len(fs) != 2 {
		require.FailNow(t, fmt.Sprintf("echo without input: %d frames, want started and completed", len(fs)))
	}

	for _, bad := range []frame.Payload{frame.MustPayload(map[string]any{"n": 1}), {0x01}} {
		_, err := h.Call(ctx, "upper", nil, WithInput(bad))
		var se *SchemaError
		if !errors.As(err, &se) || se.Schema != "input" {
			require.FailNow(t, fmt.Sprintf("input %x: %v, want an input *SchemaError", []byte(bad), err))
		}
	}
}

// TestMediaOnlyChunkHasNoSchema: input_schema applies to a chunk's
// payload, so an empty payload that lacks upper's required "text" is
// refused before it is sent, while a chunk that carries only media has no
// payload and goes out unchecked: what upper makes of it is its handler's
// to say (docs/protocol.md, the tool descriptor).
func TestMediaOnlyChunkHasNoSchema(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "upper", nil)
	require.NoError(t, err)
	var se *SchemaError
	if err := c.Send(ctx, frame.MustPayload(map[string]any{}), nil); !errors.As(err, &se) || se.Keyword != "required" {
		require.FailNow(t, fmt.Sprintf("Send of a payload without text: %v, want a *SchemaError for required", err))
	}
	media := &frame.InlineMedia{Data: []byte("not text"), MediaType: "application/octet-stream"}
	if err := c.Send(ctx, nil, media); err != nil {
		require.FailNow(t, fmt.Sprintf("Send of a media-only chunk: %v, want it sent unchecked", err))
	}
	c.CloseSend()
	fs := collect(t, c)
	last := fs[len(fs)-1]
	require.Falsef(t, last.Kind != frame.KindFailed || last.Synthetic || last.Error.Code != frame.CodeProviderError, "terminal %+v, want the handler's own provider_error", last)
}
