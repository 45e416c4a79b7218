package jetstreamstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/calllogtest"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/internal/natstest"
)

// cutProxy relays TCP connections to a NATS server. Armed with a marker,
// it cuts the connection that next sends the marker right after relaying
// that write, and drops what the server answers to it: a request that
// reached the server whose answer is lost.
type cutProxy struct {
	ln     net.Listener
	target string
	marker atomic.Pointer[[]byte]
	cuts   atomic.Int32
	wg     sync.WaitGroup // the accept loop and each connection's relays

	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept() // stopped by close (the listener closed)
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *cutProxy) arm(marker string) { b := []byte(marker); p.marker.Store(&b) }

func (p *cutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		var mute atomic.Bool
		answered := make(chan struct{}) // closed when the server answers past the marker
		cut := func() { client.Close(); server.Close() }
		p.wg.Add(2)
		go func() { // stopped by the connections closing
			defer p.wg.Done()
			defer cut()
			buf := make([]byte, 64<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 {
					m := p.marker.Load()
					hit := m != nil && bytes.Contains(buf[:n], *m) && p.marker.CompareAndSwap(m, nil)
					if hit {
						mute.Store(true) // before the server can answer
					}
					if _, werr := server.Write(buf[:n]); werr != nil {
						return
					}
					if hit {
						// The server keeps the message and answers, into
						// the void; the answer is the sign it was kept.
						p.cuts.Add(1)
						select {
						case <-answered:
						case <-time.After(10 * time.Second):
						}
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // stopped by the connections closing
			defer p.wg.Done()
			defer cut()
			buf := make([]byte, 64<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 && mute.Load() {
					close(answered)
					return
				}
				if n > 0 {
					if _, werr := client.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// claimCount returns how many claim messages (first and later) tree has
// in the stream CALLS.
func claimCount(ctx context.Context, t *testing.T, url, tree string) uint64 {
	t.Helper()
	s := jsStream(ctx, t, url, "CALLS")
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("skulk.calllog.CALLS."+tree+".*"))
	require.NoError(t, err)
	return info.State.Subjects["skulk.calllog.CALLS."+tree+".n"] + info.State.Subjects["skulk.calllog.CALLS."+tree+".c"]
}

// A takeover Claim whose message the server keeps but whose answer is
// lost (the connection cut just then) finds its own claim when it reads
// the tree again: it answers with that claim's epoch instead of claiming
// again, so the tree has one takeover claim and the epochs go 1, 2.
func TestClaimWithLostAnswerTakesOneEpoch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	a := open(t, srv.URL()+"/CALLS")
	ca, err := a.KeepNew(ctx, "t", "A", calllogtest.Events("t", "A", 1, 3))
	require.NoError(t, err)

	p := newCutProxy(t, srv.Addr())
	b, err := jetstreamstore.Open(ctx, p.url()+"/CALLS", jetstreamstore.Options{Connect: []nats.Option{nats.ReconnectWait(50 * time.Millisecond)}})
	require.NoError(t, err)
	defer b.Close()
	p.arm("Skulk-Tree") // a header only claim messages carry
	cb, err := b.Claim(ctx, "t", "B")
	require.NoError(t, err)
	if p.cuts.Load() != 1 {
		require.FailNow(t, fmt.Sprintf("the proxy cut %d connections, want 1 (the claim's)", p.cuts.Load()))
	}
	require.Falsef(t, cb.Epoch != 2 || cb.Last != 3 || cb.Writer != "B", "takeover claim with its answer lost = %+v; want epoch 2, last 3", cb)
	if n := claimCount(ctx, t, srv.URL(), "t"); n != 2 {
		require.FailNow(t, fmt.Sprintf("the tree has %d claim messages, want 2 (the first, one takeover)", n))
	}
	// The claim is the tree's: B keeps under it, A is fenced.
	require.NoError(t, b.Keep(ctx, cb, calllogtest.Events("t", "B", 4, 2)))
	if err := a.Keep(ctx, ca, calllogtest.Events("t", "A", 4, 1)); !errors.Is(err, calllog.ErrFenced) {
		require.FailNow(t, fmt.Sprintf("the old writer's keep = %v, want ErrFenced", err))
	}
	got, err := a.EventsAfter(ctx, "t", 0, 0)
	require.Falsef(t, err != nil || len(got) != 5 || got[3].Writer != "B", "%d events kept, %v", len(got), err)

	// The same writer claiming again on purpose still takes a new epoch.
	if again, err := b.Claim(ctx, "t", "B"); err != nil || again.Epoch != 3 || again.Last != 5 {
		require.FailNow(t, fmt.Sprintf("a second Claim by B = %+v, %v; want epoch 3, last 5", again, err))
	}
}
