package mcpbridge

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxInputLine bounds one line that lineReader reads (a stdio client's
// input, an MCP server's output), the go-sdk's own bound on a message
// (mcp.DefaultMaxLineLength, 16 MiB): a longer line is a badLine of
// kindTooLarge, its bytes past the bound dropped unread into memory.
const maxInputLine = mcp.DefaultMaxLineLength

// LineTransport is the go-sdk's stdio transport (an mcp.IOTransport) over
// in and out, with the client's input checked a line at a time. MCP's
// stdio framing is one JSON-RPC message per line, and the go-sdk ends the
// session at the first line it cannot read, with no answer to the client.
// Each line is instead checked before the go-sdk reads it: one that holds
// a single JSON-RPC 2.0 message is passed on, without the JSON whitespace
// around it; every other line that is not blank (JSON whitespace only)
// gets a JSON-RPC error answer of its own and is dropped, while the
// session goes on:
//   - a line that is not one JSON value: -32700 (parse error);
//   - a batch (a JSON array): -32600 (invalid request). MCP 2025-06-18
//     removed batches, and the go-sdk's support of the older versions'
//     batches can leave one unanswered;
//   - a value that is not a JSON-RPC 2.0 message: -32600;
//   - a line longer than 16 MiB: -32600.
//
// The answer's id is the line's own when the line is a request (an object
// with a "method") whose id can be read, and null otherwise (JSON-RPC 2.0,
// section 5): a broken response's id is one the server gave, and an
// answer carrying it would read as the answer to the client's own request
// of that id. Each refused line is logged on log at warning level, by its
// kind, never its content. The answers go to out between the go-sdk's
// own messages, never inside one: both write each message with one Write,
// taken in turn.
func LineTransport(in io.ReadCloser, out io.WriteCloser, log *slog.Logger) *mcp.IOTransport {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &turnWriter{w: out}
	return &mcp.IOTransport{
		Reader:        newLineReader(in, false, func(b badLine) error { answer(w, log, b); return nil }),
		Writer:        w,
		MaxLineLength: maxInputLine + len("\n"), // a line passed on, with its newline
	}
}

// answer writes the error answer to a client's line that LineTransport
// did not pass on, and logs that it did.
func answer(out io.Writer, log *slog.Logger, b badLine) {
	code, message := int64(jsonrpc.CodeInvalidRequest), ""
	switch b.kind {
	case kindNotJSON:
		code, message = jsonrpc.CodeParseError, "parse error: the line is not one JSON value"
	case kindBatch:
		message = "JSON-RPC batches are not supported"
	case kindNotMessage:
		message = "invalid request: not a JSON-RPC 2.0 message"
	case kindTooLarge:
		message = "message larger than 16 MiB"
	}
	id := json.RawMessage("null")
	if b.kind == kindNotMessage {
		if rid := requestID(bytes.Trim(b.line, jsonSpace)); rid != nil {
			id = rid
		}
	}
	type wireError struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	}
	m, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   wireError       `json:"error"`
	}{"2.0", id, wireError{code, message}})
	if err == nil {
		_, err = out.Write(append(m, '\n'))
	}
	log.Warn("mcpbridge: an input line refused", "kind", b.kind, "code", code, "answered", err == nil)
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
// each line that holds one, without the JSON whitespace around it and with
// a newline, and gives every other line but a blank one to drop; an error
// drop returns ends the reading (Read returns it). LineTransport reads a
// client's input with it, commandTransport an MCP server's output. The
// go-sdk reads it from one goroutine.
type lineReader struct {
	in      io.Closer
	br      *bufio.Reader
	batches bool // pass on a batch of JSON-RPC messages as one line
	drop    func(badLine) error

	// line is the line being read, at most maxInputLine+len("\r\n")+
	// lineChunk bytes. Its buffer is let go before the next line once it
	// grew past lineChunk (the go-sdk's decoder keeps one as large).
	line    []byte
	pending []byte // what is left to pass on of the last line passed, nil once read
	err     error  // the input's end, or drop's error, returned once pending is read
}

// badLine is a line that lineReader did not pass on. What answers it
// (answer) and whether it may be a response (serverLine) follow from its
// kind and its bytes.
type badLine struct {
	kind string // kindNotJSON, kindBatch, kindNotMessage or kindTooLarge
	line []byte // the line, nil when too large; drop must not keep it
}

// The kinds of badLine, as the logs name them.
const (
	kindNotJSON    = "not JSON"         // not one JSON value
	kindBatch      = "batch"            // a JSON array (on the client's side, one that is not a batch of messages)
	kindNotMessage = "not JSON-RPC 2.0" // JSON, not a JSON-RPC 2.0 message
	kindTooLarge   = "too large"        // over maxInputLine
)

// newLineReader reads in a line at a time; see lineReader.
func newLineReader(in io.ReadCloser, batches bool, drop func(badLine) error) *lineReader {
	return &lineReader{in: in, br: bufio.NewReaderSize(in, lineChunk), batches: batches, drop: drop}
}

func (r *lineReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if cap(r.line) > lineChunk {
			r.line = nil
		}
		tooLong, err := r.next()
		if err != nil {
			r.err = err
		}
		body, err := r.pass(tooLong)
		if err != nil && r.err == nil { // the input's own end says more of a line it cut
			r.err = err
		}
		if body != nil {
			r.pending = append(body, '\n')
		}
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	if len(r.pending) == 0 {
		r.pending = nil
	}
	return n, nil
}

// jsonSpace is the whitespace JSON allows around a value (RFC 8259).
const jsonSpace = " \t\r\n"

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

// pass returns the JSON-RPC message r.line, just read, holds, without the
// JSON whitespace around it, or nil; it gives any other line but a blank
// one to r.drop, and returns drop's error.
func (r *lineReader) pass(tooLong bool) ([]byte, error) {
	body := bytes.Trim(r.line, jsonSpace)
	switch {
	case tooLong:
		return nil, r.drop(badLine{kind: kindTooLarge})
	case len(body) == 0:
		return nil, nil
	case !json.Valid(body):
		return nil, r.drop(badLine{kind: kindNotJSON, line: r.line})
	case body[0] == '[':
		if r.batches && isBatch(body) {
			return body, nil
		}
		return nil, r.drop(badLine{kind: kindBatch, line: r.line})
	}
	if _, err := jsonrpc.DecodeMessage(body); err == nil {
		return body, nil
	}
	return nil, r.drop(badLine{kind: kindNotMessage, line: r.line})
}

// requestID is the id of body, one JSON value, when body is a request (an
// object with a "method", read by its exact key) whose id is valid (a
// string or a number), as written, and nil otherwise.
func requestID(body []byte) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	if _, ok := m["method"]; !ok {
		return nil
	}
	return validID(m["id"])
}

// mayBeAnswer reports whether body, one JSON value, may be meant as a
// response: an object with an "id" and no "method", or an array holding
// one.
func mayBeAnswer(body []byte) bool {
	if body[0] == '[' {
		var elems []json.RawMessage
		if json.Unmarshal(body, &elems) != nil {
			return false
		}
		return slices.ContainsFunc(elems, func(e json.RawMessage) bool { return len(e) > 0 && e[0] == '{' && mayBeAnswer(e) })
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return false
	}
	_, id := m["id"]
	_, method := m["method"]
	return id && !method
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

// validID is raw as written when it is a valid JSON-RPC id (a string or
// a number), and nil otherwise.
func validID(raw json.RawMessage) json.RawMessage {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return nil
	}
	if id, err := jsonrpc.MakeID(v); err != nil || !id.IsValid() {
		return nil
	}
	return raw
}

// Close closes the input.
func (r *lineReader) Close() error { return r.in.Close() }
