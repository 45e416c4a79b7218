package compare

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/skulkrt/skulk/bench/internal/gpbench"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/remote"
)

// The systems that cross a network, on TCP loopback: Skulk's remote calls
// over an embedded NATS server, and go-plugin's gRPC service reached over
// TCP instead of its Unix socket.
const (
	SkulkNATS   = "skulk-nats"
	GoPluginTCP = "go-plugin-tcp"
)

// remoteNA is why the cross-machine systems take no part in a workload:
// they are measured for the small call and the media stream only.
var remoteNA = notApplicable("measured for calls and media only")

// natsSystem is a host with the bench child served on an embedded
// nats-server (127.0.0.1, a port of its choosing) by remote.Serve, and
// called through remote.Client on a second connection.
type natsSystem struct {
	bin string // cmd/skulkchild
	dir string
}

func (*natsSystem) name() string { return SkulkNATS }

func (*natsSystem) coldStart(context.Context) (time.Duration, error) { return 0, remoteNA }
func (*natsSystem) crash(context.Context) (time.Duration, error)     { return 0, remoteNA }
func (*natsSystem) healthUnderBackpressure(context.Context, int, int) ([]time.Duration, error) {
	return nil, remoteNA
}

// natsSession is the server, the host, the service and the client.
type natsSession struct {
	ns     *server.Server
	h      *host.Host
	sc, cc *nats.Conn
	srv    *remote.Server
	cl     *remote.Client
}

func (s *natsSystem) open(ctx context.Context) (session, error) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		return nil, err
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("skulk-nats: the NATS server did not start")
	}
	ss := &natsSession{ns: ns}
	fail := func(err error) (session, error) { ss.close(); return nil, fmt.Errorf("skulk-nats: %w", err) }
	if ss.h, err = host.Start(ctx, host.Config{Command: s.bin, TempDir: s.dir}); err != nil {
		return fail(err)
	}
	if ss.sc, err = nats.Connect(ns.ClientURL()); err != nil {
		return fail(err)
	}
	if ss.cc, err = nats.Connect(ns.ClientURL()); err != nil {
		return fail(err)
	}
	if ss.srv, err = remote.Serve(ss.sc, "bench", ss.h, remote.ServeOptions{}); err != nil {
		return fail(err)
	}
	if err := ss.sc.Flush(); err != nil {
		return fail(err)
	}
	if ss.cl, err = remote.Dial(ss.cc, "bench", remote.Options{}); err != nil {
		return fail(err)
	}
	return ss, nil
}

func (ss *natsSession) pids() []int {
	var ps []int
	for _, c := range ss.h.Children() {
		ps = append(ps, c.PID)
	}
	return ps
}

func (*natsSession) smallStream(context.Context, int) error { return remoteNA }
func (*natsSession) echo(context.Context, int) error        { return remoteNA }
func (*natsSession) unary(context.Context) error            { return remoteNA }

// call is the small call of skulkSession.call, over NATS: echo of one
// 64-byte chunk sent with the invoke, read to its end.
func (ss *natsSession) call(ctx context.Context) error {
	c, err := ss.cl.Call(ctx, "echo", nil, remote.WithInput(smallPayload))
	if err != nil {
		return err
	}
	got := 0
	if err := readToEnd(ctx, c, "call", func(frame.Frame) { got++ }); err != nil {
		return err
	}
	if got != 1 {
		return fmt.Errorf("skulk-nats: call: got %d chunks, want 1", got)
	}
	return nil
}

func (ss *natsSession) media(ctx context.Context, n, chunk int) error {
	c, err := ss.cl.Call(ctx, "media", frame.MustPayload(map[string]any{"bytes": n * chunk, "chunk": chunk}), remote.WithInput())
	if err != nil {
		return err
	}
	var bytes int64
	if err := readToEnd(ctx, c, "media", func(f frame.Frame) {
		if m, ok := f.Media.(*frame.InlineMedia); ok {
			bytes += int64(len(m.Data))
		}
	}); err != nil {
		return err
	}
	if bytes != int64(n)*int64(chunk) {
		return fmt.Errorf("skulk-nats: media: got %d bytes, want %d", bytes, int64(n)*int64(chunk))
	}
	return nil
}

// readToEnd reads c to its end, passing each chunk to chunk; a failed or
// cancelled terminal is an error that names what was read (call, media).
func readToEnd(ctx context.Context, c *remote.Call, what string, chunk func(frame.Frame)) error {
	for {
		f, err := c.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			c.Cancel()
			return err
		}
		switch f.Kind {
		case frame.KindChunk:
			chunk(f)
		case frame.KindFailed, frame.KindCancelled:
			return fmt.Errorf("skulk-nats: %s ended %s: %v", what, f.Kind, f.Error)
		}
	}
}

func (ss *natsSession) close() error {
	if ss.cl != nil {
		_ = ss.cl.Close()
	}
	if ss.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = ss.srv.Close(ctx)
		cancel()
	}
	if ss.cc != nil {
		ss.cc.Close()
	}
	if ss.sc != nil {
		ss.sc.Close()
	}
	if ss.h != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = ss.h.Close(ctx)
		cancel()
	}
	ss.ns.Shutdown()
	ss.ns.WaitForShutdown()
	return nil
}

// grpcTCPSystem is gpchild's gRPC service served on TCP loopback (gpchild
// with GPCHILD_TCP set) and called through gpbench.Client: go-plugin's
// gRPC stack over the network path a remote peer takes.
type grpcTCPSystem struct {
	bin string // gpchild
}

func (*grpcTCPSystem) name() string { return GoPluginTCP }

func (*grpcTCPSystem) coldStart(context.Context) (time.Duration, error) { return 0, remoteNA }
func (*grpcTCPSystem) crash(context.Context) (time.Duration, error)     { return 0, remoteNA }
func (*grpcTCPSystem) healthUnderBackpressure(context.Context, int, int) ([]time.Duration, error) {
	return nil, remoteNA
}

// grpcTCPSession is the child and the client connection.
type grpcTCPSession struct {
	grpcSession
	cmd *exec.Cmd
	cc  *grpc.ClientConn
}

func (s *grpcTCPSystem) open(ctx context.Context) (session, error) {
	cmd := exec.Command(s.bin)
	cmd.Env = append(os.Environ(), gpbench.TCPEnv+"=127.0.0.1:0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("go-plugin-tcp: no address from the child: %w", err)
	}
	cc, err := grpc.NewClient(strings.TrimSpace(addr), append(gpbench.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	return &grpcTCPSession{grpcSession: grpcSession{bench: gpbench.NewClient(cc), pid: cmd.Process.Pid}, cmd: cmd, cc: cc}, nil
}

func (gs *grpcTCPSession) pids() []int                         { return []int{gs.pid} }
func (*grpcTCPSession) smallStream(context.Context, int) error { return remoteNA }
func (*grpcTCPSession) echo(context.Context, int) error        { return remoteNA }
func (*grpcTCPSession) unary(context.Context) error            { return remoteNA }

func (gs *grpcTCPSession) close() error {
	_ = gs.cc.Close()
	_ = gs.cmd.Process.Kill()
	_ = gs.cmd.Wait()
	return nil
}
