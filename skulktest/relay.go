package skulktest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/internal/protocol"
)

// relays serves StartProvider's opts in this process, once for every relay
// process the host starts: each relay connects to path and hands over its
// control connection and stream listener.
type relays struct {
	opts child.Options
	dir  string // private directory holding the socket at path
	path string
	ln   *net.UnixListener

	ctx    context.Context // parent of every Serve; cancelled by stop
	cancel context.CancelFunc
	wg     sync.WaitGroup // the acceptor and every session
	once   sync.Once
}

func startRelays(opts child.Options) (*relays, error) {
	dir, err := os.MkdirTemp("", "skr")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r := &relays{opts: opts, dir: dir, path: filepath.Join(dir, "relay.sock")}
	r.ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: r.path, Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.wg.Go(r.accept) // stopped by stop closing ln
	return r, nil
}

func (r *relays) accept() {
	for {
		c, err := r.ln.AcceptUnix()
		if err != nil {
			return
		}
		r.wg.Go(func() { r.session(c) }) // stopped by the host closing the control connection, or by stop
	}
}

// stop closes the listener, ends every Serve still running and waits for
// them; the host has closed by then, so they have all returned or are about
// to.
func (r *relays) stop() {
	r.once.Do(func() {
		r.ln.Close()
		r.cancel()
		r.wg.Wait()
		os.RemoveAll(r.dir)
	})
}

// handOver bounds the wait for a relay's descriptors after it connected.
const handOver = Timeout

// session serves one relay: it takes the relay's descriptors, serves them
// until Serve returns or the relay dies, and sends the relay its exit
// status.
func (r *relays) session(c *net.UnixConn) {
	defer c.Close()
	control, streams, err := receive(c)
	if err != nil {
		fmt.Fprintf(c, "\x02skulktest: %v", err)
		return
	}
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	var watch sync.WaitGroup
	watch.Go(func() { // stopped by the relay's exit or by c.Close below
		var b [1]byte
		c.Read(b[:])
		cancel() // the relay died: the host is stopping this child
	})
	err = child.Serve(ctx, control, child.NewListener(streams.Accept, streams.Close), r.opts)
	if errors.Is(err, child.ErrOptions) {
		// The relay prints the reason on its stderr, which the host logs.
		fmt.Fprintf(c, "\x02skulktest: StartProvider: %v", err)
	} else {
		c.Write([]byte{byte(exitStatus(err))})
	}
	c.Close()
	watch.Wait()
}

// exitStatus is child.Run's status for Serve's error.
func exitStatus(err error) int {
	switch {
	case err == nil:
		return protocol.ExitOK
	case errors.Is(err, child.ErrStartup), errors.Is(err, child.ErrOptions):
		return protocol.ExitStart
	}
	return protocol.ExitFailure
}

// receive reads the relay's message: its control connection and its stream
// listener, in that order.
func receive(c *net.UnixConn) (net.Conn, *net.UnixListener, error) {
	c.SetReadDeadline(time.Now().Add(handOver))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 64)
	oob := make([]byte, syscall.CmsgSpace(2*4))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the relay's descriptors: %w", err)
	}
	var fds []int
	if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range msgs {
			got, _ := syscall.ParseUnixRights(&msgs[i])
			fds = append(fds, got...)
		}
	}
	for _, fd := range fds {
		syscall.CloseOnExec(fd)
	}
	if len(fds) != 2 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil, nil, fmt.Errorf("the relay sent %d descriptors, want 2", len(fds))
	}
	cf, lf := os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "streams")
	defer cf.Close()
	defer lf.Close()
	control, err := net.FileConn(cf)
	if err != nil {
		return nil, nil, fmt.Errorf("control: %w", err)
	}
	l, err := net.FileListener(lf)
	if err != nil {
		control.Close()
		return nil, nil, fmt.Errorf("streams: %w", err)
	}
	streams, ok := l.(*net.UnixListener)
	if !ok {
		control.Close()
		l.Close()
		return nil, nil, errors.New("streams: not a Unix listener")
	}
	return control, streams, nil
}

// relay is the child process of StartProvider: it hands its control
// connection and stream listener to the test process at path, closes its
// own copies, and exits with the status the test process sends when its
// Serve returns (1 if the test process goes away first).
func relay(path string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "skulktest relay: %v\n", err)
		return protocol.ExitStart
	}
	cfd, err1 := strconv.Atoi(os.Getenv(protocol.EnvControlFD))
	sfd, err2 := strconv.Atoi(os.Getenv(protocol.EnvStreamsFD))
	if err := errors.Join(err1, err2); err != nil {
		return fail(fmt.Errorf("not started by a host: %w", err))
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	if _, _, err := c.WriteMsgUnix([]byte{0}, syscall.UnixRights(cfd, sfd), nil); err != nil {
		return fail(err)
	}
	syscall.Close(cfd)
	syscall.Close(sfd)
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return protocol.ExitFailure
	}
	if b[0] == protocol.ExitStart { // a reason may follow
		msg, _ := io.ReadAll(io.LimitReader(c, 1024))
		if len(msg) > 0 {
			fmt.Fprintf(os.Stderr, "%s\n", msg)
		}
	}
	return int(b[0])
}
