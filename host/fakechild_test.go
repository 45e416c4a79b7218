package host

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
)

// The fake child: this test binary, re-executed with fakeModeEnv set,
// speaks raw packets to the host and misbehaves on purpose. Its mode
// changes the control side ("" or "ok": well behaved; "nopong": never
// answers pings; "stalepong": answers each with the first ping's nonce; "badversion": offers only version 2;
// "badtools": sends a tools packet of two tools with one id; "nohello": says
// nothing; "exit": exits at once; the pool start modes of poolstart_test.go).
// Its pongs count the calls whose tool has not returned.
// Its tools change one call:
//
//	ok        echoes caller chunks; completes {"n", "prefix"} on the caller's completed
//	byecall   says bye on the control connection (no drain asked), then completes
//	gap       sends sequence 2 first
//	dupseq    sends chunk 1, then a terminal with sequence 1 again
//	dupterm   sends completed, then a second completed, then end
//	othercall sends a frame of another call
//	oversize  sends a length prefix over max_header
//	garbage   sends a header that is not a MessagePack map
//	badfield  sends a frame with synthetic set
//	badoutput sends a chunk that breaks the output schema
//	noend     completes and never sends end
//	hang      sends nothing and ignores cancellation
//	die       sends one chunk, writes to stderr and exits with status 7
//	hangup    sends one chunk and closes the connection (the child lives)
func fakeChild(mode string) int {
	if path := os.Getenv(fakeEnvOutEnv); path != "" {
		if err := os.WriteFile(path, []byte(strings.Join(os.Environ(), "\n")), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "fake: env:", err)
			return 2
		}
	}
	ctrlFile := os.NewFile(3, "control")
	lnFile := os.NewFile(4, "streams")
	ctrl, err := net.FileConn(ctrlFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake: control:", err)
		return 2
	}
	ln, err := net.FileListener(lnFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake: listener:", err)
		return 2
	}
	ctrlFile.Close()
	lnFile.Close()
	switch mode {
	case "nohello":
		time.Sleep(time.Minute)
		return 0
	case "exit":
		return 4
	}
	if code, done := poolStartBeforeHello(mode); done {
		return code
	}
	cw := func(p wire.Packet) error { return packetio.WritePacket(ctrl, p, wire.Limits{}) }
	cr := packetio.NewReader(ctrl, wire.Limits{})
	proto := []int64{1}
	if mode == "badversion" {
		proto = []int64{2}
	}
	obj := func(props map[string]any) map[string]any {
		return map[string]any{"type": "object", "properties": props}
	}
	tools := []wire.Tool{{
		ID:              "ok",
		Version:         "ok-v1",
		ArgumentsSchema: obj(map[string]any{"prefix": map[string]any{"type": "string", "default": "p"}, "n": map[string]any{"type": "integer", "minimum": 0}}),
		InputSchema:     obj(map[string]any{"text": map[string]any{"type": "string"}}),
		OutputSchema:    obj(map[string]any{"text": map[string]any{"type": "string"}}),
	}}
	for _, id := range []string{"byecall", "gap", "dupseq", "dupterm", "othercall", "oversize", "garbage", "badfield", "noend", "hang", "die", "hangup", "idleclose", "idlewrite"} {
		tools = append(tools, wire.Tool{ID: id})
	}
	tools = append(tools, wire.Tool{ID: "badoutput", OutputSchema: obj(map[string]any{"i": map[string]any{"type": "integer"}})})
	fakeControl = cw
	cw(&wire.Hello{Protocol: proto, SDK: "fake/1", PID: int64(os.Getpid()), MaxStreams: 4, Limits: packetio.DefaultLimits(), Tools: tools})
	poolStartAfterHello(mode)
	if _, err := cr.ReadPacket(); err != nil {
		return 2
	}
	if mode == "badtools" { // a tool list the host cannot take: two tools of one id
		cw(&wire.Tools{Tools: []wire.Tool{{ID: "ok"}, {ID: "ok"}}})
	}
	var mu sync.Mutex // serializes the process's exit with writes
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go fakeConn(nc, &mu)
		}
	}()
	for {
		p, err := cr.ReadPacket()
		if err != nil {
			return 0 // host gone
		}
		switch p := p.(type) {
		case *wire.Ping:
			switch mode {
			case "nopong":
			case "stalepong": // answers every ping with the first one's nonce
				cw(&wire.Pong{Nonce: 1})
			default:
				cw(&wire.Pong{Nonce: p.Nonce, Streams: fakeRunning.Load()})
			}
		case *wire.Drain:
			ln.Close()
			cw(&wire.Bye{Reason: "drained"})
			return 0
		}
	}
}

// fakeRunning counts the fake child's calls whose tool has not returned,
// for its pongs' streams.
var fakeRunning atomic.Int64

// fakeControl is the fake child's control Writer, for tools that write on
// the control connection.
var fakeControl func(wire.Packet) error

func fakeConn(nc net.Conn, mu *sync.Mutex) {
	defer nc.Close()
	r := packetio.NewReader(nc, wire.Limits{})
	w := func(p wire.Packet) error { return packetio.WritePacket(nc, p, wire.Limits{}) }
	for {
		p, err := r.ReadPacket()
		if err != nil {
			return
		}
		inv, ok := p.(*wire.Invoke)
		if !ok {
			return
		}
		reportInvoke(inv)
		fakeRunning.Add(1)
		goOn := fakeCall(inv, r, w, nc, mu)
		fakeRunning.Add(-1)
		if !goOn {
			return
		}
	}
}

// fakeCall runs one call; it reports whether the connection goes on.
func fakeCall(inv *wire.Invoke, r *packetio.Reader, w func(wire.Packet) error, nc net.Conn, mu *sync.Mutex) bool {
	id := inv.CallID
	send := func(f frame.Frame, err error) {
		if err != nil {
			panic(err)
		}
		w(&wire.Frame{Frame: f})
	}
	chunk := func(seq uint64, v any) {
		send(frame.NewChunk(id, frame.ProviderToCaller, seq, frame.MustPayload(v), nil))
	}
	completed := func(seq uint64, v any) {
		var p frame.Payload
		if v != nil {
			p = frame.MustPayload(v)
		}
		send(frame.NewCompleted(id, frame.ProviderToCaller, seq, p))
	}
	end := func() { w(&wire.End{CallID: id}) }
	raw := func(b []byte) { nc.Write(b) }
	// drainCaller reads caller frames up to the caller's terminal.
	drainCaller := func() bool {
		for {
			p, err := r.ReadPacket()
			if err != nil {
				return false
			}
			if f, ok := p.(*wire.Frame); ok && f.IsTerminal() {
				return true
			}
		}
	}
	switch inv.ToolID {
	case "ok":
		var args struct {
			Prefix string `json:"prefix"`
		}
		inv.Arguments.Decode(&args)
		seq := uint64(1)
		for {
			p, err := r.ReadPacket()
			if err != nil {
				return false
			}
			f, ok := p.(*wire.Frame)
			if !ok {
				return false
			}
			switch f.Kind {
			case frame.KindChunk:
				send(frame.NewChunk(id, frame.ProviderToCaller, seq, f.Payload, f.Media))
				seq++
			case frame.KindCompleted:
				completed(seq, map[string]any{"n": seq - 1, "prefix": args.Prefix})
				end()
				return true
			case frame.KindCancelled:
				send(frame.NewCancelled(id, frame.ProviderToCaller, seq, "cancelled by the caller"))
				end()
				return true
			}
		}
	case "byecall":
		fakeControl(&wire.Bye{Reason: "leaving"})
		completed(1, nil)
		end()
		return true
	case "gap":
		chunk(2, map[string]any{"i": 0})
	case "dupseq":
		chunk(1, map[string]any{"i": 0})
		completed(1, nil)
	case "dupterm":
		completed(1, map[string]any{"first": true})
		completed(2, nil)
		end()
	case "othercall":
		send(frame.NewChunk(id+"-other", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"i": 0}), nil))
	case "oversize":
		var b [8]byte
		binary.BigEndian.PutUint32(b[:], 0x7fffffff)
		raw(b[:])
	case "garbage":
		raw([]byte("\x00\x00\x00\x05\x00\x00\x00\x00hello"))
	case "badfield":
		f, _ := frame.NewChunk(id, frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"i": 0}), nil)
		f.Synthetic = true
		b, err := packetio.Encode(&wire.Frame{Frame: f}, wire.Limits{})
		if err != nil {
			// The encoder refuses synthetic frames: patch the key by hand.
			f.Synthetic = false
			b, _ = packetio.Encode(&wire.Frame{Frame: f}, wire.Limits{})
			b = patchSynthetic(b)
		}
		raw(b)
	case "badoutput":
		chunk(1, map[string]any{"i": "not a number"})
	case "noend":
		completed(1, nil)
		drainCaller()
		time.Sleep(time.Minute)
		return false
	case "hang":
		time.Sleep(time.Minute)
		return false
	case "die":
		chunk(1, map[string]any{"i": 0})
		mu.Lock()
		fmt.Fprintln(os.Stderr, "fake: dying on purpose")
		os.Exit(7)
	case "idleclose": // answers, then closes the connection while it is idle
		drainCaller()
		completed(1, nil)
		end()
		return false
	case "idlewrite": // answers, then writes on the idle connection
		drainCaller()
		completed(1, nil)
		end()
		chunk(2, map[string]any{"i": 0})
	case "hangup":
		chunk(1, map[string]any{"i": 0})
		return false
	default:
		send(frame.NewFailed(id, frame.ProviderToCaller, 1, frame.CodeInvalidFrame, "unknown tool"))
		end()
		return drainCaller()
	}
	// Keep the connection open until the host closes it.
	for {
		if _, err := r.ReadPacket(); err != nil {
			return false
		}
	}
}

// fakeInvokesEnv names a file the fake child appends one line to for every
// invoke it reads: "call_id tool_id tree parent", so that tests can assert
// on what the child was sent.
const fakeInvokesEnv = "SKULK_HOST_TEST_INVOKES"

// fakeEnvOutEnv names a file the fake child writes its whole environment
// to as it starts, one NAME=value a line.
const fakeEnvOutEnv = "SKULK_HOST_TEST_ENVOUT"

func reportInvoke(inv *wire.Invoke) {
	path := os.Getenv(fakeInvokesEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "%s %s %s %s\n", inv.CallID, inv.ToolID, inv.Tree, inv.Parent)
	f.Close()
}

// patchSynthetic rewrites an encoded frame so that it carries
// "synthetic": true, which the encoder refuses to produce.
func patchSynthetic(b []byte) []byte {
	h := binary.BigEndian.Uint32(b)
	hdr := b[8 : 8+h]
	// The header is a fixmap (0x80|n): add one pair.
	if hdr[0]&0xf0 != 0x80 || hdr[0]&0x0f == 0x0f {
		return b
	}
	nh := append([]byte{hdr[0] + 1}, hdr[1:]...)
	nh = append(nh, 0xa9)
	nh = append(nh, "synthetic"...)
	nh = append(nh, 0xc3)
	out := make([]byte, 8, 8+len(nh)+len(b)-8-int(h))
	binary.BigEndian.PutUint32(out, uint32(len(nh)))
	binary.BigEndian.PutUint32(out[4:], binary.BigEndian.Uint32(b[4:]))
	out = append(out, nh...)
	return append(out, b[8+h:]...)
}
