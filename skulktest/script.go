package skulktest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
)

// A Fault is one way the scripted child of Child misbehaves: on one call
// (most faults), or on one start (ExitAtStart). The zero Fault is Behave.
// docs/testing.md has a table of what a host does about each.
type Fault struct {
	kind faultKind
	n    int
}

type faultKind uint8

const (
	faultBehave faultKind = iota
	faultCrash
	faultHang
	faultNoPong
	faultStop
	faultGarbage
	faultOversize
	faultOtherCall
	faultGap
	faultDupTerminal
	faultExitAtStart
)

var faultNames = [...]string{
	faultBehave: "behave", faultCrash: "crash", faultHang: "hang", faultNoPong: "nopong",
	faultStop: "stop", faultGarbage: "garbage", faultOversize: "oversize",
	faultOtherCall: "othercall", faultGap: "gap", faultDupTerminal: "dupterm",
	faultExitAtStart: "exit",
}

// Behave answers the call as the echo tool does: no fault. It spaces out
// the faults of a script.
func Behave() Fault { return Fault{} }

// CrashAfter sends n chunks of the call ({"i": 1} to {"i": n}), writes a
// line to stderr ("skulktest: crashing on purpose after n frames") and
// exits with status 3. The host delivers the n chunks, ends the call with
// a synthetic failed unreachable whose host.Stderr(err) holds the line,
// and restarts the child (host.ErrChildDied).
func CrashAfter(n int) Fault { return Fault{kind: faultCrash, n: max(n, 0)} }

// Hang sends nothing for the call and ignores its cancellation; the child
// stays healthy. The host ends the call with a synthetic failed timeout
// (its deadline passed, plus CancelGrace, plus 1 s) or a synthetic
// cancelled (Cancel, plus CancelGrace, plus 1 s) and closes its
// connection; the child is not restarted.
func Hang() Fault { return Fault{kind: faultHang} }

// StopPongs stops answering pings from this call on, and sends nothing for
// the call. After HealthTimeout the host ends the call with a synthetic
// failed unreachable and restarts the child (host.ErrUnhealthy).
func StopPongs() Fault { return Fault{kind: faultNoPong} }

// StopSelf sends SIGSTOP to the child itself on this call. The host sees
// what StopPongs shows it (no pong within HealthTimeout: a synthetic failed
// unreachable and a restart), and stops the stopped process.
func StopSelf() Fault { return Fault{kind: faultStop} }

// Garbage writes a packet whose header is not a MessagePack map on the
// call's connection. The host ends the call with a synthetic failed
// invalid_frame and closes the connection; the child goes on.
func Garbage() Fault { return Fault{kind: faultGarbage} }

// Oversize writes a packet prefix declaring a header over max_header. The
// host ends the call with a synthetic failed invalid_frame, without
// reading the header, and closes the connection; the child goes on.
func Oversize() Fault { return Fault{kind: faultOversize} }

// OtherCall writes a chunk of another call id on the call's connection.
// The host ends the call with a synthetic failed invalid_frame and closes
// the connection; the child goes on.
func OtherCall() Fault { return Fault{kind: faultOtherCall} }

// Gap writes the call's first chunk with sequence 2. The host ends the
// call with a synthetic failed invalid_frame and closes the connection;
// the child goes on.
func Gap() Fault { return Fault{kind: faultGap} }

// DuplicateTerminal completes the call with {"first": true}, completes it
// again, and ends it. The first terminal stands (Wait returns its result)
// and the host closes the connection instead of reusing it.
func DuplicateTerminal() Fault { return Fault{kind: faultDupTerminal} }

// ExitAtStart makes the next child that starts exit with status before its
// hello, writing "skulktest: exiting during startup on purpose" to stderr.
// A first start of the pool fails host.Start with an error matching
// host.ErrHandshake; a restart that fails so counts against the restart
// policy and the host tries again after its backoff.
func ExitAtStart(status int) Fault { return Fault{kind: faultExitAtStart, n: status} }

// String names the fault as Child encodes it ("crash:3", "hang").
func (f Fault) String() string {
	name := "fault(" + strconv.Itoa(int(f.kind)) + ")"
	if int(f.kind) < len(faultNames) {
		name = faultNames[f.kind]
	}
	if f.kind == faultCrash || f.kind == faultExitAtStart {
		name += ":" + strconv.Itoa(f.n)
	}
	return name
}

func encodeFaults(faults []Fault) string {
	s := make([]string, len(faults))
	for i, f := range faults {
		s[i] = f.String()
	}
	return strings.Join(s, ",")
}

func decodeFaults(spec string) ([]Fault, error) {
	if spec == "" {
		return nil, nil
	}
	var out []Fault
	for _, item := range strings.Split(spec, ",") {
		name, arg, _ := strings.Cut(item, ":")
		f := Fault{kind: 255}
		for k, n := range faultNames {
			if n == name {
				f.kind = faultKind(k)
			}
		}
		if f.kind == 255 {
			return nil, fmt.Errorf("skulktest: %s: unknown fault", envFaults)
		}
		if arg != "" {
			n, err := strconv.Atoi(arg)
			if err != nil {
				return nil, fmt.Errorf("skulktest: %s: fault argument is not a number", envFaults)
			}
			f.n = n
		}
		out = append(out, f)
	}
	return out, nil
}

// ScriptTool is the one tool of Child's scripted child. A call that takes
// no fault echoes every caller chunk back as a chunk, completes with
// {"chunks": n} once the caller completes, and fails with timeout when
// the call's deadline passes first.
const ScriptTool = "echo"

// Child returns a host.Config that runs the test binary as a scripted
// child whose calls, counted across all its restarts, misbehave as
// faults say: the first call takes faults[0], the second faults[1], and
// so on; calls after the last fault behave. An ExitAtStart is taken by the
// next child that starts instead (the calls before it skip over it): so
// Child(t, CrashAfter(1), ExitAtStart(4)) crashes on the first call, then
// the restarted child exits during its start, and the next one works.
//
// The child offers one tool, ScriptTool. The Config has quick supervision
// for tests (HealthInterval 100 ms, HealthTimeout 2 s, CancelGrace 200 ms,
// KillGrace 500 ms, restart backoff 10 to 50 ms, and in a test binary
// built with -race GORACE=atexit_sleep_ms=0, which spares every exit the
// race detector's one-second pause); change any field before
// passing it to StartHost or host.Start. The directory where the children
// keep count is removed when the test ends. The package's TestMain must
// call Main or ChildMain.
func Child(t testing.TB, faults ...Fault) host.Config {
	t.Helper()
	needMain(t, "Child")
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("skulktest: Child: %v", err)
	}
	state, err := os.MkdirTemp("", "sks")
	if err != nil {
		t.Fatalf("skulktest: Child: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	return host.Config{
		Command:        exe,
		Args:           []string{"-test.run=^$"},
		ExtraEnv:       withQuickExit(nil, []string{envRole + "=" + roleScript, envFaults + "=" + encodeFaults(faults), envState + "=" + state}),
		HealthInterval: 100 * time.Millisecond,
		HealthTimeout:  2 * time.Second,
		CancelGrace:    200 * time.Millisecond,
		KillGrace:      500 * time.Millisecond,
		Restart:        host.RestartPolicy{BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
	}
}

// script is the scripted child's state.
type script struct {
	faults  []Fault
	state   string      // where faults are claimed: a file per claimed index
	silent  atomic.Bool // StopPongs happened
	running atomic.Int64
}

// next returns the index of the first fault no child has claimed.
func (s *script) next() int {
	for i := range s.faults {
		if _, err := os.Lstat(filepath.Join(s.state, strconv.Itoa(i))); errors.Is(err, fs.ErrNotExist) {
			return i
		}
	}
	return len(s.faults)
}

// claim takes the next fault if want accepts it, across every incarnation
// of the child (a file created with O_EXCL per index).
func (s *script) claim(want func(Fault) bool) (Fault, bool) {
	for {
		i := s.next()
		if i >= len(s.faults) || !want(s.faults[i]) {
			return Fault{}, false
		}
		f, err := os.OpenFile(filepath.Join(s.state, strconv.Itoa(i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err == nil {
			f.Close()
			return s.faults[i], true
		}
		if !errors.Is(err, fs.ErrExist) {
			return Fault{}, false
		}
	}
}

func isStart(f Fault) bool { return f.kind == faultExitAtStart }

// scripted is the scripted child's main: a provider written at the wire
// level, so that it can break every rule.
func scripted(spec, state string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "skulktest script: %v\n", err)
		return 2
	}
	faults, err := decodeFaults(spec)
	if err != nil {
		return fail(err)
	}
	s := &script{faults: faults, state: state}
	if f, ok := s.claim(isStart); ok {
		fmt.Fprintln(os.Stderr, "skulktest: exiting during startup on purpose")
		return f.n
	}
	cf, lf := os.NewFile(3, "control"), os.NewFile(4, "streams")
	ctrl, err := net.FileConn(cf)
	cf.Close()
	if err != nil {
		return fail(err)
	}
	ln, err := net.FileListener(lf)
	lf.Close()
	if err != nil {
		return fail(err)
	}
	cw := func(p wire.Packet) error { return packetio.WritePacket(ctrl, p, wire.Limits{}) }
	cr := packetio.NewReader(ctrl, wire.Limits{})
	err = cw(&wire.Hello{
		Protocol: []int64{wire.ProtocolVersion}, SDK: "skulktest-script/1", PID: int64(os.Getpid()),
		MaxStreams: 16, Limits: packetio.DefaultLimits(),
		Tools: []wire.Tool{{ID: ScriptTool, Description: "Echoes caller chunks; misbehaves as the test's faults say."}},
	})
	if err != nil {
		return fail(err)
	}
	if p, err := cr.ReadPacket(); err != nil || packetio.TypeOf(p) != protocol.TypeStartup {
		return fail(errors.New("no startup"))
	}
	var wg sync.WaitGroup
	wg.Go(func() { // stopped by ln.Close; the process exits without waiting for connections
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serveConn(nc) // stopped by the host closing the connection, or by the exit
		}
	})
	defer func() { ln.Close(); wg.Wait() }()
	for {
		p, err := cr.ReadPacket()
		if err != nil {
			return 0 // the host is gone
		}
		switch p := p.(type) {
		case *wire.Ping:
			if !s.silent.Load() {
				cw(&wire.Pong{Nonce: p.Nonce, Streams: s.running.Load()})
			}
		case *wire.Drain:
			ln.Close()
			cw(&wire.Bye{Reason: "drained"})
			return 0
		}
	}
}

// scriptConn is one stream connection of the scripted child; its
// goroutine reads and writes it.
type scriptConn struct {
	nc net.Conn
	r  *packetio.Reader
}

func (c *scriptConn) write(p wire.Packet) {
	b, err := packetio.Encode(p, wire.Limits{})
	if err == nil {
		c.nc.Write(b)
	}
}

func (c *scriptConn) frame(f frame.Frame, err error) {
	if err == nil {
		c.write(&wire.Frame{Frame: f})
	}
}

// idle reads until the host closes the connection.
func (c *scriptConn) idle() {
	c.nc.SetReadDeadline(time.Time{})
	for {
		if _, err := c.r.ReadPacket(); err != nil {
			return
		}
	}
}

func (s *script) serveConn(nc net.Conn) {
	defer nc.Close()
	c := &scriptConn{nc: nc, r: packetio.NewReader(nc, wire.Limits{})}
	for {
		p, err := c.r.ReadPacket()
		if err != nil {
			return
		}
		inv, ok := p.(*wire.Invoke)
		if !ok {
			return
		}
		s.running.Add(1)
		more := s.call(c, inv)
		s.running.Add(-1)
		if !more {
			return
		}
	}
}

// call runs one call; it reports whether the connection may serve another.
func (s *script) call(c *scriptConn, inv *wire.Invoke) bool {
	id := inv.CallID
	chunk := func(seq uint64, i int) {
		c.frame(frame.NewChunk(id, frame.ProviderToCaller, seq, frame.MustPayload(map[string]any{"i": i}), nil))
	}
	f, _ := s.claim(func(f Fault) bool { return !isStart(f) })
	switch f.kind {
	case faultBehave:
		return s.echo(c, inv)
	case faultCrash:
		for i := 1; i <= f.n; i++ {
			chunk(uint64(i), i)
		}
		fmt.Fprintf(os.Stderr, "skulktest: crashing on purpose after %d frames\n", f.n)
		os.Exit(3)
	case faultHang:
	case faultNoPong:
		s.silent.Store(true)
	case faultStop:
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	case faultGarbage:
		c.nc.Write([]byte("\x00\x00\x00\x05\x00\x00\x00\x00hello"))
	case faultOversize:
		var b [8]byte
		binary.BigEndian.PutUint32(b[:], 0x7fffffff)
		c.nc.Write(b[:])
	case faultOtherCall:
		c.frame(frame.NewChunk(id+"-other", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"i": 1}), nil))
	case faultGap:
		chunk(2, 1)
	case faultDupTerminal:
		c.frame(frame.NewCompleted(id, frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"first": true})))
		c.frame(frame.NewCompleted(id, frame.ProviderToCaller, 2, nil))
		c.write(&wire.End{CallID: id})
	}
	c.idle()
	return false
}

// echo is the well-behaved call: caller chunks back as chunks, completed
// {"chunks": n} on the caller's completed, cancelled on its cancelled,
// failed timeout at the call's deadline.
func (s *script) echo(c *scriptConn, inv *wire.Invoke) bool {
	id := inv.CallID
	if inv.TimeoutMS > 0 {
		c.nc.SetReadDeadline(time.Now().Add(time.Duration(inv.TimeoutMS) * time.Millisecond))
		defer c.nc.SetReadDeadline(time.Time{})
	}
	seq := uint64(1)
	for {
		p, err := c.r.ReadPacket()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.frame(frame.NewFailed(id, frame.ProviderToCaller, seq, frame.CodeTimeout, "deadline passed"))
			c.write(&wire.End{CallID: id})
			return false
		}
		if err != nil {
			return false
		}
		f, ok := p.(*wire.Frame)
		if !ok {
			return false
		}
		switch f.Kind {
		case frame.KindChunk:
			c.frame(frame.NewChunk(id, frame.ProviderToCaller, seq, f.Payload, nil))
			seq++
		case frame.KindCompleted:
			c.frame(frame.NewCompleted(id, frame.ProviderToCaller, seq, frame.MustPayload(map[string]any{"chunks": seq - 1})))
			c.write(&wire.End{CallID: id})
			return true
		case frame.KindCancelled, frame.KindFailed:
			c.frame(frame.NewCancelled(id, frame.ProviderToCaller, seq, "cancelled by the caller"))
			c.write(&wire.End{CallID: id})
			return true
		}
	}
}
