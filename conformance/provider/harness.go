package provider

// The harness plays the host: it starts the provider binary as docs/protocol.md
// §1 says, reads and writes packets (§2) with its own strict decoder, and
// checks every provider frame it reads against §3/§4. It is written from the
// contract only and shares no code with the implementation under test.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Time bounds. The machine may be a loaded 2-core box running the suite
// under -race, so every bound leaves room for scheduling noise; none is so
// loose that the behaviour it checks could pass without happening.
const (
	// wait bounds a read or wait that must succeed: a failure, not a hang.
	wait = 10 * time.Second
	// atOnce bounds what the contract says happens at once (a cancel acts,
	// a remembered cancel ends an invoke, an idle child says bye): well
	// above scheduling noise, well below the seconds the handlers involved
	// would otherwise run.
	atOnce = 2 * time.Second
	// slack is added to a bound the contract states in numbers (exit
	// within 1 s, bye within grace_ms + cancel_grace_ms): the 20 ms the Go
	// SDK's drain may add for terminals (docs/architecture.md, "Drain past
	// its grace"), plus the time from
	// the child's write to our read, and timers that fire late, on a
	// loaded machine: under -race at load 7 on 2 cores a bye due at the
	// limit was read 100 ms after it.
	slack = 300 * time.Millisecond
	// poll is the interval of waitCounters: pong is the only view a host
	// has of a handler's state, so polling it is the wait.
	poll = 10 * time.Millisecond
)

// Defaults of docs/protocol.md §2.
const (
	defaultMaxHeader     = 65536
	defaultMaxAttachment = 16777216
)

// Hard ceilings of docs/protocol.md §2 (Limits). The harness refuses
// lengths above them before allocating; tests that agree smaller limits
// check those themselves.
const (
	ceilingHeader     = 1 << 20
	ceilingAttachment = 1 << 28
)

// Errors the harness returns; tests match them with errors.Is.
var (
	// errReadTimeout: nothing (or not a whole packet) arrived in time.
	errReadTimeout = errors.New("conformance: read timed out")
	// errBadLengths: the child wrote a prefix out of bounds.
	errBadLengths = errors.New("conformance: child wrote a packet length out of bounds")
	// errBadHeader: the child wrote a header that is not exactly one
	// MessagePack map with string keys.
	errBadHeader = errors.New("conformance: child wrote a malformed header")
)

// isClosed reports whether err from a read says the peer closed the
// connection (EOF, or a reset, which §7 counts as EOF).
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// ---------- packets ----------

// packet is one packet read from the child.
type packet struct {
	typ       string         // the header's t ("" if absent or not a string)
	header    map[string]any // the decoded header
	att       []byte         // the attachment
	rawHeader []byte         // the header's bytes as read
}

// String renders the packet for test messages.
func (p *packet) String() string {
	return fmt.Sprintf("%s %v (attachment %d bytes)", p.typ, p.header, len(p.att))
}

// str returns header key k as a string, "" when absent or not a string.
func (p *packet) str(k string) string {
	s, _ := p.header[k].(string)
	return s
}

// int returns header key k as an integer (see asInt).
func (p *packet) int(k string) int64 { return asInt(p.header[k]) }

// errCode returns the frame's error.code, "" when it has none.
func (p *packet) errCode() string {
	e, _ := p.header["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// errMessage returns the frame's error.message, "" when it has none.
func (p *packet) errMessage() string {
	e, _ := p.header["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

// outcome renders a packet as the tests compare it: "end", or a frame's
// kind, with the error code appended for failed ("failed/timeout"). A
// cancelled frame's error is optional and, when present, must have code
// cancelled (checkProviderFrame checks that), so it is not rendered:
// "cancelled" reads the same with or without it.
func (p *packet) outcome() string {
	if p.typ != "frame" {
		return p.typ
	}
	k := p.str("kind")
	if k == "failed" {
		k += "/" + p.errCode()
	}
	return k
}

// decodeHeader decodes b, which must be exactly one MessagePack map with
// string keys and nothing after it (§2).
func decodeHeader(b []byte) (map[string]any, error) {
	r := bytes.NewReader(b)
	d := msgpack.NewDecoder(r)
	d.UseLooseInterfaceDecoding(true)
	c, err := d.PeekCode()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadHeader, err)
	}
	if !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 {
		return nil, fmt.Errorf("%w: not a map (code %#x)", errBadHeader, c)
	}
	n, err := d.DecodeMapLen()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadHeader, err)
	}
	if n > len(b) { // every entry takes at least two bytes
		return nil, fmt.Errorf("%w: map of %d entries in %d bytes", errBadHeader, n, len(b))
	}
	m := make(map[string]any, n)
	for range n {
		kc, err := d.PeekCode()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errBadHeader, err)
		}
		if !msgpcode.IsFixedString(kc) && kc != msgpcode.Str8 && kc != msgpcode.Str16 && kc != msgpcode.Str32 {
			return nil, fmt.Errorf("%w: key of code %#x", errBadHeader, kc)
		}
		k, err := d.DecodeString()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errBadHeader, err)
		}
		v, err := d.DecodeInterfaceLoose()
		if err != nil {
			return nil, fmt.Errorf("%w: value of %q: %w", errBadHeader, k, err)
		}
		m[k] = v
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the map", errBadHeader, r.Len())
	}
	return m, nil
}

// mustEncode encodes v as MessagePack with sorted map keys and the smallest
// integer encodings. It panics only when v cannot be encoded, which is a
// bug in the test, never peer input.
func mustEncode(v any) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	e.SetSortMapKeys(true)
	e.UseCompactInts(true)
	if err := e.Encode(v); err != nil {
		panic(fmt.Sprintf("conformance: cannot encode %T: %v", v, err))
	}
	return buf.Bytes()
}

// mstr is s encoded as a MessagePack string, for hand-built headers.
func mstr(s string) []byte { return mustEncode(s) }

// prefix is the 8-byte packet prefix for header length h and attachment
// length a.
func prefix(h, a uint32) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b, h)
	binary.BigEndian.PutUint32(b[4:], a)
	return b
}

// rawPacket is a packet with the given header bytes and attachment.
func rawPacket(header, att []byte) []byte {
	out := append(prefix(uint32(len(header)), uint32(len(att))), header...)
	return append(out, att...)
}

// encodePacket is a packet whose header is h encoded.
func encodePacket(h map[string]any, att []byte) []byte { return rawPacket(mustEncode(h), att) }

// rawMap builds a MessagePack fixmap from already encoded keys and values,
// in the order given (kv alternates key, value), so a test can write
// duplicate keys, odd key types and any key order. It panics on more than
// 15 pairs (a fixmap's limit), a bug in the test.
func rawMap(kv ...[]byte) []byte {
	if len(kv)%2 != 0 || len(kv)/2 > 15 {
		panic("conformance: rawMap takes at most 15 key/value pairs")
	}
	b := []byte{0x80 | byte(len(kv)/2)}
	for _, x := range kv {
		b = append(b, x...)
	}
	return b
}

// removed, given as a value to with, deletes the key.
var removed = struct{ removed bool }{true}

// with sets keys of h (kv alternates key, value; the value removed deletes
// the key) and returns h.
func with(h map[string]any, kv ...any) map[string]any {
	for i := 0; i+1 < len(kv); i += 2 {
		k := kv[i].(string)
		if kv[i+1] == removed {
			delete(h, k)
			continue
		}
		h[k] = kv[i+1]
	}
	return h
}

// padTo returns h encoded with an unknown key "zpad" (unknown keys are
// ignored, §2) sized so that the header is exactly size bytes.
func padTo(t testing.TB, h map[string]any, size int) []byte {
	t.Helper()
	pad := size - len(mustEncode(with(h, "zpad", ""))) - 4
	for range 10 {
		if pad < 0 {
			break
		}
		b := mustEncode(with(h, "zpad", strings.Repeat("p", pad)))
		if len(b) == size {
			return b
		}
		pad += size - len(b)
	}
	t.Fatalf("cannot pad a header to %d bytes", size)
	return nil
}

// asInt returns an integer header value as int64; math.MinInt64 stands for
// a value that is not an integer, so no check can mistake it for a count.
func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case uint64:
		return int64(x)
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	}
	return -1 << 63
}

// ---------- connections ----------

// conn is the host's end of one connection, control or stream. Writes are
// serialized, so a second goroutine may write (a backpressure writer) while
// the test reads; reads must come from one goroutine at a time. send and
// sendAtt end the test on error and are for the test's goroutine only.
type conn struct {
	t    testing.TB
	nc   net.Conn
	name string
	mu   sync.Mutex // serializes writes and their deadlines
}

// writeWithin writes b, failing with a timeout if the write makes no
// progress for d (the socket stays full: backpressure).
func (c *conn) writeWithin(b []byte, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(b) > 0 {
		if err := c.nc.SetWriteDeadline(time.Now().Add(d)); err != nil {
			return err
		}
		n, err := c.nc.Write(b)
		b = b[n:]
		if err != nil {
			var ne net.Error
			if n > 0 && errors.As(err, &ne) && ne.Timeout() {
				continue // some progress: only a stall counts
			}
			return err
		}
	}
	return nil
}

// writeRaw writes b, bounded by wait.
func (c *conn) writeRaw(b []byte) error { return c.writeWithin(b, wait) }

// send writes a packet with header h and no attachment.
func (c *conn) send(h map[string]any) {
	c.t.Helper()
	c.sendAtt(h, nil)
}

// sendAtt writes a packet with header h and attachment att.
func (c *conn) sendAtt(h map[string]any, att []byte) {
	c.t.Helper()
	if err := c.writeRaw(encodePacket(h, att)); err != nil {
		c.t.Fatalf("%s: write %v: %v", c.name, h["t"], err)
	}
}

// sendRaw writes b.
func (c *conn) sendRaw(b []byte) {
	c.t.Helper()
	if err := c.writeRaw(b); err != nil {
		c.t.Fatalf("%s: write: %v", c.name, err)
	}
}

// read reads one packet, waiting at most d for it to begin. It returns
// errReadTimeout when none began, an error for which isClosed is true when
// the child closed the connection, errBadLengths or errBadHeader when the
// child broke §2.
func (c *conn) read(d time.Duration) (*packet, error) {
	if err := c.nc.SetReadDeadline(time.Now().Add(d)); err != nil {
		return nil, err
	}
	var pre [8]byte
	if _, err := io.ReadFull(c.nc, pre[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, errReadTimeout
		}
		return nil, err
	}
	h := binary.BigEndian.Uint32(pre[0:])
	a := binary.BigEndian.Uint32(pre[4:])
	if h == 0 || h > ceilingHeader || a > ceilingAttachment {
		return nil, fmt.Errorf("%w: H=%d A=%d", errBadLengths, h, a)
	}
	// A packet that has begun must follow promptly.
	if err := c.nc.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return nil, err
	}
	body := make([]byte, int(h)+int(a))
	if _, err := io.ReadFull(c.nc, body); err != nil {
		return nil, fmt.Errorf("%s: packet cut short: %w", c.name, err)
	}
	m, err := decodeHeader(body[:h])
	if err != nil {
		return nil, err
	}
	t, _ := m["t"].(string)
	return &packet{typ: t, header: m, att: body[h:], rawHeader: body[:h]}, nil
}

// must reads one packet within d or ends the test.
func (c *conn) must(d time.Duration) *packet {
	c.t.Helper()
	p, err := c.read(d)
	if err != nil {
		c.t.Fatalf("%s: expected a packet, got %v", c.name, err)
	}
	return p
}

// expectClosed returns nil if the child closes the connection within d
// without writing anything first.
func (c *conn) expectClosed(d time.Duration) error { return c.expectClosedAfter("", d) }

// expectClosedAfter is expectClosed for a connection whose call id may
// have written frames, and end, before the child read what closes the
// connection: those are read (at most maxFrames) and checked as any call's
// are, then the connection must close. With id "", nothing may come first.
func (c *conn) expectClosedAfter(id string, d time.Duration) error {
	const maxFrames = 64
	next, terminal := uint64(1), false
	for range maxFrames {
		p, err := c.read(d)
		switch {
		case err == nil && id != "" && (p.typ == "frame" || p.typ == "end") && p.str("call_id") == id:
			if p.typ == "frame" {
				if probs := checkProviderFrame(p, id, &next, &terminal); len(probs) > 0 {
					return fmt.Errorf("%s: %v: %s", c.name, p, strings.Join(probs, "; "))
				}
			}
			continue
		case err == nil:
			return fmt.Errorf("%s: expected a close, got %v", c.name, p)
		case errors.Is(err, errReadTimeout):
			return fmt.Errorf("%s: expected a close, still open after %v", c.name, d)
		case isClosed(err):
			return nil
		}
		return fmt.Errorf("%s: expected a clean close, got %w", c.name, err)
	}
	return fmt.Errorf("%s: expected a close, got %d packets of call %s", c.name, maxFrames, id)
}

// expectNothing returns nil if nothing arrives for d and the connection
// stays open.
func (c *conn) expectNothing(d time.Duration) error {
	p, err := c.read(d)
	switch {
	case errors.Is(err, errReadTimeout):
		return nil
	case err == nil:
		return fmt.Errorf("%s: unexpected packet %v", c.name, p)
	}
	return fmt.Errorf("%s: unexpected %w", c.name, err)
}

// setSendBuffer sets SO_SNDBUF on the host's end.
func (c *conn) setSendBuffer(n int) error {
	uc, ok := c.nc.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("%s: not a Unix connection", c.name)
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, n)
	}); err != nil {
		return err
	}
	return serr
}

// close closes the connection; closing twice is harmless.
func (c *conn) close() { c.nc.Close() }

// timedPacket is one result of readAsync: a packet or the error that ended
// the reading, and when it was read.
type timedPacket struct {
	p   *packet
	err error
	at  time.Time
}

// readAsync reads s on its own goroutine until end, an error or within has
// passed, sending each packet (and finally the error, if any) on the
// returned channel, which it then closes. The channel's buffer holds more
// packets than any test reads this way. The goroutine is stopped by
// closing s, which a cleanup does before it waits for the goroutine.
func readAsync(t testing.TB, s *conn, within time.Duration) <-chan timedPacket {
	ch := make(chan timedPacket, 64)
	done := make(chan struct{})
	go func() { // stopped by the deadline, end, or closing s
		defer close(done)
		defer close(ch)
		deadline := time.Now().Add(within)
		for {
			p, err := s.read(time.Until(deadline))
			select {
			case ch <- timedPacket{p, err, time.Now()}:
			default:
				return // nobody reads this many: give up
			}
			if err != nil || p.typ == "end" {
				return
			}
		}
	}()
	t.Cleanup(func() {
		s.close()
		<-done
	})
	return ch
}

// ---------- the child process ----------

// syncBuffer collects the child's output; safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// child is one provider process started by a test. Its methods are for
// the goroutine of the test that started it, except dial and tryDial, which
// take the (sub)test that will use the connection.
type child struct {
	t      testing.TB
	dir    string // the fresh 0700 directory holding streams.sock
	cmd    *exec.Cmd
	ctl    *conn
	output *syncBuffer // stdout and stderr
	hello  *packet     // set by start
	nonce  uint64      // the last nonce counters used

	exited  chan struct{} // closed once the process has been waited for
	exitErr error         // cmd.Wait's result, set before exited is closed
}

// processOptions says how startProcess starts the child.
type processOptions struct {
	args []string
	// env overrides the SKULK_* environment; an empty value removes the
	// variable.
	env map[string]string
}

// childID is the SKULK_CHILD_ID and startup.child_id the harness gives.
const childID = "conformance"

// startProcess starts the provider binary as §1 says: fd 3 the child's end
// of a socketpair, fd 4 a listening socket at <dir>/streams.sock in a fresh
// 0700 directory, stdin /dev/null, the SKULK_* environment. The child runs
// in its own process group; a cleanup kills that group, waits for the
// process, and removes the directory.
func startProcess(t testing.TB, o processOptions) *child {
	t.Helper()
	// Not t.TempDir: a Unix socket path must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "skulk-conf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	hostEnd := os.NewFile(uintptr(fds[0]), "control-host")
	childEnd := os.NewFile(uintptr(fds[1]), "control-child")
	defer childEnd.Close() // the child has its copy once started
	ctlConn, err := net.FileConn(hostEnd)
	hostEnd.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctlConn.Close() })

	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "streams.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false) // the directory's removal takes the file
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer lnFile.Close() // only the child holds the listener

	env := map[string]string{
		"PATH":             os.Getenv("PATH"),
		"SKULK_PROTOCOL":   "1",
		"SKULK_CONTROL_FD": "3",
		"SKULK_STREAMS_FD": "4",
		"SKULK_CHILD_ID":   childID,
	}
	for k, v := range o.env {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	cmd := exec.Command(childBin, o.args...)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.ExtraFiles = []*os.File{childEnd, lnFile} // fds 3 and 4
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out // stdin stays nil: /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second // bounds Wait should a grandchild keep the output open
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{
		t: t, dir: dir, cmd: cmd, output: out, exited: make(chan struct{}),
		ctl: &conn{t: t, nc: ctlConn, name: "control"},
	}
	go func() { // stopped by the process's exit, which the cleanup forces
		c.exitErr = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		// The whole group, so nothing the child started outlives it.
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("killing the child's process group: %v", err)
		}
		select {
		case <-c.exited:
		case <-time.After(wait):
			t.Errorf("child %d not gone %v after SIGKILL", cmd.Process.Pid, wait)
		}
		if t.Failed() {
			t.Logf("child output:\n%s", out.String())
		}
	})
	return c
}

// setup says how start runs the handshake.
type setup struct {
	args []string
	// cancelGraceMS is startup.cancel_grace_ms; nil leaves the key out.
	cancelGraceMS any
	// limits is startup.limits; nil means the defaults of §2.
	limits map[string]any
	// calls is startup.calls (§8); nil leaves the key out.
	calls map[string]any
}

// start starts the child, reads its hello and answers startup (§5 of
// docs/protocol.md).
func start(t testing.TB, s setup) *child {
	t.Helper()
	c := startProcess(t, processOptions{args: s.args})
	h := c.ctl.must(wait)
	if h.typ != "hello" {
		t.Fatalf("first control packet %v, want hello", h)
	}
	c.hello = h
	lim := s.limits
	if lim == nil {
		lim = map[string]any{"max_header": defaultMaxHeader, "max_attachment": defaultMaxAttachment}
	}
	st := map[string]any{"t": "startup", "protocol": 1, "child_id": childID, "limits": lim,
		"health_interval_ms": 1000, "ingress_queue": 8}
	if s.cancelGraceMS != nil {
		st["cancel_grace_ms"] = s.cancelGraceMS
	}
	if s.calls != nil {
		st["calls"] = s.calls
	}
	c.ctl.send(st)
	return c
}

// outputText returns what the child wrote to stdout and stderr so far.
func (c *child) outputText() string { return c.output.String() }

// waitExit waits up to d for the process to exit. It returns the exit
// status (-1 when a signal ended it) and whether it exited.
func (c *child) waitExit(d time.Duration) (int, bool) {
	select {
	case <-c.exited:
	case <-time.After(d):
		return 0, false
	}
	var ee *exec.ExitError
	switch {
	case c.exitErr == nil:
		return 0, true
	case errors.As(c.exitErr, &ee):
		return ee.ExitCode(), true
	}
	return -1, true
}

// dial opens a stream connection for t (the host dials, §1) or ends t.
func (c *child) dial(t testing.TB) *conn {
	t.Helper()
	s, err := c.tryDial(t)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return s
}

// tryDial opens a stream connection for t; a cleanup of t closes it.
func (c *child) tryDial(t testing.TB) (*conn, error) {
	nc, err := net.DialTimeout("unix", filepath.Join(c.dir, "streams.sock"), wait)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { nc.Close() })
	return &conn{t: t, nc: nc, name: "stream"}, nil
}

// ping sends ping with nonce and returns the pong, ending the test if the
// next control packet is anything else or echoes another nonce.
func (c *child) ping(nonce uint64) *packet {
	c.t.Helper()
	c.ctl.send(map[string]any{"t": "ping", "nonce": nonce})
	p := c.ctl.must(wait)
	if p.typ != "pong" || uint64(p.int("nonce")) != nonce {
		c.t.Fatalf("ping %d answered by %v", nonce, p)
	}
	return p
}

// counters pings and returns pong.streams and pong.stuck.
func (c *child) counters() (streams, stuck int64) {
	c.t.Helper()
	c.nonce++
	p := c.ping(c.nonce)
	return p.int("streams"), p.int("stuck")
}

// waitCounters pings until pong reports streams and stuck (a negative
// value matches anything) or within has passed; the error then says what
// the last pong said.
func (c *child) waitCounters(streams, stuck int64, within time.Duration) error {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, sk := c.counters()
		if (streams < 0 || st == streams) && (stuck < 0 || sk == stuck) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pong streams=%d stuck=%d after %v, want %d, %d", st, sk, within, streams, stuck)
		}
		time.Sleep(poll)
	}
}

// mustCounters is waitCounters that ends the test on failure.
func (c *child) mustCounters(streams, stuck int64, within time.Duration) {
	c.t.Helper()
	if err := c.waitCounters(streams, stuck, within); err != nil {
		c.t.Fatal(err)
	}
}

// lastLine returns the last line of s, without its newline.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// endsWithReason reports whether out ends with a non-empty line and a
// newline: the one-line reason of docs/protocol.md §5 item 3.
func endsWithReason(out string) bool {
	return strings.HasSuffix(out, "\n") && strings.TrimSpace(lastLine(out)) != ""
}

// ---------- calls ----------

// invoke is a valid invoke packet (§3) with no timeout.
func invoke(id, tool string, args map[string]any) map[string]any {
	if args == nil {
		args = map[string]any{}
	}
	return map[string]any{"t": "invoke", "call_id": id, "tool_id": tool, "arguments": args, "timeout_ms": 0}
}

// callerFrame is a caller_to_provider frame with no payload.
func callerFrame(id string, seq uint64, kind string) map[string]any {
	return map[string]any{"t": "frame", "call_id": id, "direction": "caller_to_provider", "sequence": seq, "kind": kind}
}

// callerChunk is a caller chunk carrying payload.
func callerChunk(id string, seq uint64, payload map[string]any) map[string]any {
	return with(callerFrame(id, seq, "chunk"), "payload", payload)
}

// inlineMedia is an inline media map of media_type mt.
func inlineMedia(mt string) map[string]any { return map[string]any{"kind": "inline", "media_type": mt} }

// plainRequest is invoke, started and completed in one buffer, as a host
// writes a request whose whole input it has (its child need not read in
// the quiet interval, docs/protocol.md §6 item 6).
func plainRequest(inv map[string]any) []byte {
	id := inv["call_id"].(string)
	b := encodePacket(inv, nil)
	b = append(b, encodePacket(callerFrame(id, 0, "started"), nil)...)
	return append(b, encodePacket(callerFrame(id, 1, "completed"), nil)...)
}

// callResult is what the child wrote for one call.
type callResult struct {
	frames   []*packet // everything before end, in order
	end      *packet   // nil if the reading stopped before end
	problems []string  // rules of §3/§4 the packets broke
}

// terminal returns the provider terminal, nil if none was read.
func (r *callResult) terminal() *packet {
	for _, f := range r.frames {
		switch f.str("kind") {
		case "completed", "failed", "cancelled":
			return f
		}
	}
	return nil
}

// outcomes renders the call as "chunk,chunk,completed,end" (see
// packet.outcome).
func (r *callResult) outcomes() string {
	var ks []string
	for _, f := range r.frames {
		ks = append(ks, f.outcome())
	}
	if r.end != nil {
		ks = append(ks, "end")
	}
	return strings.Join(ks, ",")
}

// readCall reads the provider's packets for callID on s until end, checking
// each against §3/§4 as it goes (the problems go into the result). The
// error is why it stopped before end (a close, a timeout, a malformed
// packet); within bounds the whole call.
func readCall(s *conn, callID string, within time.Duration) (*callResult, error) {
	r := &callResult{}
	deadline := time.Now().Add(within)
	next := uint64(1)
	terminal := false
	for {
		p, err := s.read(time.Until(deadline))
		if err != nil {
			return r, err
		}
		if p.typ != "end" {
			r.frames = append(r.frames, p)
		}
		switch p.typ {
		case "frame":
			r.problems = append(r.problems, checkProviderFrame(p, callID, &next, &terminal)...)
		case "end":
			r.end = p
			if cid := p.str("call_id"); cid != callID {
				r.problems = append(r.problems, fmt.Sprintf("end has call_id %q, want %q", cid, callID))
			}
			if !terminal {
				r.problems = append(r.problems, "end before the provider terminal")
			}
			if len(p.att) != 0 {
				r.problems = append(r.problems, "attachment on end")
			}
			return r, nil
		default:
			r.problems = append(r.problems, fmt.Sprintf("packet %q on a stream connection", p.typ))
		}
	}
}

// checkProviderFrame checks one provider frame against §3/§4: call id,
// direction, the sequence fence (the provider's first frame is 1, §4),
// nothing after the terminal, synthetic never true, the lifecycle shape,
// the error code rules, error.message ≤ 2,048 characters, and attachments
// only on inline media (§2), whose map has no data key.
func checkProviderFrame(p *packet, callID string, next *uint64, terminal *bool) []string {
	var probs []string
	h := p.header
	if cid := p.str("call_id"); cid != callID {
		probs = append(probs, fmt.Sprintf("frame call_id %q, want %q", cid, callID))
	}
	if d := p.str("direction"); d != "provider_to_caller" {
		probs = append(probs, fmt.Sprintf("frame direction %q", d))
	}
	if *terminal {
		probs = append(probs, fmt.Sprintf("frame after the provider terminal: %v", h))
	}
	if seq, ok := h["sequence"]; !ok {
		probs = append(probs, "frame without sequence")
	} else if uint64(asInt(seq)) != *next {
		probs = append(probs, fmt.Sprintf("sequence %v, want %d", seq, *next))
	}
	*next++
	if s, ok := h["synthetic"]; ok && s != nil && s != false {
		probs = append(probs, "synthetic on the wire")
	}
	hasP, hasM, hasE := h["payload"] != nil, h["media"] != nil, h["error"] != nil
	if hasP {
		if _, ok := h["payload"].(map[string]any); !ok {
			probs = append(probs, "payload is not a map")
		}
	}
	switch kind := p.str("kind"); kind {
	case "started":
		probs = append(probs, "provider started on the wire (the host owns it)")
	case "chunk":
		if !hasP && !hasM {
			probs = append(probs, "chunk without payload or media")
		}
		if hasE {
			probs = append(probs, "chunk with error")
		}
	case "completed":
		if hasM || hasE {
			probs = append(probs, "completed with media or error")
		}
		*terminal = true
	case "failed":
		if hasP || hasM || !hasE || p.errCode() == "cancelled" {
			probs = append(probs, fmt.Sprintf("failed of a bad shape: %v", h))
		}
		*terminal = true
	case "cancelled":
		if hasP || hasM || (hasE && p.errCode() != "cancelled") {
			probs = append(probs, fmt.Sprintf("cancelled of a bad shape: %v", h))
		}
		*terminal = true
	default:
		probs = append(probs, fmt.Sprintf("unknown kind %q", kind))
	}
	if hasE {
		switch code := p.errCode(); code {
		case "provider_error", "transport_error", "unreachable", "cancelled", "timeout", "invalid_frame":
		default:
			probs = append(probs, fmt.Sprintf("error code %q", code))
		}
		if n := len([]rune(p.errMessage())); n > 2048 {
			probs = append(probs, fmt.Sprintf("error.message of %d characters", n))
		}
	}
	m, _ := h["media"].(map[string]any)
	if len(p.att) > 0 && (m == nil || m["kind"] != "inline") {
		probs = append(probs, "attachment on a frame without inline media")
	}
	if _, has := m["data"]; has {
		probs = append(probs, "media with a data key")
	}
	return probs
}

// expectCall reads the call callID on s to its end and reports, as test
// errors, a read error, every rule the child's packets broke, and outcomes
// other than want (see callResult.outcomes); want "" accepts any. It
// returns what it read.
func expectCall(t testing.TB, s *conn, callID, want string) *callResult {
	t.Helper()
	r, err := readCall(s, callID, wait)
	for _, p := range r.problems {
		t.Errorf("call %s: %s", callID, p)
	}
	if err != nil {
		t.Errorf("call %s: read %q, then %v", callID, r.outcomes(), err)
	} else if want != "" && r.outcomes() != want {
		t.Errorf("call %s: %q, want %q", callID, r.outcomes(), want)
	}
	return r
}

// runCall runs a whole call on s: invoke, caller started, a chunk per
// payload, caller completed; then reads it as expectCall does.
func runCall(t testing.TB, s *conn, id, tool string, args map[string]any, chunks []map[string]any, want string) *callResult {
	t.Helper()
	s.send(invoke(id, tool, args))
	s.send(callerFrame(id, 0, "started"))
	for i, ch := range chunks {
		s.send(callerChunk(id, uint64(i+1), ch))
	}
	s.send(callerFrame(id, uint64(len(chunks)+1), "completed"))
	return expectCall(t, s, id, want)
}

// expectInvalid reads the call: any output the handler made before the
// invalid frame, then failed invalid_frame, end, and the child closes the
// connection (docs/protocol.md §2, "Errors: two tiers").
func expectInvalid(t testing.TB, s *conn, id string) {
	t.Helper()
	r := expectCall(t, s, id, "")
	if r.end == nil {
		return
	}
	if got := r.outcomes(); !strings.HasSuffix(","+got, ",failed/invalid_frame,end") {
		t.Errorf("call %s: %q, want it to end with failed/invalid_frame,end", id, got)
	}
	if err := s.expectClosed(wait); err != nil {
		t.Errorf("after the end of an invalid frame's call: %v", err)
	}
}
