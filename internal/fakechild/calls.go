package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
	"golang.org/x/sys/unix"
)

// tools is the hello's tool list: ok first, evilID last.
func tools() []wire.Tool {
	obj := func(props map[string]any) map[string]any {
		return map[string]any{"type": "object", "properties": props}
	}
	ts := []wire.Tool{{
		ID:              "ok",
		Version:         "ok-v1",
		ArgumentsSchema: obj(map[string]any{"prefix": map[string]any{"type": "string", "default": "p"}, "n": map[string]any{"type": "integer", "minimum": 0}}),
		InputSchema:     obj(map[string]any{"text": map[string]any{"type": "string"}}),
		OutputSchema:    obj(map[string]any{"text": map[string]any{"type": "string"}}),
	}}
	for _, id := range []string{
		"byecall", "gap", "dupseq", "dupterm", "othercall", "oversize", "garbage", "badfield", "noend", "hang",
		"die", "hangup", "idleclose", "idlewrite", "flood", "textflood", "stderrflood", "ctrloversize", "ctrlgarbage",
		"mute", "deaf", "pongflood", "closefd3", "escape", "escapestuck", "escapedie", "evil", "inputdie", "inputgarbage", "lostfinish", "latecount",
		"logflood", "mediaflood", "daemon", "swarm", "hog", "forkloop", "spawn", "attackhost", "orphans",
	} {
		ts = append(ts, wire.Tool{ID: id})
	}
	ts = append(ts, wire.Tool{ID: "badoutput", OutputSchema: obj(map[string]any{"i": map[string]any{"type": "integer"}})})
	return append(ts, wire.Tool{ID: evilID, Description: evilDesc})
}

// serveConn runs the calls of one stream connection, one after another,
// until the connection ends or a tool ends it.
func serveConn(nc net.Conn) {
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
		running.Add(1)
		goOn := call(inv, r, w, nc)
		running.Add(-1)
		if !goOn {
			return
		}
	}
}

// tooLong is a length prefix over any max_header.
var tooLong = func() []byte {
	var b [8]byte
	binary.BigEndian.PutUint32(b[:], 0x7fffffff)
	return b[:]
}()

// notMessagePack is a packet whose 5-byte header is not a MessagePack map.
const notMessagePack = "\x00\x00\x00\x05\x00\x00\x00\x00hello"

// call runs one call; it reports whether the connection goes on.
func call(inv *wire.Invoke, r *packetio.Reader, w func(wire.Packet) error, nc net.Conn) bool {
	id := inv.CallID
	send := func(f frame.Frame, err error) {
		if err != nil {
			panic(err) // a frame this program builds is valid
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
			if f, ok := p.(*wire.Frame); ok && f.Kind.IsTerminal() {
				return true
			}
		}
	}
	switch inv.ToolID {
	case "ok", "escape", "escapestuck", "stderrflood":
		switch inv.ToolID {
		case "escape", "escapestuck":
			startGrandchild()
		case "stderrflood":
			b := make([]byte, 64<<10)
			for i := range b {
				b[i] = 'x'
			}
			for range 1024 { // 64 MiB, no newline
				if _, err := os.Stderr.Write(b); err != nil {
					break
				}
			}
		}
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
				if inv.ToolID == "escapestuck" {
					stuck.Store(true)
				}
				return true
			case frame.KindCancelled:
				send(frame.NewCancelled(id, frame.ProviderToCaller, seq, "cancelled by the caller"))
				end()
				return true
			}
		}
	case "byecall":
		writeControl(&wire.Bye{Reason: "leaving"})
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
		raw(tooLong)
	case "garbage":
		raw([]byte(notMessagePack))
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
		select {} // the tool never returns; the process ends with its drain
	case "die":
		chunk(1, map[string]any{"i": 0})
		fmt.Fprintln(os.Stderr, "fake: dying on purpose")
		os.Exit(7)
	case "hangup":
		chunk(1, map[string]any{"i": 0})
		return false
	case "idleclose":
		drainCaller()
		completed(1, nil)
		end()
		return false
	case "idlewrite":
		drainCaller()
		completed(1, nil)
		end()
		chunk(2, map[string]any{"i": 0})
	case "flood", "textflood":
		key := "pad"
		if inv.ToolID == "textflood" {
			key = "text"
		}
		p := frame.MustPayload(map[string]any{key: strings.Repeat("x", 1000)})
		for seq := uint64(1); ; seq++ {
			f, _ := frame.NewChunk(id, frame.ProviderToCaller, seq, p, nil)
			if err := w(&wire.Frame{Frame: f}); err != nil {
				return false
			}
		}
	case "ctrloversize":
		writeControlRaw(tooLong)
	case "ctrlgarbage":
		writeControlRaw([]byte(notMessagePack))
	case "mute":
		muted.Store(true)
	case "deaf":
		deaf.Store(true)
	case "pongflood":
		muted.Store(true)
		go floodPongs() // stopped by the control connection's end or the process exiting
	case "closefd3":
		closedCtrl.Store(true)
		ctrl.Close()
	case "escapedie":
		startGrandchild()
		os.Exit(3)
	case "inputdie", "inputgarbage":
		for range 2 {
			if _, err := r.ReadPacket(); err != nil {
				return false
			}
		}
		if inv.ToolID == "inputdie" {
			os.Exit(3)
		}
		raw([]byte(notMessagePack))
	case "logflood":
		logFlood(inv)
		completed(1, nil)
		end()
		// The caller's frames are read before the next invoke, which
		// would otherwise find them and end the connection, under the
		// next call the host routes to it.
		return drainCaller()
	case "lostfinish":
		running.Add(-1) // forgotten: the pongs no longer count it
		defer running.Add(1)
	case "latecount":
		// Counted again by the control loop (lateTick).
		running.Add(-1)
		lateMu.Lock()
		lateAt = time.Now()
		lateMu.Unlock()
		select {} // as hang
	case "mediaflood":
		var args struct{ N int }
		inv.Arguments.Decode(&args)
		if args.N <= 0 {
			args.N = 64
		}
		m := &frame.InlineMedia{MediaType: "application/octet-stream", Data: make([]byte, protocol.DefaultMaxAttachment)}
		for seq := uint64(1); seq <= uint64(args.N); seq++ {
			f, _ := frame.NewChunk(id, frame.ProviderToCaller, seq, nil, m)
			if err := w(&wire.Frame{Frame: f}); err != nil {
				return false
			}
		}
		completed(uint64(args.N)+1, nil)
	case "orphans":
		var args struct{ N int }
		inv.Arguments.Decode(&args)
		if args.N <= 0 {
			args.N = 100
		}
		exec.Command("/bin/sh", "-c", orphanScript, "sh", strconv.Itoa(args.N)).Run()
		completed(1, map[string]any{"n": args.N, "pid": os.Getpid()})
		end()
		return true
	case "daemon", "swarm", "hog", "forkloop", "attackhost", "spawn":
		completed(1, processTool(inv.ToolID))
		end()
		return true
	case "evil":
		send(frame.NewChunk(id, frame.ProviderToCaller, 1, nil, &frame.InlineMedia{Data: []byte("abc"), MediaType: evilMediaType}))
		send(frame.NewFailed(id, frame.ProviderToCaller, 2, frame.CodeProviderError, evilMessage))
		end()
		return false
	case evilID:
		send(frame.NewFailed(id, frame.ProviderToCaller, 1, frame.CodeProviderError, evilMessage))
		end()
		return false
	default:
		send(frame.NewFailed(id, frame.ProviderToCaller, 1, frame.CodeInvalidFrame, "unknown tool"))
		end()
		return drainCaller()
	}
	// Hold the connection until the host closes it.
	for {
		if _, err := r.ReadPacket(); err != nil {
			return false
		}
	}
}

// logFlood writes the logflood tool's lines and returns once the host has
// read both pipes.
func logFlood(inv *wire.Invoke) {
	var args struct{ N int }
	inv.Arguments.Decode(&args)
	if args.N <= 0 {
		args.N = 20000
	}
	var wg sync.WaitGroup
	for _, f := range []*os.File{os.Stdout, os.Stderr} {
		wg.Add(1)
		go func() { // stopped after n lines
			defer wg.Done()
			bw := bufio.NewWriterSize(f, 64<<10)
			for i := range args.N {
				fmt.Fprintf(bw, "flood line %d\n", i)
			}
			bw.Flush()
		}()
	}
	wg.Wait()
	// Complete once the host has read both pipes (TIOCINQ, FIONREAD, counts
	// what waits in a pipe from either end), so that every line
	// reached it before the call ends.
	for range 3000 {
		out, _ := unix.IoctlGetInt(1, unix.TIOCINQ)
		errs, _ := unix.IoctlGetInt(2, unix.TIOCINQ)
		if out == 0 && errs == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processTool runs one of the tools that start processes or test the
// child's containment and returns its result.
func processTool(tool string) map[string]any {
	switch tool {
	case "daemon":
		cmd := exec.Command(os.Args[0], "daemonize")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		cmd.Run()
		return map[string]any{"ok": true}
	case "swarm":
		exec.Command("/bin/sh", "-c", swarmScript).Run()
		return map[string]any{"n": 200}
	case "spawn":
		exec.Command("/bin/sh", "-c", `setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! >> "$FAKECHILD_PIDS/spawn"`).Run()
		return map[string]any{"ok": true}
	case "hog":
		return map[string]any{"mib": hog()}
	case "forkloop":
		// In a group of its own, so that the sleeps go with it: a
		// child left at its pids limit could not start a thread of
		// its own to serve the next call.
		cmd := exec.Command("/bin/sh", "-c", forkScript)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, _ := cmd.Output()
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			// A killed process counts against the pids limit until it
			// is reaped (by the host's subreaper, not by this child):
			// answer once the group is gone, so that the next call finds
			// room for a thread. At most 5 s.
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if syscall.Kill(-cmd.Process.Pid, 0) == syscall.ESRCH {
					break
				}
			}
		}
		return map[string]any{"n": lastNumber(out)}
	default: // attackhost
		return attackHost()
	}
}

// reportInvoke appends inv's line to the file named by FAKECHILD_INVOKES,
// if any.
func reportInvoke(inv *wire.Invoke) {
	path := os.Getenv(invokesEnv)
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
