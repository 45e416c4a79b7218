package remote_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/remote"
	"github.com/skulkrt/skulk/wire"
)

// margin is what a loaded 2-core machine under -race may add to a stated
// bound before a test calls it broken.
const margin = 2 * time.Second

// fleetMaxPayload is the cluster's max_payload: far below the media the
// tests send, so every large frame travels in many messages.
const fleetMaxPayload = 32 << 10

// servingHost is one serving host process (the test binary as "serve").
type servingHost struct {
	id   string
	cmd  *exec.Cmd
	done chan struct{} // closed once Wait returned
}

type fleet struct {
	servers []*natstest.Server
	dir     string
	hosts   []*servingHost
	nc      *nats.Conn
	cl      *remote.Client
}

// startFleet starts a 3-server NATS cluster on loopback, three serving
// hosts (one on each server, every server in its list) named "tools",
// and a client on the first server.
func startFleet(t *testing.T) *fleet {
	f := &fleet{dir: t.TempDir()}
	f.servers = natstest.RunCluster(t, 3, func(o *server.Options) { o.MaxPayload = fleetMaxPayload })
	exe, err := os.Executable()
	require.NoError(t, err)
	for i := range 3 {
		var urls []string
		for j := range 3 {
			urls = append(urls, f.servers[(i+j)%3].URL())
		}
		f.hosts = append(f.hosts, startServing(t, exe, urls, "h"+strconv.Itoa(i+1), f.dir))
	}
	nc, err := nats.Connect(f.servers[0].URL(), nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	f.nc = nc
	t.Cleanup(nc.Close)
	cl, err := remote.Dial(nc, "tools", testOptions)
	require.NoError(t, err)
	f.cl = cl
	t.Cleanup(func() { assert.NoError(t, cl.Close()) })
	return f
}

// startServing starts a serving host process (the test binary as
// "serve") of the name "tools" with id, on the NATS servers urls, its
// markers in dir, env added to its environment; it returns once the host
// is ready, and the test's cleanup stops it.
func startServing(t *testing.T, exe string, urls []string, id, dir string, env ...string) *servingHost {
	sh := &servingHost{id: id, done: make(chan struct{})}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), roleEnv+"=serve", natsEnv+"="+strings.Join(urls, ","), nameEnv+"=tools",
		idEnv+"="+sh.id, dirEnv+"="+dir, "GORACE=atexit_sleep_ms=0", "TMPDIR="+dir), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sh.cmd = cmd
	ready := make(chan error, 1)
	go func() { ready <- waitReady(bufio.NewScanner(out)) }() // ends at "ready" or the pipe's EOF
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-sh.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-sh.done
		}
	})
	go func() { // reaps the process; ends when it exits
		_ = cmd.Wait()
		close(sh.done)
	}()
	select {
	case err := <-ready:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		require.FailNow(t, "a serving host did not get ready in 60 s")
	}
	return sh
}

func (f *fleet) host(id string) *servingHost {
	for _, h := range f.hosts {
		if h.id == id {
			return h
		}
	}
	return nil
}

// recvChunk reads started and the first chunk of c.
func recvChunk(t *testing.T, c *remote.Call) frame.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.Recv(ctx)
	require.NoError(t, err)
	require.Equal(t, frame.KindStarted, st.Kind)
	f, err := c.Recv(ctx)
	require.NoError(t, err)
	require.Equal(t, frame.KindChunk, f.Kind, "%+v", f)
	return f
}

// terminal reads c to its terminal within d and returns it.
func terminal(t *testing.T, c *remote.Call, d time.Duration) frame.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		f, err := c.Recv(ctx)
		require.NoError(t, err, "no terminal within %v", d)
		if f.Kind.IsTerminal() {
			_, err := c.Recv(ctx)
			require.ErrorIs(t, err, io.EOF)
			return f
		}
	}
}

func TestFleet(t *testing.T) {
	f := startFleet(t)
	ctx := context.Background()

	t.Run("spread", func(t *testing.T) {
		seen := map[string]int{}
		for range 30 {
			c, err := f.cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
			require.NoError(t, err)
			recvChunk(t, c)
			seen[c.Host()]++
			term := terminal(t, c, 30*time.Second)
			require.Equal(t, frame.KindCompleted, term.Kind, "%+v", term)
		}
		assert.Len(t, seen, 3, "calls by host: %v", seen)
	})

	t.Run("refusals", func(t *testing.T) {
		_, err := f.cl.Call(ctx, "nope", nil)
		require.ErrorIs(t, err, host.ErrUnknownTool)
		_, err = f.cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": "x"}))
		var se *host.SchemaError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, "arguments", se.Schema)
	})

	t.Run("media16MiB", func(t *testing.T) {
		data := make([]byte, 16<<20)
		for i := range data {
			data[i] = byte(i * 7)
		}
		c, err := f.cl.Call(ctx, "echo", nil)
		require.NoError(t, err)
		errc := make(chan error, 1)
		go func() { // ends when Send returns
			errc <- c.Send(ctx, nil, &frame.InlineMedia{Data: data, MediaType: "application/octet-stream"})
		}()
		got := recvChunk(t, c)
		require.NoError(t, <-errc)
		m, ok := got.Media.(*frame.InlineMedia)
		require.True(t, ok)
		require.True(t, bytes.Equal(data, m.Data), "the echoed media differs")
		require.NoError(t, c.CloseSend())
		term := terminal(t, c, 30*time.Second)
		require.Equal(t, frame.KindCompleted, term.Kind, "%+v", term)
	})

	t.Run("requestOverMaxPayload", func(t *testing.T) {
		// Invoke and input larger than a message: the open carries what
		// fits, the rest follows the accept.
		_, err := f.cl.Call(ctx, "echo", nil, remote.WithInput(frame.MustPayload(map[string]any{"text": strings.Repeat("x", 3*fleetMaxPayload)})))
		require.ErrorIs(t, err, wire.ErrTooLarge, "a chunk over max_header is refused before anything is sent")
		text := strings.Repeat("x", fleetMaxPayload+fleetMaxPayload/4)
		c, err := f.cl.Call(ctx, "echo", nil, remote.WithInput(frame.MustPayload(map[string]any{"text": text})))
		require.NoError(t, err)
		got := recvChunk(t, c)
		var p struct{ Text string }
		require.NoError(t, got.Payload.Decode(&p))
		assert.Equal(t, text, p.Text)
		term := terminal(t, c, 30*time.Second)
		require.Equal(t, frame.KindCompleted, term.Kind, "%+v", term)
	})

	t.Run("cancel", func(t *testing.T) {
		c, err := f.cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 60000, "marker": "cancel1"}))
		require.NoError(t, err)
		recvChunk(t, c)
		c.Cancel()
		term := terminal(t, c, remote.CancelWait+margin)
		assert.Equal(t, frame.KindCancelled, term.Kind, "%+v", term)
		assert.False(t, term.Synthetic, "the provider's own cancelled")
		require.Eventually(t, func() bool { return readMarker(f.dir, "cancel1") == "cancelled" }, 10*time.Second, 20*time.Millisecond)
	})

	t.Run("deadline", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		start := time.Now()
		c, err := f.cl.Call(dctx, "tick", frame.MustPayload(map[string]any{"ms": 60000, "marker": "deadline1"}))
		require.NoError(t, err)
		_, err = c.Wait()
		var ce *frame.Error
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, frame.CodeTimeout, ce.Code, "%v", ce)
		assert.Less(t, time.Since(start), 1500*time.Millisecond+remote.CancelWait+margin)
		require.Eventually(t, func() bool { return readMarker(f.dir, "deadline1") == "timeout" }, 10*time.Second, 20*time.Millisecond)
	})

	t.Run("stopsReading", func(t *testing.T) {
		const size = 256 << 10
		c, err := f.cl.Call(ctx, "flood", frame.MustPayload(map[string]any{"size": size, "marker": "flood1"}))
		require.NoError(t, err)
		recvChunk(t, c)
		// The child's sends stop: its count stays put for a second (read
		// every 50 ms, so the second starts when the count last moved).
		var count int
		var since time.Time
		require.Eventually(t, func() bool {
			n, _ := strconv.Atoi(readMarker(f.dir, "flood1"))
			if n == 0 || n != count {
				count, since = n, time.Now()
				return false
			}
			return time.Since(since) >= time.Second
		}, 30*time.Second, 50*time.Millisecond)
		// The serving host's memory stays put while the child is blocked.
		pid := f.host(c.Host()).cmd.Process.Pid
		rss0 := rssOf(t, pid)
		time.Sleep(time.Second)
		rss1 := rssOf(t, pid)
		t.Logf("serving host %s: RSS %d KiB, a second later %d KiB", c.Host(), rss0>>10, rss1>>10)
		assert.Less(t, rss1-rss0, int64(8<<20), "the serving host's memory grows while its caller does not read")
		held := int64(count) * size
		t.Logf("the child sent %d chunks of %d bytes (%d MiB) before it blocked; the client holds %d bytes", count, size, held>>20, remote.Buffered(c))
		// The host's outbox (16 MiB), one window at each of the two
		// links, sockets and a few frames in hand.
		assert.LessOrEqual(t, held, int64(24<<20))
		assert.LessOrEqual(t, remote.Buffered(c), uint64(remote.DefaultWindow))
		// Reading again lets it go on.
		for range 20 {
			_, err := c.Recv(ctx)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			n, _ := strconv.Atoi(readMarker(f.dir, "flood1"))
			return n > count
		}, 10*time.Second, 20*time.Millisecond)
		c.Cancel()
		term := terminal(t, c, remote.CancelWait+margin)
		assert.Equal(t, frame.KindCancelled, term.Kind, "%+v", term)
		require.Eventually(t, func() bool { return readMarker(f.dir, "flood1.end") == "cancelled" }, 10*time.Second, 20*time.Millisecond)
	})

	t.Run("forged", func(t *testing.T) {
		args := frame.MustPayload(map[string]any{"ms": 60000})
		a, err := f.cl.Call(ctx, "tick", args)
		require.NoError(t, err)
		recvChunk(t, a)
		b, err := f.cl.Call(ctx, "tick", args)
		require.NoError(t, err)
		recvChunk(t, b)
		ok, err := f.cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 1000}))
		require.NoError(t, err)
		recvChunk(t, ok)
		// A message that breaks the format, to the caller of a and to
		// the serving host of b.
		in, _ := remote.Subjects(a)
		require.NoError(t, f.nc.Publish(in, []byte("\x09forged")))
		_, out := remote.Subjects(b)
		require.NoError(t, f.nc.Publish(out, []byte("\x01\x03garbage")))
		for _, c := range []*remote.Call{a, b} {
			term := terminal(t, c, 10*time.Second)
			require.Equal(t, frame.KindFailed, term.Kind, "%+v", term)
			assert.Equal(t, frame.CodeInvalidFrame, term.Error.Code)
			assert.True(t, term.Synthetic)
		}
		term := terminal(t, ok, 30*time.Second)
		assert.Equal(t, frame.KindCompleted, term.Kind, "the other call is untouched: %+v", term)
	})

	t.Run("callerGone", func(t *testing.T) {
		// A caller whose connection goes away mid-call: the serving
		// host hears nothing more and cancels the call on its child.
		nc, err := nats.Connect(f.servers[1].URL())
		require.NoError(t, err)
		cl, err := remote.Dial(nc, "tools", testOptions)
		require.NoError(t, err)
		c, err := cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 60000, "marker": "gone1"}))
		require.NoError(t, err)
		recvChunk(t, c)
		start := time.Now()
		nc.Close()
		require.Eventually(t, func() bool { return readMarker(f.dir, "gone1") == "cancelled" },
			testOptions.UnreachableBound()+margin, 20*time.Millisecond)
		t.Logf("the serving host cancelled the call of a vanished caller in %v (bound %v)", time.Since(start), testOptions.UnreachableBound())
		require.NoError(t, cl.Close())
		term := terminal(t, c, time.Second)
		assert.True(t, term.Synthetic)
	})

	t.Run("natsServerKilled", func(t *testing.T) {
		c, err := f.cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 1000}))
		require.NoError(t, err)
		recvChunk(t, c)
		start := time.Now()
		f.servers[0].Shutdown() // the client's server
		term := terminal(t, c, time.Second+testOptions.UnreachableBound()+margin)
		t.Logf("after the server's death: %s %v synthetic=%v in %v", term.Kind, term.Error, term.Synthetic, time.Since(start))
		if term.Kind != frame.KindCompleted {
			require.True(t, term.Synthetic)
			assert.Contains(t, []frame.Code{frame.CodeUnreachable, frame.CodeTransportError}, term.Error.Code)
		}
		require.Eventually(t, f.nc.IsConnected, 30*time.Second, 20*time.Millisecond)
		require.Eventually(t, func() bool {
			c, err := f.cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
			require.NoError(t, err)
			return terminal(t, c, 30*time.Second).Kind == frame.KindCompleted
		}, 30*time.Second, 100*time.Millisecond)
	})

	t.Run("hostKilled", func(t *testing.T) {
		c, err := f.cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 60000}))
		require.NoError(t, err)
		recvChunk(t, c)
		victim := f.host(c.Host())
		require.NotNil(t, victim, "host %q", c.Host())
		start := time.Now()
		require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
		term := terminal(t, c, testOptions.UnreachableBound()+margin)
		took := time.Since(start)
		t.Logf("a SIGKILLed host: %s %v in %v (bound %v)", term.Kind, term.Error, took, testOptions.UnreachableBound())
		require.Equal(t, frame.KindFailed, term.Kind)
		assert.Equal(t, frame.CodeUnreachable, term.Error.Code)
		assert.True(t, term.Synthetic)
		<-victim.done
		for range 5 {
			n, err := f.cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
			require.NoError(t, err)
			recvChunk(t, n)
			assert.NotEqual(t, victim.id, n.Host())
			assert.Equal(t, frame.KindCompleted, terminal(t, n, 30*time.Second).Kind)
		}
	})
}

// rssOf returns a process's resident set, in bytes.
func rssOf(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	require.FailNow(t, "no VmRSS")
	return 0
}
