package compare

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
)

// wireChild is a Skulk child started and driven at the wire level, as
// docs/protocol.md §1 says: fd 3 the control socketpair, fd 4 the stream
// listener. The health workload uses it to send pings on demand and time
// each pong, which the host package does only on its own schedule.
type wireChild struct {
	cmd    *exec.Cmd
	dir    string
	sock   string
	ctrl   net.Conn
	w      func(wire.Packet) error
	r      *packetio.Reader
	limits wire.Limits
	conns  []net.Conn
}

func startWireChild(ctx context.Context, bin, parent string) (_ *wireChild, err error) {
	dir, err := os.MkdirTemp(parent, "skulk-wire-*")
	if err != nil {
		return nil, err
	}
	wc := &wireChild{dir: dir, sock: filepath.Join(dir, "streams.sock")}
	defer func() {
		if err != nil {
			wc.close()
		}
	}()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: wc.sock, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, err
	}
	defer lnFile.Close()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control-child")
	defer theirs.Close()
	wc.ctrl, err = net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, err
	}
	wc.cmd = exec.Command(bin)
	wc.cmd.ExtraFiles = []*os.File{theirs, lnFile} // fd 3, fd 4
	wc.cmd.Env = []string{"SKULK_PROTOCOL=1", "SKULK_CONTROL_FD=3", "SKULK_STREAMS_FD=4", "SKULK_CHILD_ID=bench-1"}
	wc.cmd.Stderr = os.Stderr
	wc.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := wc.cmd.Start(); err != nil {
		wc.cmd = nil
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		wc.ctrl.SetDeadline(d)
	}
	wc.r = packetio.NewReader(wc.ctrl, packetio.DefaultLimits())
	p, err := wc.r.ReadPacket()
	if err != nil {
		return nil, fmt.Errorf("skulk: reading hello: %w", err)
	}
	hello, ok := p.(*wire.Hello)
	if !ok {
		return nil, fmt.Errorf("skulk: first packet is %s, want hello", packetio.TypeOf(p))
	}
	wc.limits = packetio.MinLimits(hello.Limits, packetio.DefaultLimits())
	wc.r.SetLimits(wc.limits)
	wc.w = func(p wire.Packet) error { return packetio.WritePacket(wc.ctrl, p, wc.limits) }
	err = wc.w(&wire.Startup{Protocol: wire.ProtocolVersion, ChildID: "bench-1", Limits: wc.limits,
		HealthIntervalMS: 1000, CancelGraceMS: 1000, IngressQueue: protocol.IngressQueue})
	if err != nil {
		return nil, err
	}
	return wc, nil
}

// block opens a stream with a count call of a billion frames, reads its
// first frame (so the handler runs) and then never reads it again: the
// child's writes on it fill the socket buffers and block.
func (wc *wireChild) block(ctx context.Context, i int) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", wc.sock)
	if err != nil {
		return err
	}
	wc.conns = append(wc.conns, conn)
	w := func(p wire.Packet) error { return packetio.WritePacket(conn, p, wc.limits) }
	id := fmt.Sprintf("block-%d", i)
	args, err := frame.PayloadOf(map[string]any{"n": 1_000_000_000, "size": countPad})
	if err != nil {
		return err
	}
	started, err := frame.NewStarted(id, frame.CallerToProvider)
	if err != nil {
		return err
	}
	if err := w(&wire.Invoke{CallID: id, ToolID: "count", Arguments: args}); err != nil {
		return err
	}
	if err := w(&wire.Frame{Frame: started}); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		conn.SetReadDeadline(d)
	}
	p, err := packetio.NewReader(conn, wc.limits).ReadPacket()
	if err != nil {
		return fmt.Errorf("skulk: stream %d: %w", i, err)
	}
	if f, ok := p.(*wire.Frame); !ok || f.Kind != frame.KindChunk {
		return fmt.Errorf("skulk: stream %d: first packet is not a chunk", i)
	}
	return nil
}

// ping sends one ping and waits for its pong.
func (wc *wireChild) ping(nonce uint64) (time.Duration, error) {
	t0 := time.Now()
	if err := wc.w(&wire.Ping{Nonce: nonce}); err != nil {
		return 0, err
	}
	for {
		p, err := wc.r.ReadPacket()
		if err != nil {
			return 0, err
		}
		if pong, ok := p.(*wire.Pong); ok && pong.Nonce == nonce {
			return time.Since(t0), nil
		}
	}
}

func (wc *wireChild) close() error {
	var errs []error
	for _, c := range wc.conns {
		c.Close()
	}
	if wc.ctrl != nil {
		wc.ctrl.Close() // control EOF: the child cancels everything and exits
	}
	if wc.cmd != nil {
		done := make(chan error, 1)           // one value, sent by the waiter below
		go func() { done <- wc.cmd.Wait() }() // ends when the child exits; killed below if it does not
		t := time.NewTimer(3 * time.Second)
		select {
		case err := <-done:
			errs = append(errs, err)
		case <-t.C:
			syscall.Kill(-wc.cmd.Process.Pid, syscall.SIGKILL)
			<-done
			errs = append(errs, errors.New("skulk: child did not exit within 3s of control EOF"))
		}
		t.Stop()
	}
	errs = append(errs, os.RemoveAll(wc.dir))
	return errors.Join(errs...)
}

// healthWire is the Skulk health workload at the wire level.
func healthWire(ctx context.Context, bin, dir string, streams, pings int) ([]time.Duration, error) {
	wc, err := startWireChild(ctx, bin, dir)
	if err != nil {
		return nil, err
	}
	defer wc.close()
	for i := 0; i < streams; i++ {
		if err := wc.block(ctx, i); err != nil {
			return nil, err
		}
	}
	if err := settle(ctx); err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, pings)
	for i := 0; i < pings; i++ {
		d, err := wc.ping(uint64(i + 1))
		if err != nil {
			return nil, fmt.Errorf("skulk: ping: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}
