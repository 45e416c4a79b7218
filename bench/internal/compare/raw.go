package compare

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/bench/internal/rawbench"
)

// rawSystem is the kernel baseline: rawchild over one Unix socket.
type rawSystem struct {
	bin string // rawchild binary
	dir string // where sockets go
}

func (*rawSystem) name() string { return "raw" }

// rawSession is a started rawchild and its connection.
type rawSession struct {
	cmd  *exec.Cmd
	conn net.Conn
	br   *bufio.Reader // 64 KiB: many small messages per read syscall
	ln   net.Listener
	sock string
}

func (s *rawSystem) start(ctx context.Context) (*rawSession, error) {
	f, err := os.CreateTemp(s.dir, "raw-*.sock")
	if err != nil {
		return nil, err
	}
	sock := f.Name()
	f.Close()
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.bin, sock)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		ln.Close()
		return nil, err
	}
	rs := &rawSession{cmd: cmd, ln: ln, sock: sock}
	if d, ok := ctx.Deadline(); ok {
		ln.(*net.UnixListener).SetDeadline(d)
	}
	conn, err := ln.Accept()
	ln.Close()
	if err != nil {
		rs.close()
		return nil, fmt.Errorf("raw: accept: %w", err)
	}
	rs.conn = conn
	rs.br = bufio.NewReaderSize(conn, 64<<10)
	return rs, nil
}

func (s *rawSystem) open(ctx context.Context) (session, error) { return s.start(ctx) }

func (s *rawSystem) coldStart(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	rs, err := s.start(ctx)
	if err != nil {
		return 0, err
	}
	defer rs.close()
	if err := rs.call(ctx); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func (s *rawSystem) crash(ctx context.Context) (time.Duration, error) {
	rs, err := s.start(ctx)
	if err != nil {
		return 0, err
	}
	defer rs.close()
	rs.deadline(ctx)
	// An echo of two messages: the child answers the first and then waits
	// in its read for the second, as a provider waits mid-call.
	if _, err := rs.conn.Write(rawbench.Command(rawbench.OpEcho, 2, payloadSize)); err != nil {
		return 0, err
	}
	buf := make([]byte, payloadSize)
	if _, err := rs.conn.Write(buf); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(rs.br, buf); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := syscall.Kill(rs.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return 0, err
	}
	_, err = rs.br.ReadByte()
	d := time.Since(t0)
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		return 0, fmt.Errorf("raw: crash: read gave %v, want EOF", err)
	}
	return d, nil
}

func (*rawSystem) healthUnderBackpressure(context.Context, int, int) ([]time.Duration, error) {
	return nil, notApplicable("a raw socket has no health ping")
}

func (rs *rawSession) deadline(ctx context.Context) {
	if d, ok := ctx.Deadline(); ok {
		rs.conn.SetDeadline(d)
	} else {
		rs.conn.SetDeadline(time.Time{})
	}
}

// smallStream: n messages of a 4-byte length and 64 bytes, one write
// syscall each on the child's side.
func (rs *rawSession) smallStream(ctx context.Context, n int) error {
	rs.deadline(ctx)
	if _, err := rs.conn.Write(rawbench.Command(rawbench.OpStream, uint64(n), payloadSize)); err != nil {
		return err
	}
	var hdr [4]byte
	msg := make([]byte, 64<<10)
	for i := 0; i < n; i++ {
		if _, err := io.ReadFull(rs.br, hdr[:]); err != nil {
			return err
		}
		l := binary.BigEndian.Uint32(hdr[:])
		if int(l) > len(msg) {
			return fmt.Errorf("raw: message length %d over the limit", l)
		}
		if _, err := io.ReadFull(rs.br, msg[:l]); err != nil {
			return err
		}
	}
	return nil
}

// media: n×chunk bytes written by the child in chunk-sized writes, read
// into one reused buffer of the same size, each read taking what the
// socket holds up to it (io.Discard's ReadFrom would read 8 KiB at a
// time).
func (rs *rawSession) media(ctx context.Context, n, chunk int) error {
	rs.deadline(ctx)
	total := int64(n) * int64(chunk)
	if _, err := rs.conn.Write(rawbench.Command(rawbench.OpCopy, uint64(total), uint32(chunk))); err != nil {
		return err
	}
	buf := make([]byte, chunk)
	var got int64
	for got < total {
		m, err := rs.br.Read(buf[:min(int64(len(buf)), total-got)])
		got += int64(m)
		if err != nil && got < total { // an error with the last bytes is no error of this read's
			return fmt.Errorf("raw: media: got %d bytes of %d: %w", got, total, err)
		}
	}
	return nil
}

// echo: n messages of 64 bytes written (one write each) while the echoes
// are read.
func (rs *rawSession) echo(ctx context.Context, n int) error {
	rs.deadline(ctx)
	if _, err := rs.conn.Write(rawbench.Command(rawbench.OpEcho, uint64(n), payloadSize)); err != nil {
		return err
	}
	werr := make(chan error, 1) // one value, sent by the writer below
	go func() {                 // ends after n writes or at the first error
		buf := make([]byte, payloadSize)
		for i := 0; i < n; i++ {
			if _, err := rs.conn.Write(buf); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	buf := make([]byte, payloadSize)
	var rerr error
	for i := 0; i < n && rerr == nil; i++ {
		_, rerr = io.ReadFull(rs.br, buf)
	}
	if rerr != nil {
		rs.conn.Close() // unblocks the writer
	}
	return errors.Join(rerr, <-werr)
}

// call: one 64-byte ping-pong round trip.
// unary is call: it is this system's unary form already.
func (rs *rawSession) unary(ctx context.Context) error { return rs.call(ctx) }

func (rs *rawSession) call(ctx context.Context) error {
	return rs.pingPong(ctx, 1)
}

func (rs *rawSession) pingPong(ctx context.Context, n int) error {
	rs.deadline(ctx)
	if _, err := rs.conn.Write(rawbench.Command(rawbench.OpEcho, uint64(n), payloadSize)); err != nil {
		return err
	}
	buf := make([]byte, payloadSize)
	for i := 0; i < n; i++ {
		if _, err := rs.conn.Write(buf); err != nil {
			return err
		}
		if _, err := io.ReadFull(rs.br, buf); err != nil {
			return err
		}
	}
	return nil
}

func (rs *rawSession) close() error {
	if rs.conn != nil {
		rs.conn.Close() // the child sees EOF and exits
	}
	done := make(chan error, 1)           // one value, sent by the waiter below
	go func() { done <- rs.cmd.Wait() }() // ends when the child exits; the timer below kills it if need be
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() {
			err = nil // killed by a crash measurement
		}
		os.Remove(rs.sock)
		return err
	case <-t.C:
		rs.cmd.Process.Kill()
		<-done
		os.Remove(rs.sock)
		return errors.New("raw: child did not exit within 2s of EOF")
	}
}
