package mcpbridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// strayLineLogged bounds how much of a line an MCP server wrote on stdout
// that is not a JSON-RPC message is logged.
const strayLineLogged = 256

// errServerOutput ends the connection to an MCP server that wrote on
// stdout a line that may be the answer to a request but is not a JSON-RPC
// message (it has an "id" and no "method"), or a line over 16 MiB: the
// call waiting for that answer would otherwise wait for ever.
var errServerOutput = errors.New("mcpbridge: the MCP server wrote on stdout an answer that is not a JSON-RPC message")

// commandTransport starts the MCP stdio server cmd and connects to it as
// the go-sdk's mcp.CommandTransport does, but reads the server's stdout a
// line at a time (lineReader). A line that is not a JSON-RPC message and
// no answer to a request, a stray print of the server's, is logged on log
// at warning level and skipped, where the go-sdk would end the session at
// it. The log shows the line's first 256 bytes: it is the server's own
// output, as its stderr is, which the host logs line by line, and what
// lets its author find the print. A line that may be an answer, or is
// over 16 MiB, ends the connection with errServerOutput, its content not
// logged. Closing the connection closes the server's stdin and waits
// grace for it to exit, then sends SIGTERM and waits grace, then SIGKILL.
type commandTransport struct {
	cmd   *exec.Cmd
	grace time.Duration
	log   *slog.Logger
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
	out := newLineReader(io.NopCloser(stdout), true, func(b badLine) error {
		if b.answer || b.line == nil {
			t.log.Warn("mcpbridge: the MCP server wrote on stdout an answer that is not a JSON-RPC message; the connection ends",
				"kind", b.kind, "bytes", len(b.line))
			return fmt.Errorf("%w (%s)", errServerOutput, b.kind)
		}
		line := b.line
		if len(line) > strayLineLogged {
			line = line[:strayLineLogged]
		}
		t.log.Warn("mcpbridge: the MCP server wrote a line on stdout that is not a JSON-RPC message; skipped",
			"kind", b.kind, "line", string(line))
		return nil
	})
	tr := &mcp.IOTransport{Reader: out, Writer: &serverInput{cmd: t.cmd, stdin: stdin, grace: t.grace},
		MaxLineLength: maxInputLine + len("\n")}
	return tr.Connect(ctx)
}

// serverInput is an MCP server's stdin; its Close ends the server.
type serverInput struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	grace time.Duration
}

func (s *serverInput) Write(p []byte) (int, error) { return s.stdin.Write(p) }

// Close closes the server's stdin and waits for the server to exit,
// grace at a time: then it sends SIGTERM, then SIGKILL. It returns the
// server's exit (cmd.Wait), with the error of closing its stdin if that
// failed.
func (s *serverInput) Close() error {
	var closeErr error
	if err := s.stdin.Close(); err != nil {
		closeErr = fmt.Errorf("mcpbridge: closing the MCP server's stdin: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }() // ends as the server exits, at the SIGKILL below at the latest
	for _, sig := range []os.Signal{nil, syscall.SIGTERM, syscall.SIGKILL} {
		if sig != nil {
			// An error: it exited meanwhile, and the wait below ends at
			// once.
			_ = s.cmd.Process.Signal(sig)
		}
		t := time.NewTimer(s.grace)
		select {
		case err := <-exited:
			t.Stop()
			return errors.Join(closeErr, err)
		case <-t.C:
		}
	}
	return errors.Join(closeErr, errors.New("mcpbridge: the MCP server did not exit after SIGKILL"))
}
