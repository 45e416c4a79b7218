package mcpbridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// strayLineLogged bounds how much of a line an MCP server wrote on stdout
// that is not a JSON-RPC message is logged.
const strayLineLogged = 256

// errServerOutput ends the connection to an MCP server that wrote on
// stdout a line that is not a JSON-RPC message and may be the answer a
// call waits for: JSON that may be meant as a response (mayBeAnswer), a
// line that begins like a JSON object, or an array of them, but is not
// JSON (a message spread over lines, which MCP's stdio framing forbids,
// or a value JSON does not allow, such as NaN), or a line over 16 MiB.
// Skipping it would leave that call waiting for ever.
var errServerOutput = errors.New("mcpbridge: the MCP server wrote on stdout a line that is not a JSON-RPC message and may be an answer")

// commandTransport starts the MCP stdio server cmd and connects to it as
// the go-sdk's mcp.CommandTransport does, but reads the server's stdout a
// line at a time (lineReader), each line one message, as MCP's stdio
// framing has it. A line that is not a JSON-RPC message and cannot be an
// answer, a stray print of the server's, is logged and skipped, where the
// go-sdk would end the session at it; any other line that is not a
// message ends the connection with errServerOutput (serverLine). Closing
// the connection closes the server's stdin and waits grace for it to
// exit, then sends SIGTERM and waits grace, then sends SIGKILL and waits
// for the exit.
type commandTransport struct {
	cmd   *exec.Cmd
	grace time.Duration
	log   *slog.Logger

	// input is the server's stdin once Connect started the server; its
	// Close is the one wait for the server's exit, which Wrapper.reap
	// goes through too. Set by Connect, read once Connect returned.
	input *serverInput
}

// serverLine is what commandTransport does with a line of the server's
// that lineReader did not pass on. One that may be an answer (see
// errServerOutput) ends the connection: it is logged at warning level by
// its kind, and its size but for a line over 16 MiB, never its content,
// which may be a call's result, and serverLine returns errServerOutput.
// Any other is logged at warning level with its first 256 bytes, and
// skipped: it is the server's own output, as its stderr is, which the
// host logs line by line, and what lets its author find the print.
func serverLine(log *slog.Logger, b badLine) error {
	var answerLike bool
	switch b.kind {
	case kindTooLarge:
		answerLike = true
	case kindNotJSON:
		answerLike = beginsObjects(b.line)
	case kindBatch, kindNotMessage:
		answerLike = mayBeAnswer(bytes.Trim(b.line, jsonSpace))
	}
	if answerLike {
		attrs := []any{"kind", b.kind}
		if b.kind != kindTooLarge { // its bytes were dropped unread
			attrs = append(attrs, "bytes", len(b.line))
		}
		log.Warn("mcpbridge: the MCP server wrote on stdout a line that is not a JSON-RPC message and may be an answer; the connection ends", attrs...)
		return fmt.Errorf("%w (%s)", errServerOutput, b.kind)
	}
	line := b.line
	if len(line) > strayLineLogged {
		line = line[:strayLineLogged]
	}
	log.Warn("mcpbridge: the MCP server wrote a line on stdout that is not a JSON-RPC message; skipped",
		"kind", b.kind, "line", string(line))
	return nil
}

// beginsObjects reports whether line, not blank, begins like a JSON object
// or an array of objects: "{", or "[" and then "{" or nothing. A log line
// such as "[INFO] started" does not.
func beginsObjects(line []byte) bool {
	first := bytes.TrimLeft(line, jsonSpace)
	if len(first) == 0 {
		return false
	}
	if first[0] == '{' {
		return true
	}
	rest := bytes.TrimLeft(first[1:], jsonSpace)
	return first[0] == '[' && (len(rest) == 0 || rest[0] == '{')
}

func (t *commandTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	// The connection closes by closing the server's stdin (serverInput),
	// not its stdout, which the server may still write to.
	out := newLineReader(io.NopCloser(stdout), true, func(b badLine) error { return serverLine(t.log, b) })
	t.input = &serverInput{cmd: t.cmd, stdin: stdin, grace: t.grace}
	tr := &mcp.IOTransport{Reader: out, Writer: t.input, MaxLineLength: maxInputLine + len("\n")}
	return tr.Connect(ctx)
}

// serverInput is an MCP server's stdin; its Close ends the server.
type serverInput struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	grace time.Duration

	once sync.Once
	err  error // Close's, set once
}

func (s *serverInput) Write(p []byte) (int, error) { return s.stdin.Write(p) }

// Close closes the server's stdin and waits for the server to exit,
// grace at a time: then it sends SIGTERM, then SIGKILL, after which it
// waits for the exit however long it takes (cmd.WaitDelay bounds the
// wait for its stderr). It returns the server's exit (cmd.Wait), with the
// error of closing its stdin if that failed. It runs once: a second call,
// at the same time or later, waits for the first and returns its result,
// so that cmd.Wait runs once.
func (s *serverInput) Close() error {
	s.once.Do(func() { s.err = s.close() })
	return s.err
}

func (s *serverInput) close() error {
	var closeErr error
	if err := s.stdin.Close(); err != nil {
		closeErr = fmt.Errorf("mcpbridge: closing the MCP server's stdin: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }() // ends as the server exits; close waits for it
	for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t := time.NewTimer(s.grace)
		select {
		case err := <-exited:
			t.Stop()
			return errors.Join(closeErr, err)
		case <-t.C:
		}
		// An error: it exited meanwhile, and the wait ends at once.
		_ = s.cmd.Process.Signal(sig)
	}
	return errors.Join(closeErr, <-exited)
}
