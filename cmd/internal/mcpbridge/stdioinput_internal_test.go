package mcpbridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/require"
)

// closeBuffer is a bytes.Buffer with a Close.
type closeBuffer struct{ bytes.Buffer }

func (*closeBuffer) Close() error { return nil }

// errAnswer is the part of an error answer the tests check.
type errAnswer struct {
	ID    json.RawMessage
	Error struct{ Code int64 }
}

// TestLineTransportAnswersWhatItDoesNotPass: of a client's input lines,
// the JSON-RPC messages are passed on to the go-sdk, one per line, without
// the JSON whitespace around them, and lines of JSON whitespace dropped;
// every other line gets an error answer of its own, in the input's order,
// carrying the id of a request only, and is logged by its kind, without
// its content.
func TestLineTransportAnswersWhatItDoesNotPass(t *testing.T) {
	t.Parallel()
	ping := func(id string) string { return `{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}` }
	// Two lines of maxInputLine bytes and one more: a line that long is
	// read (and found not JSON at its first byte), one byte longer is too
	// large.
	longest := func(extra int) io.Reader {
		return io.LimitReader(repeatReader('s'), int64(maxInputLine+extra))
	}
	lines := func(l ...string) io.Reader { return strings.NewReader(strings.Join(l, "\n") + "\n") }
	input := io.MultiReader(lines(
		ping("1"),
		"",
		"  \t\r",
		"secret garbage",
		`[`+ping("2")+`]`,
		ping("3")+` {}`,
		`{"jsonrpc":"1.0","id":"a\"b","method":"ping"}`,
		`{"jsonrpc":"1.0","id":{"secret":1},"method":"ping"}`,
		`{"jsonrpc":"2.0","result":{}}`,
		`{"jsonrpc":"2.0","id":7,"error":"secret"}`,
		`{"jsonrpc":"1.0","ID":8,"method":"ping"}`,
		"\u00a0"+ping("9"),
		"\v",
	), longest(0), lines(""), longest(1), lines(
		"",
		" \t"+ping("4")+" \t\r",
	), strings.NewReader(ping(`"5"`))) // the last line, with no line end
	var out closeBuffer
	var log bytes.Buffer
	tr := LineTransport(io.NopCloser(input), &out, slog.New(slog.NewTextHandler(&log, nil)))
	passed, err := io.ReadAll(tr.Reader)
	require.NoError(t, err)
	require.Equal(t, ping("1")+"\n"+ping("4")+"\n"+ping(`"5"`)+"\n", string(passed), "lines passed on")

	want := []struct {
		id   string
		code int64
	}{
		{"null", -32700},   // not JSON
		{"null", -32600},   // a batch
		{"null", -32700},   // two values
		{`"a\"b"`, -32600}, // JSON-RPC 1.0, its id read
		{"null", -32600},   // an id that is no id
		{"null", -32600},   // a response without an id
		{"null", -32600},   // a broken response: its id is the server's
		{"null", -32600},   // "ID" is no id
		{"null", -32700},   // a space JSON does not allow
		{"null", -32700},   // the same
		{"null", -32700},   // the longest line read, not JSON
		{"null", -32600},   // too large
	}
	dec := json.NewDecoder(&out)
	for i, w := range want {
		var a errAnswer
		require.NoError(t, dec.Decode(&a), "answer %d", i)
		require.Equal(t, w.id, string(a.ID), "answer %d's id", i)
		require.Equal(t, w.code, a.Error.Code, "answer %d's code", i)
	}
	require.False(t, dec.More(), "answers beyond those wanted")
	require.Equal(t, len(want), strings.Count(log.String(), "an input line refused"), "log: %s", log.String())
	for _, kind := range []string{"kind=batch", `kind="not JSON"`, `kind="not JSON-RPC 2.0"`, `kind="too large"`} {
		require.Contains(t, log.String(), kind)
	}
	require.NotContains(t, log.String(), "secret", "the log echoes input")
	require.NotContains(t, out.String(), "secret", "an answer echoes input")
}

// TestLineTransportKeepsNoLongLine: the buffer a long line needed is let
// go once the line is read, while short lines keep theirs.
func TestLineTransportKeepsNoLongLine(t *testing.T) {
	t.Parallel()
	long := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"p":"` + strings.Repeat("p", 1<<20) + `"}}`
	input := long + "\n" + `{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\n"
	tr := LineTransport(io.NopCloser(strings.NewReader(input)), &closeBuffer{}, nil)
	r := tr.Reader.(*lineReader)
	got := make([]byte, len(long)+1)
	_, err := io.ReadFull(r, got)
	require.NoError(t, err)
	require.Equal(t, long+"\n", string(got))
	require.Nil(t, r.pending, "the long line, read, is still pending")
	short := make([]byte, 64)
	n, err := r.Read(short)
	require.NoError(t, err)
	require.Equal(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`+"\n", string(short[:n]))
	require.LessOrEqual(t, cap(r.line), lineChunk, "the long line's buffer is kept")
}

// repeatReader reads as an endless run of its byte.
type repeatReader byte

func (b repeatReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = byte(b)
	for n := 1; n < len(p); n *= 2 {
		copy(p[n:], p[:n])
	}
	return len(p), nil
}

// FuzzLineTransport: whatever the input, the go-sdk's connection reads
// every line of it that holds a JSON-RPC message, as that message, and
// ends with the input; each other line that is not JSON whitespace only
// gets one JSON-RPC error answer.
func FuzzLineTransport(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		"[]\n{}\r\n\n",
		`{"jsonrpc":"2.0","id":"x","result":{}}` + "\n" + `{"jsonrpc":"1.0","id":2}`,
		"\r\r\n \"\\n\"\n{\"a\":\n1}",
		` {"jsonrpc":"2.0","id":1,"method":"ping"}` + "\t\n\v\n\u00a0",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		var out closeBuffer
		conn, err := LineTransport(io.NopCloser(bytes.NewReader(input)), &out, nil).Connect(t.Context())
		require.NoError(t, err)
		defer conn.Close()
		var lines, n int
		for l := range bytes.Lines(input) {
			if len(bytes.Trim(l, jsonSpace)) > 0 {
				lines++
			}
		}
		for {
			m, err := conn.Read(t.Context())
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, "the go-sdk's read")
			b, err := jsonrpc.EncodeMessage(m)
			require.NoError(t, err)
			require.NotContains(t, string(b), "\n")
			n++
		}
		dec := json.NewDecoder(&out)
		for dec.More() {
			var a errAnswer
			require.NoError(t, dec.Decode(&a))
			require.Contains(t, []int64{jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest}, a.Error.Code)
			n++
		}
		require.Equal(t, lines, n, "lines not blank, against messages read and answers")
	})
}
