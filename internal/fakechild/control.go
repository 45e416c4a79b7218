package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
)

// The control connection and what the tools change of the control side.
// The process is the owner of all of it: nothing here is reset.
var (
	ctrlMu sync.Mutex // serializes writes on the control connection
	ctrl   net.Conn
	// muted: the pongs stop (mute); closedCtrl: fd 3 was closed on
	// purpose (closefd3); in either case the child lives on without the
	// control connection.
	muted, closedCtrl atomic.Bool
	stuck             atomic.Bool // pongs report one stuck handler (escapestuck)
	// deaf: the control loop stops reading fd 3 after the ping it reads
	// next and answers the pings it peeks at there (deaf).
	deaf atomic.Bool
	// healthInterval is the startup's, set before any tool runs.
	healthInterval time.Duration
	// running counts the calls whose tool has not returned, for pongs.
	running atomic.Int64
	// late is the latecount call: when its invoke was read (zero: none
	// yet), and how many pings came 1.5 s or more after that. Guarded by
	// lateMu; the control loop counts the call in pongs from the second
	// such ping (lateTick).
	lateMu    sync.Mutex
	lateAt    time.Time
	latePings int
)

// lateTick is called by the control loop for every ping before it answers:
// the latecount call is counted in running from the second ping that
// comes 1.5 s or more after its invoke was read.
func lateTick() {
	lateMu.Lock()
	defer lateMu.Unlock()
	if lateAt.IsZero() || latePings >= 2 || time.Since(lateAt) < 1500*time.Millisecond {
		return
	}
	if latePings++; latePings == 2 {
		running.Add(1)
	}
}

// writeControl writes p on the control connection.
func writeControl(p wire.Packet) error {
	ctrlMu.Lock()
	defer ctrlMu.Unlock()
	return packetio.WritePacket(ctrl, p, wire.Limits{})
}

// writeControlRaw writes b, which need not be a packet, on the control
// connection.
func writeControlRaw(b []byte) {
	ctrlMu.Lock()
	defer ctrlMu.Unlock()
	ctrl.Write(b)
}

// serve runs the protocol modes: the startup, the hello, the stream
// listener and the control loop. It returns the exit status.
func serve(mode string) int {
	if path := os.Getenv(envOutEnv); path != "" {
		if err := os.WriteFile(path, []byte(strings.Join(os.Environ(), "\n")), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "fake: writing the environment:", err)
			return 2
		}
	}
	ctrlFile, lnFile := os.NewFile(3, "control"), os.NewFile(4, "streams")
	var err error
	if ctrl, err = net.FileConn(ctrlFile); err != nil {
		fmt.Fprintln(os.Stderr, "fake: no control connection on fd 3")
		return 2
	}
	ln, err := net.FileListener(lnFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake: no stream listener on fd 4")
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
	proto := []int64{1}
	if mode == "badversion" {
		proto = []int64{2}
	}
	if err := writeControl(&wire.Hello{Protocol: proto, SDK: "fakechild/1", PID: int64(os.Getpid()), MaxStreams: 4, Limits: packetio.DefaultLimits(), Tools: tools()}); err != nil {
		return 2
	}
	poolStartAfterHello(mode)
	cr := packetio.NewReader(ctrl, wire.Limits{})
	first, err := cr.ReadPacket()
	if err != nil {
		return 2
	}
	if st, ok := first.(*wire.Startup); ok {
		healthInterval = time.Duration(st.HealthIntervalMS) * time.Millisecond
	}
	if mode == "badtools" { // a tool list the host cannot take: two tools of one id
		if err := writeControl(&wire.Tools{Tools: []wire.Tool{{ID: "ok"}, {ID: "ok"}}}); err != nil {
			return 2
		}
	}
	go accept(ln, mode) // stopped by the process exiting
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
			return 0 // the host is gone
		}
		switch p := p.(type) {
		case *wire.Ping:
			lateTick()
			switch {
			case mode == "nopong" || muted.Load():
			case mode == "stalepong": // answers every ping with the first one's nonce
				writeControl(&wire.Pong{Nonce: 1})
			default:
				pong := &wire.Pong{Nonce: p.Nonce, Streams: running.Load()}
				if stuck.Load() {
					pong.Streams, pong.Stuck = max(pong.Streams, 1), 1
				}
				writeControl(pong)
			}
			if deaf.Load() {
				goDeaf(cr)
			}
		case *wire.Drain:
			ln.Close()
			writeControl(&wire.Bye{Reason: "drained"})
			return 0
		}
	}
}

// accept serves the stream connections ln accepts, one goroutine each
// (ended with its connection), until ln is closed; lostaccept accepts
// none, lostread keeps them open and never reads them.
func accept(ln net.Listener, mode string) {
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
		go serveConn(nc) // ended by the connection's end or a tool that ends it
	}
}

// poolStartBeforeHello runs the part of a pool start mode before the
// hello; done means the fake child exits with code.
func poolStartBeforeHello(mode string) (code int, done bool) {
	dir, id := os.Getenv(poolDirEnv), os.Getenv("SKULK_CHILD_ID")
	n, _ := strconv.Atoi(os.Getenv(poolSizeEnv))
	switch mode {
	case "poolbarrier":
		if err := os.WriteFile(filepath.Join(dir, id+".started"), nil, 0o600); err != nil {
			return 2, true
		}
		if !waitMarkers(dir, ".started", n) {
			return 3, true
		}
	case "poolfail":
		if id == "c1.1" {
			waitMarkers(dir, ".hello", n-1)
			return 4, true
		}
	case "poolfailearly":
		if id == "c1.1" {
			return 4, true
		}
		time.Sleep(time.Minute)
		return 0, true
	}
	return 0, false
}

// poolStartAfterHello marks the fake child's hello for poolfail.
func poolStartAfterHello(mode string) {
	if mode == "poolfail" {
		os.WriteFile(filepath.Join(os.Getenv(poolDirEnv), os.Getenv("SKULK_CHILD_ID")+".hello"), nil, 0o600)
	}
}

// waitMarkers waits until dir holds n files ending in suffix, for 30 s at
// most.
func waitMarkers(dir, suffix string, n int) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(dir, "*"+suffix)); len(m) >= n {
			return true
		}
	}
	return false
}

// goDeaf stops the control loop for the deaf tool: the child reads no
// more of its control connection, but answers the pings that wait there
// (peekPongs). It first takes the whole packets the reader cr already
// holds, and the rest of one it holds in part, so that the unread bytes
// on the socket start at a packet. It never returns.
func goDeaf(cr *packetio.Reader) {
	for cr.Buffered() > 0 { // the rest of a packet held in part is on its way: the host writes each whole
		p, err := cr.ReadPacket()
		if err != nil {
			select {} // the host goes on without us
		}
		if p, ok := p.(*wire.Ping); ok {
			writeControl(&wire.Pong{Nonce: p.Nonce, Streams: running.Load()})
		}
	}
	peekPongs()
	select {} // fd 3 is never read again
}

// peekPongs is the deaf tool's control side once it reads no more: it
// answers every ping the host puts on the control connection, as a child
// could that wants to look healthy while it leaves its control
// connection unread. Every tenth of an interval it looks at the bytes
// waiting unread (their count, then a peek: MSG_PEEK, which takes nothing
// off the socket) and answers the newest ping among those new since its
// last look, with that ping's nonce, so that the pong matches a ping the
// host sent however late or few the host's pings were (the host takes a
// pong for the newest ping as the answer to every older one). It returns
// when it cannot look or write.
func peekPongs() {
	sc, ok := ctrl.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	every := max(healthInterval/10, time.Millisecond) // a startup's 0 would spin
	// buf holds the unread bytes as last peeked: it grows to the socket's
	// unread count, which the socket's buffer bounds. done is how many of
	// them were looked at already (whole packets).
	var buf []byte
	var done, seen int // seen: the unread count at the last peek
	var answered uint64
	for ; ; time.Sleep(every) {
		var n int
		var perr error
		if err := rc.Control(func(fd uintptr) {
			if n, perr = unix.IoctlGetInt(int(fd), unix.SIOCINQ); perr != nil || n <= done || n == seen {
				n = done // nothing new since the last peek: a full socket's bytes are not peeked again
				return
			}
			seen = n
			if n > cap(buf) {
				buf = make([]byte, n)
			}
			n, _, perr = unix.Recvfrom(int(fd), buf[:n], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		}); err != nil || perr != nil {
			return
		}
		if n <= done {
			continue
		}
		nonce, whole := newestPing(buf[done:n])
		done += whole
		if nonce > answered {
			answered = nonce
			if writeControl(&wire.Pong{Nonce: nonce, Streams: running.Load()}) != nil {
				return
			}
		}
	}
}

// newestPing decodes the whole packets at the start of b and returns the
// nonce of the newest ping among them (0: none) and how many bytes they
// take.
func newestPing(b []byte) (nonce uint64, whole int) {
	for len(b)-whole >= protocol.PrefixLen {
		h := binary.BigEndian.Uint32(b[whole:])
		a := binary.BigEndian.Uint32(b[whole+4:])
		size := protocol.PrefixLen + int(h) + int(a)
		if len(b)-whole < size {
			break
		}
		// A packet that does not decode is passed over: its length says
		// where the next starts.
		p, _ := packetio.NewReader(bytes.NewReader(b[whole:whole+size]), wire.Limits{}).ReadPacket()
		if p, ok := p.(*wire.Ping); ok {
			nonce = p.Nonce
		}
		whole += size
	}
	return nonce, whole
}

// floodPongs writes pongs that answer no ping (nonce 1, the first ping's,
// answered long ago) back to back, as fast as the host reads them, until
// the control connection fails.
func floodPongs() {
	one, err := packetio.Encode(&wire.Pong{Nonce: 1}, wire.Limits{})
	if err != nil {
		return
	}
	var batch []byte
	for len(batch) < 4<<10 {
		batch = append(batch, one...)
	}
	for {
		ctrlMu.Lock()
		_, err := ctrl.Write(batch)
		ctrlMu.Unlock()
		if err != nil {
			return
		}
	}
}
