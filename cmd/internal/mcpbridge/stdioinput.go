package mcpbridge

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxInputLine bounds one line of a stdio client's input, the go-sdk's
// own bound on a message (mcp.DefaultMaxLineLength, 16 MiB): a longer
// line is answered as too large and its bytes past the bound dropped
// unread into memory.
const maxInputLine = mcp.DefaultMaxLineLength

// LineTransport is the go-sdk's stdio transport (an mcp.IOTransport) over
// in and out, with the client's input checked a line at a time. MCP's
// stdio framing is one JSON-RPC message per line, and the go-sdk ends the
// session at the first line it cannot read, with no answer to the client.
// Each line is instead checked before the go-sdk reads it, and one that is
// not a single JSON-RPC 2.0 message gets a JSON-RPC error answer of its
// own and is dropped, while the session goes on:
//   - a line that is not one JSON value: -32700 (parse error);
//   - a batch (a JSON array): -32600 (invalid request). MCP 2025-06-18
//     removed batches, and the go-sdk's support of the older versions'
//     batches can leave one unanswered;
//   - a value that is not a JSON-RPC 2.0 message: -32600;
//   - a line longer than 16 MiB: -32600.
//
// The answer's id is the line's own where one can be read, and null
// otherwise (JSON-RPC 2.0, section 5). Blank lines are skipped. Each
// refused line is logged on log at warning level, by its kind, never its
// content. The answers go to out between the go-sdk's own messages, never
// inside one: both write each message with one Write, taken in turn.
func LineTransport(in io.ReadCloser, out io.WriteCloser, log *slog.Logger) *mcp.IOTransport {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &turnWriter{w: out}
	return &mcp.IOTransport{
		Reader:        newLineReader(in, false, func(b badLine) { answer(w, log, b) }),
		Writer:        w,
		MaxLineLength: maxInputLine + len("\n"), // a line passed on, with its newline
	}
}

// answer writes the error answer to a client's line that LineTransport
// did not pass on, and logs that it did.
func answer(out io.Writer, log *slog.Logger, b badLine) {
	id := b.id
	if id == nil {
		id = json.RawMessage("null")
	}
	type wireError struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	}
	m, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   wireError       `json:"error"`
	}{"2.0", id, wireError{b.code, b.message}})
	if err == nil {
		_, err = out.Write(append(m, '\n'))
	}
	log.Warn("mcpbridge: an input line refused", "kind", b.kind, "code", b.code, "answered", err == nil)
}

// lineChunk is the size of lineReader's read buffer: a line longer than
// it is gathered chunk by chunk, up to maxInputLine.
const lineChunk = 64 << 10

// turnWriter makes each Write one piece on w: the go-sdk writes a message
// with one Write, and lineReader an answer with one.
type turnWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (t *turnWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.w.Write(p)
}

func (t *turnWriter) Close() error { return t.w.Close() }

// lineReader reads JSON-RPC messages framed one per line: it passes on
// each line that holds one, with its newline, and gives every other line
// but a blank one to drop. LineTransport reads a client's input with it,
// commandTransport an MCP server's output. The go-sdk reads it from one
// goroutine.
type lineReader struct {
	in      io.Closer
	br      *bufio.Reader
	batches bool // pass on a batch of JSON-RPC messages as one line
	drop    func(badLine)

	line    []byte // the line being read; at most maxInputLine+len("\r\n")+lineChunk bytes
	pending []byte // what is left to pass on of the last line passed
	err     error  // the input's end, returned once pending is read
}

// badLine is a line that lineReader did not pass on, with the JSON-RPC
// error that answers it.
type badLine struct {
	kind    string          // "not JSON", "batch", "not JSON-RPC 2.0" or "too large"
	code    int64           // jsonrpc.CodeParseError or jsonrpc.CodeInvalidRequest
	message string          // the error's message
	id      json.RawMessage // the line's id, where one can be read; nil otherwise
	line    []byte          // the line, nil when too large; drop must not keep it
}

// newLineReader reads in a line at a time; see lineReader.
func newLineReader(in io.ReadCloser, batches bool, drop func(badLine)) *lineReader {
	return &lineReader{in: in, br: bufio.NewReaderSize(in, lineChunk), batches: batches, drop: drop}
}

func (r *lineReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if cap(r.line) > lineChunk {
			r.line = nil // a long line's buffer is not kept for the lines after it
		}
		tooLong, err := r.next()
		if err != nil {
			r.err = err
		}
		if r.pass(tooLong) {
			r.pending = append(r.line, '\n')
		}
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// next reads the next line into r.line, without its line end ("\n" or
// "\r\n"). A line longer than maxInputLine leaves r.line empty, its
// bytes read and dropped, and reports tooLong. The error is the input's,
// after the line: io.EOF at its end.
func (r *lineReader) next() (tooLong bool, err error) {
	r.line = r.line[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		if !tooLong {
			r.line = append(r.line, chunk...)
			if len(r.line) > maxInputLine+len("\r\n") {
				tooLong, r.line = true, r.line[:0]
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		r.line = bytes.TrimSuffix(bytes.TrimSuffix(r.line, []byte("\n")), []byte("\r"))
		if len(r.line) > maxInputLine {
			tooLong, r.line = true, r.line[:0]
		}
		return tooLong, err
	}
}

// pass reports whether r.line, just read, is one JSON-RPC message to pass
// on; it gives any other line but a blank one to r.drop.
func (r *lineReader) pass(tooLong bool) bool {
	switch body := bytes.TrimSpace(r.line); {
	case tooLong:
		r.drop(badLine{kind: "too large", code: jsonrpc.CodeInvalidRequest, message: "message larger than 16 MiB"})
	case len(body) == 0:
	case !json.Valid(body):
		r.drop(badLine{kind: "not JSON", code: jsonrpc.CodeParseError, message: "parse error: the line is not one JSON value", line: r.line})
	case body[0] == '[':
		if r.batches && isBatch(body) {
			return true
		}
		r.drop(badLine{kind: "batch", code: jsonrpc.CodeInvalidRequest, message: "JSON-RPC batches are not supported", line: r.line})
	default:
		if _, err := jsonrpc.DecodeMessage(body); err == nil {
			return true
		}
		r.drop(badLine{kind: "not JSON-RPC 2.0", code: jsonrpc.CodeInvalidRequest, message: "invalid request: not a JSON-RPC 2.0 message",
			id: idOf(body), line: r.line})
	}
	return false
}

// isBatch reports whether body, a JSON array, is a batch of JSON-RPC 2.0
// messages, at least one.
func isBatch(body []byte) bool {
	var msgs []json.RawMessage
	if json.Unmarshal(body, &msgs) != nil || len(msgs) == 0 {
		return false
	}
	for _, m := range msgs {
		if _, err := jsonrpc.DecodeMessage(m); err != nil {
			return false
		}
	}
	return true
}

// idOf is the id of a JSON object that has a valid JSON-RPC id (a string
// or a number), as written, and nil otherwise.
func idOf(body []byte) json.RawMessage {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(body, &m) != nil || len(m.ID) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(m.ID, &v) != nil {
		return nil
	}
	if id, err := jsonrpc.MakeID(v); err != nil || !id.IsValid() {
		return nil
	}
	return m.ID
}

// Close closes the input.
func (r *lineReader) Close() error { return r.in.Close() }
