package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/skulkrt/skulk/bench/internal/gpbench"
)

// grpcSystem is hashicorp/go-plugin over gRPC with gpchild.
type grpcSystem struct {
	bin string // gpchild binary
	// dir is the children's TMPDIR: go-plugin's server makes the directory
	// of its socket there, and removes it only when it exits on its own,
	// so every child the crash workload kills would leave one in /tmp.
	// The run's own directory, removed at its end. Empty: the default.
	dir string
}

func (*grpcSystem) name() string { return "go-plugin" }

// grpcSession is a started plugin child.
type grpcSession struct {
	client *plugin.Client
	bench  *gpbench.Client
	pid    int
}

func (s *grpcSystem) start() (*grpcSession, error) {
	cmd := exec.Command(s.bin)
	if s.dir != "" {
		cmd.Env = append(os.Environ(), "TMPDIR="+s.dir)
	}
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  gpbench.Handshake,
		Plugins:          plugin.PluginSet{gpbench.PluginName: gpbench.Plugin{}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
		GRPCDialOptions:  gpbench.DialOptions(),
		Stderr:           os.Stderr,
	})
	proto, err := c.Client()
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("go-plugin: start: %w", err)
	}
	raw, err := proto.Dispense(gpbench.PluginName)
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("go-plugin: dispense: %w", err)
	}
	return &grpcSession{client: c, bench: raw.(*gpbench.Client), pid: cmd.Process.Pid}, nil
}

func (s *grpcSystem) open(context.Context) (session, error) { return s.start() }

func (s *grpcSystem) coldStart(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	gs, err := s.start()
	if err != nil {
		return 0, err
	}
	defer gs.close()
	if err := gs.call(ctx); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func (s *grpcSystem) crash(ctx context.Context) (time.Duration, error) {
	gs, err := s.start()
	if err != nil {
		return 0, err
	}
	defer gs.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A bidi echo that has answered one message is a call in progress.
	st, err := gs.bench.Echo(ctx)
	if err != nil {
		return 0, err
	}
	if err := st.SendMsg(&gpbench.Msg{B: make([]byte, payloadSize)}); err != nil {
		return 0, err
	}
	var m gpbench.Msg
	if err := st.RecvMsg(&m); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := syscall.Kill(gs.pid, syscall.SIGKILL); err != nil {
		return 0, err
	}
	err = st.RecvMsg(&m)
	d := time.Since(t0)
	if err == nil {
		return 0, errors.New("go-plugin: crash: a message arrived after SIGKILL")
	}
	return d, nil
}

func (s *grpcSystem) healthUnderBackpressure(ctx context.Context, streams, pings int) ([]time.Duration, error) {
	gs, err := s.start()
	if err != nil {
		return nil, err
	}
	defer gs.close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := 0; i < streams; i++ {
		// Far more than any flow-control window holds; never read past
		// the first message, so the server's sends block.
		st, err := gs.bench.Stream(sctx, gpbench.StreamRequest{Mode: gpbench.ModeStream, N: 1 << 40, Size: payloadSize})
		if err != nil {
			return nil, err
		}
		var m gpbench.Msg
		if err := st.RecvMsg(&m); err != nil {
			return nil, err
		}
	}
	if err := settle(ctx); err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, pings)
	for i := 0; i < pings; i++ {
		t0 := time.Now()
		if err := gs.bench.Ping(ctx); err != nil {
			return nil, fmt.Errorf("go-plugin: ping: %w", err)
		}
		out = append(out, time.Since(t0))
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (gs *grpcSession) smallStream(ctx context.Context, n int) error {
	return gs.recvStream(ctx, gpbench.StreamRequest{Mode: gpbench.ModeStream, N: uint64(n), Size: payloadSize}, n)
}

func (gs *grpcSession) media(ctx context.Context, n, chunk int) error {
	return gs.recvStream(ctx, gpbench.StreamRequest{Mode: gpbench.ModeStream, N: uint64(n), Size: uint32(chunk)}, n)
}

func (gs *grpcSession) recvStream(ctx context.Context, r gpbench.StreamRequest, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := gs.bench.Stream(ctx, r)
	if err != nil {
		return err
	}
	var m gpbench.Msg
	got := 0
	for {
		err := st.RecvMsg(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if len(m.B) != int(r.Size) {
			return fmt.Errorf("go-plugin: message of %d bytes, want %d", len(m.B), r.Size)
		}
		got++
	}
	if got != n {
		return fmt.Errorf("go-plugin: got %d messages, want %d", got, n)
	}
	return nil
}

func (gs *grpcSession) echo(ctx context.Context, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := gs.bench.Echo(ctx)
	if err != nil {
		return err
	}
	werr := make(chan error, 1) // one value, sent by the sender below
	go func() {                 // ends after n sends, or at the first error (cancel above ends those)
		for i := 0; i < n; i++ {
			if err := st.SendMsg(&gpbench.Msg{B: make([]byte, payloadSize)}); err != nil {
				werr <- err
				return
			}
		}
		werr <- st.CloseSend()
	}()
	got := 0
	var rerr error
	for {
		var m gpbench.Msg
		err := st.RecvMsg(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			rerr = err
			cancel()
			break
		}
		got++
	}
	if err := errors.Join(rerr, <-werr); err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("go-plugin: echo: got %d messages, want %d", got, n)
	}
	return nil
}

// unary is call: it is this system's unary form already.
func (gs *grpcSession) unary(ctx context.Context) error { return gs.call(ctx) }

func (gs *grpcSession) call(ctx context.Context) error {
	out, err := gs.bench.Call(ctx, make([]byte, payloadSize))
	if err != nil {
		return err
	}
	if len(out) != payloadSize {
		return fmt.Errorf("go-plugin: reply of %d bytes", len(out))
	}
	return nil
}

func (gs *grpcSession) close() error {
	gs.client.Kill() // graceful, then forced; waits for the process
	return nil
}
