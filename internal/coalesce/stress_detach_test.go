//go:build unix

package coalesce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"

	"github.com/skulkrt/skulk/frame"
)

// stressDur is how long each case of the detach stress tests sends: 1 s,
// or STRESS_DUR (a time.ParseDuration string) for a longer run, as in
// STRESS_DUR=5m go test -race -run TestStressDetach ./wire.
func stressDur() time.Duration {
	if s := os.Getenv("STRESS_DUR"); s != "" {
		d, err := time.ParseDuration(s)
		if err == nil {
			return d
		}
	}
	return time.Second
}

// stressSize is the size of sender g's attachment seq; stressByte gives
// its bytes: both are functions of (g, seq), so the reader can check what
// arrives.
func stressSize(g int, seq uint64) int {
	r := rand.New(rand.NewPCG(uint64(g)*7919+1, seq))
	switch r.IntN(4) {
	case 0:
		return 1 + r.IntN(64)
	case 1:
		return 1 + r.IntN(64<<10)
	case 2:
		return 1 + r.IntN(256<<10)
	default:
		return 1 + r.IntN(1<<20)
	}
}

// stressByte is byte i of sender g's attachment seq (see stressSize).
func stressByte(g int, seq uint64, i int) byte {
	return byte(uint64(g)*131 + seq*17 + uint64(i)*13 + uint64(i>>8)*3)
}

// slowReader reads at most a random amount per Read and stalls now and then.
type slowReader struct {
	r   io.Reader
	rnd *rand.Rand
}

func (s *slowReader) Read(p []byte) (int, error) {
	switch x := s.rnd.IntN(1000); {
	case x < 2:
		time.Sleep(time.Duration(2+s.rnd.IntN(10)) * time.Millisecond)
	case x < 50:
		time.Sleep(time.Duration(s.rnd.IntN(100)) * time.Microsecond)
	}
	n := 1 + s.rnd.IntN(128<<10)
	if n < len(p) {
		p = p[:n]
	}
	return s.r.Read(p)
}

// outcome is what one send of a stress sender returned.
type outcome struct {
	seq  uint64
	sent bool // nil or DetachedError: must arrive
}

// TestStressDetach: many goroutines send inline media with contexts
// cancelled at random moments, through a slow reader; each sender
// overwrites its buffer right after the call returns and reuses it. Every
// packet that arrives must carry the bytes it had at send time, and every
// packet the Writer claimed (nil or *DetachedError) must arrive, in order
// per sender; a plain cause must mean nothing arrives.
func TestStressDetach(t *testing.T) {
	for _, cp := range connPairs {
		t.Run(cp.name, func(t *testing.T) { stressDetach(t, cp.pair, false) })
		t.Run(cp.name+"/smallbuf", func(t *testing.T) { stressDetach(t, cp.pair, true) })
	}
}

func stressDetach(t *testing.T, pair func(testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser), small bool) {
	a, b := pair(t)
	if small {
		smallSendBuffer(t, a)
	}
	w := New(a, wire.Limits{})
	const senders = 12
	dur := stressDur()
	deadline := time.Now().Add(dur)

	var detached, causeOnly, ok, other atomic.Int64
	outcomes := make([][]outcome, senders)
	errc := make(chan error, senders+2)

	// reader
	readDone := make(chan struct{})
	received := make([][]uint64, senders)
	go func() {
		defer close(readDone)
		defer io.Copy(io.Discard, b) // keep draining after an error so nothing hangs
		r := packetio.NewReader(&slowReader{r: b, rnd: rand.New(rand.NewPCG(99, 1))}, wire.Limits{})
		for {
			p, err := r.ReadPacket()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					errc <- fmt.Errorf("read: %w", err)
				}
				return
			}
			f, isF := p.(*wire.Frame)
			if !isF {
				continue
			}
			if f.Kind == frame.KindCompleted && f.CallID == "stop" {
				b.Close()
				return
			}
			if f.CallID == "flood" {
				continue
			}
			g, err := strconv.Atoi(f.CallID[1:])
			if err != nil {
				errc <- fmt.Errorf("bad call id %q", f.CallID)
				return
			}
			m, isM := f.Media.(*frame.InlineMedia)
			if !isM {
				continue // a small plain frame
			}
			want := stressSize(g, f.Sequence)
			if len(m.Data) != want {
				errc <- fmt.Errorf("%s/%d: len %d want %d", f.CallID, f.Sequence, len(m.Data), want)
				return
			}
			for i, c := range m.Data {
				if c != stressByte(g, f.Sequence, i) {
					errc <- fmt.Errorf("%s/%d: byte %d is %#x want %#x (CORRUPTION)", f.CallID, f.Sequence, i, c, stressByte(g, f.Sequence, i))
					return
				}
			}
			received[g] = append(received[g], f.Sequence)
		}
	}()

	var wg sync.WaitGroup
	for k := 0; k < 2; k++ { // flood small frames so that the queue reaches its bound
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(k), 5))
			pl := frame.MustPayload(map[string]any{"pad": string(bytes.Repeat([]byte("x"), 2000))})
			for seq := uint64(1); time.Now().Before(deadline); seq++ {
				small, err := frame.NewChunk("flood", frame.ProviderToCaller, seq, pl, nil)
				if err != nil {
					errc <- err
					return
				}
				ctx, cancel := context.WithCancelCause(context.Background())
				time.AfterFunc(time.Duration(rnd.IntN(500))*time.Microsecond, func() { cancel(errStress) })
				err = w.Write(ctx, Stream, &wire.Frame{Frame: small})
				cancel(errStress)
				if err != nil && !errors.Is(err, errStress) {
					errc <- err
					return
				}
			}
		}()
	}
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			buf := make([]byte, 1<<20)
			callID := "g" + strconv.Itoa(g)
			for seq := uint64(1); time.Now().Before(deadline); seq++ {
				n := stressSize(g, seq)
				data := buf[:n]
				if rnd.IntN(4) == 0 { // sometimes the suffix of the buffer
					data = buf[len(buf)-n:]
				}
				for i := range data {
					data[i] = stressByte(g, seq, i)
				}
				fr, err := frame.NewChunk(callID, frame.ProviderToCaller, seq, nil,
					&frame.InlineMedia{Data: data, MediaType: "application/octet-stream"})
				if err != nil {
					errc <- err
					return
				}
				pkt := &wire.Frame{Frame: fr}
				var ctx context.Context = context.Background()
				var cancel context.CancelCauseFunc = func(error) {}
				mode := rnd.IntN(10)
				if mode != 0 {
					ctx, cancel = context.WithCancelCause(context.Background())
					switch rnd.IntN(5) {
					case 0:
						cancel(errStress) // already done
					case 1:
						go cancel(errStress)
					default:
						d := time.Duration(rnd.IntN(3000)) * time.Microsecond
						time.AfterFunc(d, func() { cancel(errStress) })
					}
				}
				switch {
				case mode == 0:
					err = w.Write(context.Background(), Stream, pkt)
				case rnd.IntN(2) == 0:
					err = w.Write(ctx, Reply, pkt)
				default:
					err = w.Write(ctx, Stream, pkt)
				}
				// overwrite at once, everything of buf
				for i := range data {
					data[i] = ^data[i]
				}
				cancel(errStress)
				var de *DetachedError
				switch {
				case err == nil:
					ok.Add(1)
					outcomes[g] = append(outcomes[g], outcome{seq, true})
				case errors.As(err, &de):
					if !errors.Is(err, errStress) {
						errc <- fmt.Errorf("detached with a wrong cause %v", err)
						return
					}
					detached.Add(1)
					outcomes[g] = append(outcomes[g], outcome{seq, true})
				case errors.Is(err, errStress):
					causeOnly.Add(1)
					outcomes[g] = append(outcomes[g], outcome{seq, false})
				default:
					other.Add(1)
					errc <- fmt.Errorf("g%d/%d: %v", g, seq, err)
					return
				}
				// interleave small frames
				if rnd.IntN(3) == 0 {
					small, err := frame.NewChunk(callID, frame.ProviderToCaller, 1_000_000+seq, frame.MustPayload(map[string]any{"x": 1}), nil)
					if err != nil {
						errc <- err
						return
					}
					switch rnd.IntN(3) {
					case 0:
						err = w.Write(context.Background(), Reply, &wire.Frame{Frame: small})
					case 1:
						_, err = w.TryWrite(&wire.Frame{Frame: small})
					default:
						w.Cork()
						err = w.Write(context.Background(), Stream, &wire.Frame{Frame: small})
						w.Uncork()
					}
					if err != nil {
						errc <- err
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	stop := &wire.Frame{Frame: frame.Frame{CallID: "stop", Direction: frame.ProviderToCaller, Sequence: 1, Kind: frame.KindCompleted}}
	require.NoError(t, w.Write(context.Background(), Stream, stop))
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	select {
	case err := <-closed:
		a.Close()
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "Close hangs")
	}
	select {
	case <-readDone:
	case <-time.After(60 * time.Second):
		require.FailNow(t, "reader hangs")
	}
	select {
	case err := <-errc:
		require.FailNow(t, fmt.Sprint(err))
	default:
	}
	for g := range outcomes {
		var want []uint64
		for _, o := range outcomes[g] {
			if o.sent {
				want = append(want, o.seq)
			}
		}
		got := received[g]
		if fmt.Sprint(got) != fmt.Sprint(want) {
			// find first difference
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			require.FailNow(t, fmt.Sprintf("g%d: received %d packets, claimed %d; first difference at %d", g, len(got), len(want), i))
		}
	}
	t.Logf("ok=%d detached=%d causeOnly=%d other=%d", ok.Load(), detached.Load(), causeOnly.Load(), other.Load())
}

var errStress = errors.New("stress cancel")

// TestStressDetachPeerGone: as TestStressDetach, but the peer closes its
// end at a random moment: every sender returns, Close returns, nothing
// hangs.
func TestStressDetachPeerGone(t *testing.T) {
	// The senders' buffers, made once: each iteration's Writer is closed
	// before the next begins, so nothing reads them across iterations.
	var bufs [8][]byte
	for g := range bufs {
		bufs[g] = make([]byte, 2<<20)
	}
	for iter := 0; iter < 20; iter++ {
		for _, cp := range connPairs {
			a, b := cp.pair(t)
			w := New(a, wire.Limits{})
			var wg sync.WaitGroup
			stopAt := time.Duration(rand.IntN(50)) * time.Millisecond
			readerDone := make(chan struct{})
			go func() { // the peer: ends at stopAt, waited for below
				defer close(readerDone)
				buf := make([]byte, 64<<10)
				end := time.Now().Add(stopAt)
				for time.Now().Before(end) {
					b.Read(buf)
					time.Sleep(100 * time.Microsecond)
				}
				b.Close()
			}()
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					buf := bufs[g]
					for seq := uint64(1); seq < 50; seq++ {
						att := buf[:1+rand.IntN(len(buf)-1)]
						fr, _ := frame.NewChunk("g"+strconv.Itoa(g), frame.ProviderToCaller, seq, nil,
							&frame.InlineMedia{Data: att, MediaType: "a/b"})
						ctx, cancel := context.WithCancelCause(context.Background())
						time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, func() { cancel(errStress) })
						err := w.Write(ctx, Stream, &wire.Frame{Frame: fr})
						cancel(errStress)
						// Scribble on the attachment: the race detector
						// reports a Writer still reading it after Write
						// returned. What a Writer reads late is what it
						// had not written yet, always the attachment's
						// end, so the last byte is in every such read;
						// a byte every 64 KiB besides. Writing all of
						// the 2 MiB buffer took most of the test's
						// time under -race (230 s of the package's 308).
						for i := 0; i < len(att); i += 64 << 10 {
							att[i]++
						}
						att[len(att)-1]++
						var de *DetachedError
						if err != nil && !errors.As(err, &de) && !errors.Is(err, errStress) {
							return // the connection's error
						}
					}
				}(g)
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				require.FailNow(t, "senders hang after the peer left")
			}
			cerr := make(chan error, 1)
			go func() { cerr <- w.Close() }()
			select {
			case <-cerr:
			case <-time.After(10 * time.Second):
				require.FailNow(t, "Close hangs after the peer left")
			}
			<-readerDone
		}
	}
}
