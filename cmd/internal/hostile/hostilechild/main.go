// Command hostilechild is a provider written to misbehave, for the tests
// of cmd/internal/hostile and cmd/skulk-host: it speaks the protocol packet by
// packet (no SDK) so that it can break it, and each of its tools does one
// hostile thing. It is started by a host like any provider (fd 3, fd 4,
// docs/protocol.md §1).
//
// Its first argument selects what it does on the control connection:
//
//	serve      answers pings, leaves on drain (the default)
//	ignorefd3  reads nothing on fd 3 after the startup: neither pings nor
//	           the host's end; it also starts a setsid grandchild at once
//	lostread   as serve, but accepts stream connections and never reads them
//	lostaccept as serve, but never accepts a stream connection
//	sdk        is a well-behaved SDK provider (child.Run) with
//	           max_streams 4 and the demo tools, for a hostile host
//	grandchild is the grandchild: it calls setsid, writes its pid to the
//	           file HOSTILE_PIDS/grandchild-PID, ignores SIGTERM, SIGHUP
//	           and SIGINT, holds the stdout and stderr it was given, and
//	           sleeps
//	daemonize  starts a daemon (setsid, no descriptor of its parent) and
//	           exits once its pid file is written: the first half of a
//	           double fork
//	daemon     is that daemon: it calls setsid, ignores SIGTERM, SIGHUP
//	           and SIGINT, closes its standard descriptors, writes its pid
//	           to HOSTILE_PIDS/daemon-PID and sleeps
//
// HOSTILE_PIDS names the directory the grandchildren write their pid files
// to. The tools of serve, lostread, lostaccept and ignorefd3:
//
//	ok           echoes caller chunks; completes {"n"} on the caller's completed
//	oversize     sends a length prefix over max_header on the stream
//	garbage      sends a header that is not MessagePack on the stream
//	unknowncall  sends a chunk of a call that does not exist
//	flood        writes chunks as fast as it can and never reads
//	textflood    as flood, with {"text": ...} chunks
//	stderrflood  writes 64 MiB to stderr without a newline, then completes
//	ctrloversize sends a length prefix over max_header on the control connection
//	ctrlgarbage  sends a header that is not MessagePack on the control connection
//	mute         stops answering pings, and never answers the call
//	closefd3     closes the control connection and goes on serving streams
//	escape       starts a setsid grandchild, waits for its pid file, completes
//	escapestuck  as escape; once completed, its pongs report a stuck
//	             handler, so the host recycles the child
//	escapedie    starts a setsid grandchild, waits for its pid file, exits 3
//	evil         sends inline media whose media type holds terminal escapes,
//	             then fails with a message full of them
//	inputdie     reads two caller frames, then exits 3
//	inputstall   never reads the connection after the invoke, and never answers
//	inputgarbage reads two caller frames, then sends a header that is not
//	             MessagePack, and goes on reading
//	lostfinish   reads the invoke and never answers; its pongs stop counting
//	             it at once (a handler the child lost track of)
//	logflood     writes {"n"} lines (default 20000) to stdout and as many to
//	             stderr as fast as it can, then completes once the host has
//	             read both pipes
//	mediaflood   sends {"n"} chunks (default 64) of 16 MiB inline media as
//	             fast as the host reads them, then completes
//	daemon       daemonizes mid-call (a double fork through daemonize:
//	             setsid, descriptors closed), then completes
//	swarm        runs a shell that starts 200 setsid sleeps, writes their
//	             pids to HOSTILE_PIDS/swarm and exits at once (their parent
//	             is gone before any health check), then completes {"n"}
//	hog          allocates and touches memory 8 MiB at a time, up to 4 GiB,
//	             then completes {"mib"}: a memory limit kills it first
//	forkloop     runs a shell that starts sleeps until a fork fails, then
//	             kills them and completes {"n"} with how many it started
//	spawn        runs a shell that starts one setsid sleep, appends its pid
//	             to HOSTILE_PIDS/spawn and exits, then completes
//	attackhost   tries to signal (signal 0, the permission check) and to
//	             ptrace its parent, the host, and completes {"uid", "gid",
//	             "nnp", "kill", "ptrace"}: its ids, its no_new_privs flag
//	             and each attempt's error ("" when it succeeded; a ptrace
//	             that succeeds is detached at once)
//
// A tool whose id and description are themselves terminal escapes is
// listed too (evilID); calling it fails. Pongs count every call as a
// running stream until its tool returns.
package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/child/demotools"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
	"golang.org/x/sys/unix"
)

// Hostile strings: a window title, a clear screen, a red fake success on a
// line of its own, a right-to-left override.
const (
	evilMessage   = "boom\x1b]0;pwned\x07\r\n\x1b[1;31mFAKE: completed OK\x1b[0m"
	evilMediaType = "audio/x\x1b[2J\x1b[H/../../\u202eevil"
	evilID        = "evil\x1b[2J"
	evilDesc      = "lists\x1b]0;title\x07 a \x1b[31mred\x1b[0m tool\u202e"
)

func main() {
	mode := "serve"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "grandchild":
		os.Exit(grandchild())
	case "daemonize":
		os.Exit(daemonize())
	case "daemon":
		os.Exit(daemon())
	case "sdk":
		os.Exit(child.Run(child.Options{
			SDK:        "hostilechild-sdk/1",
			MaxStreams: 4,
			Tools:      demotools.Tools(demotools.Options{TestTools: true, Exit: os.Exit}),
		}))
		return
	}
	os.Exit(serve(mode))
}

// grandchild is the process that escapes its parent's group and session.
func grandchild() int {
	syscall.Setsid() // already a session leader when started with Setsid
	signal.Ignore(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	dir := os.Getenv("HOSTILE_PIDS")
	name := filepath.Join(dir, "grandchild-"+strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(name+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600); err == nil {
		os.Rename(name+".tmp", name)
	}
	time.Sleep(10 * time.Minute)
	return 0
}

// daemonize starts the daemon in a session of its own with none of this
// process's descriptors, waits (up to 10 s) for its pid file and exits.
func daemonize() int {
	cmd := exec.Command(os.Args[0], "daemon")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 1
	}
	name := filepath.Join(os.Getenv("HOSTILE_PIDS"), "daemon-"+strconv.Itoa(cmd.Process.Pid))
	for range 1000 {
		if _, err := os.Stat(name); err == nil {
			return 0
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 1
}

// daemon is the daemon daemonize starts.
func daemon() int {
	syscall.Setsid()
	signal.Ignore(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	for fd := 0; fd < 3; fd++ {
		syscall.Close(fd)
	}
	name := filepath.Join(os.Getenv("HOSTILE_PIDS"), "daemon-"+strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(name+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600); err == nil {
		os.Rename(name+".tmp", name)
	}
	time.Sleep(10 * time.Minute)
	return 0
}

// swarmScript starts 200 setsid sleeps holding none of the shell's
// descriptors, records their pids and exits.
const swarmScript = `i=0
while [ $i -lt 200 ]; do
	setsid sleep 600 </dev/null >/dev/null 2>&1 &
	echo $! >> "$HOSTILE_PIDS/swarm"
	i=$((i + 1))
done`

// forkScript starts sleeps until a fork fails (the shell then exits),
// printing how many it started so far after each.
const forkScript = `n=0
while [ $n -lt 100000 ]; do
	sleep 600 </dev/null >/dev/null 2>&1 &
	n=$((n + 1))
	echo $n
done`

// hog allocates and touches memory 8 MiB at a time up to 4 GiB and
// returns how many MiB it holds.
func hog() int {
	var held [][]byte
	for len(held) < 512 {
		b := make([]byte, 8<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		held = append(held, b)
	}
	return len(held) * 8
}

// lastNumber returns the last line of out as a number.
func lastNumber(out []byte) int {
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(lines[len(lines)-1])
	return n
}

// attackHost tries to signal and to ptrace the host (this process's
// parent).
func attackHost() map[string]any {
	host := os.Getppid()
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	killErr := syscall.Kill(host, 0)
	ptraceErr := syscall.PtraceAttach(host)
	if ptraceErr == nil {
		var ws syscall.WaitStatus
		syscall.Wait4(host, &ws, syscall.WALL, nil)
		syscall.PtraceDetach(host)
	}
	nnp, _, _ := syscall.Syscall(syscall.SYS_PRCTL, 39 /* PR_GET_NO_NEW_PRIVS */, 0, 0)
	return map[string]any{"uid": os.Getuid(), "gid": os.Getgid(), "nnp": int(nnp), "kill": errText(killErr), "ptrace": errText(ptraceErr)}
}

// startGrandchild starts a setsid grandchild holding this process's stdout
// and stderr and waits (up to 10 s) for its pid file.
func startGrandchild() {
	cmd := exec.Command(os.Args[0], "grandchild")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "hostilechild: grandchild:", err)
		return
	}
	name := filepath.Join(os.Getenv("HOSTILE_PIDS"), "grandchild-"+strconv.Itoa(cmd.Process.Pid))
	for range 1000 {
		if _, err := os.Stat(name); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var (
	ctrlMu sync.Mutex // serializes writes on the control connection
	ctrl   net.Conn
	cw     func(wire.Packet) error
	muted  atomic.Bool
	stuck  atomic.Bool // pongs report one stuck handler
	// running counts the calls whose tool has not returned, for pongs.
	running atomic.Int64
)

func serve(mode string) int {
	ctrlFile, lnFile := os.NewFile(3, "control"), os.NewFile(4, "streams")
	var err error
	if ctrl, err = net.FileConn(ctrlFile); err != nil {
		fmt.Fprintln(os.Stderr, "hostilechild: no control connection on fd 3")
		return 2
	}
	ln, err := net.FileListener(lnFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostilechild: no stream listener on fd 4")
		return 2
	}
	ctrlFile.Close()
	lnFile.Close()
	cw = func(p wire.Packet) error { return packetio.WritePacket(ctrl, p, wire.Limits{}) }
	cr := packetio.NewReader(ctrl, wire.Limits{})
	tools := []wire.Tool{{ID: evilID, Description: evilDesc}}
	for _, id := range []string{"ok", "oversize", "garbage", "unknowncall", "flood", "textflood", "stderrflood", "ctrloversize", "ctrlgarbage", "mute", "closefd3", "escape", "escapestuck", "escapedie", "evil", "mediaflood", "inputdie", "inputstall", "inputgarbage", "logflood", "lostfinish", "daemon", "swarm", "hog", "forkloop", "attackhost", "spawn"} {
		tools = append(tools, wire.Tool{ID: id})
	}
	if err := cw(&wire.Hello{Protocol: []int64{1}, SDK: "hostilechild/1", PID: int64(os.Getpid()), MaxStreams: 8, Limits: packetio.DefaultLimits(), Tools: tools}); err != nil {
		return 2
	}
	if _, err := cr.ReadPacket(); err != nil {
		return 2
	}
	go func() { // stopped by the process exiting
		if mode == "lostaccept" {
			return // the listener's backlog takes the host's connections; nobody accepts them
		}
		var held []net.Conn // lostread's connections, kept open and never read
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			if mode == "lostread" {
				held = append(held, nc)
				continue
			}
			go serveConn(nc)
		}
	}()
	if mode == "ignorefd3" {
		startGrandchild()
		select {} // fd 3 is never read again
	}
	for {
		p, err := cr.ReadPacket()
		if err != nil {
			if muted.Load() || closedCtrl.Load() {
				select {} // the host goes on without us; we go on without it
			}
			return 0
		}
		switch p := p.(type) {
		case *wire.Ping:
			if !muted.Load() {
				ctrlMu.Lock()
				pong := &wire.Pong{Nonce: p.Nonce, Streams: running.Load()}
				if stuck.Load() {
					pong.Streams, pong.Stuck = max(pong.Streams, 1), 1
				}
				cw(pong)
				ctrlMu.Unlock()
			}
		case *wire.Drain:
			ln.Close()
			ctrlMu.Lock()
			cw(&wire.Bye{Reason: "drained"})
			ctrlMu.Unlock()
			return 0
		}
	}
}

var closedCtrl atomic.Bool

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

const notMessagePack = "\x00\x00\x00\x05\x00\x00\x00\x00hello"

// call runs one call; it reports whether the connection goes on.
func call(inv *wire.Invoke, r *packetio.Reader, w func(wire.Packet) error, nc net.Conn) bool {
	id := inv.CallID
	send := func(f frame.Frame, err error) {
		if err == nil {
			w(&wire.Frame{Frame: f})
		}
	}
	ctrlRaw := func(b string) {
		ctrlMu.Lock()
		ctrl.Write([]byte(b))
		ctrlMu.Unlock()
	}
	switch inv.ToolID {
	case "ok", "escape", "escapestuck", "stderrflood":
		switch inv.ToolID {
		case "escape", "escapestuck":
			startGrandchild()
		case "stderrflood":
			chunk := make([]byte, 64<<10)
			for i := range chunk {
				chunk[i] = 'x'
			}
			for range 1024 { // 64 MiB, no newline
				if _, err := os.Stderr.Write(chunk); err != nil {
					break
				}
			}
		}
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
				send(frame.NewCompleted(id, frame.ProviderToCaller, seq, frame.MustPayload(map[string]any{"n": seq - 1})))
				w(&wire.End{CallID: id})
				if inv.ToolID == "escapestuck" {
					stuck.Store(true)
				}
				return true
			case frame.KindCancelled:
				send(frame.NewCancelled(id, frame.ProviderToCaller, seq, "cancelled"))
				w(&wire.End{CallID: id})
				return true
			}
		}
	case "oversize":
		nc.Write(tooLong)
	case "garbage":
		nc.Write([]byte(notMessagePack))
	case "unknowncall":
		send(frame.NewChunk(id+"-unknown", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"i": 0}), nil))
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
		ctrlRaw(string(tooLong))
	case "ctrlgarbage":
		ctrlRaw(notMessagePack)
	case "mute":
		muted.Store(true)
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
		nc.Write([]byte(notMessagePack))
	case "logflood":
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
		send(frame.NewCompleted(id, frame.ProviderToCaller, 1, nil))
		w(&wire.End{CallID: id})
		return true
	case "lostfinish":
		running.Add(-1) // forgotten: the pongs no longer count it
		defer running.Add(1)
	case "inputstall":
		select {} // the handler never returns; the process ends with its drain
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
		send(frame.NewCompleted(id, frame.ProviderToCaller, uint64(args.N)+1, nil))
	case "daemon", "swarm", "hog", "forkloop", "attackhost", "spawn":
		var result map[string]any
		switch inv.ToolID {
		case "daemon":
			cmd := exec.Command(os.Args[0], "daemonize")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			cmd.Run()
			result = map[string]any{"ok": true}
		case "swarm":
			cmd := exec.Command("/bin/sh", "-c", swarmScript)
			cmd.Run()
			result = map[string]any{"n": 200}
		case "spawn":
			exec.Command("/bin/sh", "-c", `setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! >> "$HOSTILE_PIDS/spawn"`).Run()
			result = map[string]any{"ok": true}
		case "hog":
			result = map[string]any{"mib": hog()}
		case "forkloop":
			// In a group of its own, so that the sleeps go with it: a
			// child left at its pids limit could not start a thread of
			// its own to serve the next call.
			cmd := exec.Command("/bin/sh", "-c", forkScript)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out, _ := cmd.Output()
			if cmd.Process != nil {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
			result = map[string]any{"n": lastNumber(out)}
		case "attackhost":
			result = attackHost()
		}
		send(frame.NewCompleted(id, frame.ProviderToCaller, 1, frame.MustPayload(result)))
		w(&wire.End{CallID: id})
		return true
	case "evil":
		send(frame.NewChunk(id, frame.ProviderToCaller, 1, nil, &frame.InlineMedia{Data: []byte("abc"), MediaType: evilMediaType}))
		send(frame.NewFailed(id, frame.ProviderToCaller, 2, frame.CodeProviderError, evilMessage))
		w(&wire.End{CallID: id})
		return false
	default:
		send(frame.NewFailed(id, frame.ProviderToCaller, 1, frame.CodeProviderError, evilMessage))
		w(&wire.End{CallID: id})
		return false
	}
	// Hold the connection until the host closes it.
	for {
		if _, err := r.ReadPacket(); err != nil {
			return false
		}
	}
}
