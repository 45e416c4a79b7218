// Command fakechild is the fake provider child of the main module's tests:
// the tests of host, cmd/internal/hostile and cmd/skulk-host start it as a
// host starts any provider (fd 3, fd 4, docs/protocol.md §1). It speaks
// the protocol packet by packet (no SDK) so that it can break it on
// purpose: its mode chooses what it does on the control connection, and
// each of its tools does one thing, well behaved or hostile, to one call.
// A test builds it once (testnet.Build of
// "github.com/skulkrt/skulk/internal/fakechild", in TestMain) and runs it
// as a real process; started by hand it has no fd 3 and exits with
// status 2. It links no SDK (and so sits below child in the layers): a
// test that needs a well-behaved provider starts cmd/skulk-child, or its
// own test binary running child.Run (cmd/internal/hostile's
// TestHostileHost).
//
// Its first argument is the mode (serve when there is none):
//
//	serve         answers pings, leaves on drain (the default)
//	nopong        as serve, but never answers a ping
//	stalepong     as serve, but answers every ping with nonce 1 (the
//	              first ping's)
//	badversion    as serve, but offers only protocol version 2
//	badtools      as serve, but sends a tools packet of two tools with one
//	              id after the startup (docs/protocol.md §3)
//	nohello       says nothing for a minute, then exits
//	exit          exits with status 4 before its hello
//	poolbarrier   marks its start (<id>.started) and says hello only once
//	              every child of the pool (FAKECHILD_POOL_SIZE) has
//	              started: a pool started one child after another never
//	              gets past its first child's hello
//	poolfail      child c1.1 exits with status 4 without a hello once
//	              every other child has said its own (<id>.hello): they
//	              are up when it fails; the others serve
//	poolfailearly child c1.1 exits with status 4 at once; the others never
//	              say hello: they are in their handshakes when it fails
//	lostread      as serve, but accepts stream connections and never
//	              reads them
//	lostaccept    as serve, but never accepts a stream connection
//	ignorefd3     reads nothing on fd 3 after the startup: neither pings
//	              nor the host's end; it also starts a setsid grandchild
//	              at once
//	grandchild    is the grandchild: it calls setsid, writes its pid to
//	              the file FAKECHILD_PIDS/grandchild-PID, ignores SIGTERM,
//	              SIGHUP and SIGINT, holds the stdout and stderr it was
//	              given, and sleeps
//	daemonize     starts a daemon (setsid, no descriptor of its parent)
//	              and exits once its pid file is written: the first half
//	              of a double fork
//	daemon        is that daemon: it calls setsid, ignores SIGTERM, SIGHUP
//	              and SIGINT, closes its standard descriptors, writes its
//	              pid to FAKECHILD_PIDS/daemon-PID and sleeps
//
// Its environment:
//
//	FAKECHILD_PIDS      the directory the grandchildren, the daemons and
//	                    the swarm and spawn tools write their pids to
//	FAKECHILD_INVOKES   a file it appends one line to for every invoke it
//	                    reads: "call_id tool_id tree parent"
//	FAKECHILD_ENVOUT    a file it writes its whole environment to as it
//	                    starts, one NAME=value a line
//	FAKECHILD_POOL_DIR  the pool start modes' directory of marker files
//	FAKECHILD_POOL_SIZE the pool start modes' number of children
//	SKULK_CHILD_ID      (set by the host) the child's id, for the pool
//	                    start modes
//
// Its hello offers protocol 1, sdk "fakechild/1", max_streams 4 and the
// default limits. Its pongs count every call as a running stream until
// its tool returns. Its tools, ok first (only ok and badoutput have
// schemas):
//
//	ok           echoes caller chunks; completes {"n", "prefix"} on the
//	             caller's completed; its arguments are {"prefix" (default
//	             "p"), "n" (an integer, at least 0)}, its input and output
//	             chunks {"text"}
//	byecall      says bye on the control connection (no drain asked),
//	             then completes
//	gap          sends sequence 2 first
//	dupseq       sends chunk 1, then a terminal with sequence 1 again
//	dupterm      sends completed, then a second completed, then end
//	othercall    sends a chunk of another call (one that does not exist)
//	oversize     sends a length prefix over max_header on the stream
//	garbage      sends a header that is not MessagePack on the stream
//	badfield     sends a frame with synthetic set
//	badoutput    sends a chunk that breaks its output schema
//	noend        completes and never sends end
//	hang         never reads the connection after the invoke, never
//	             answers and ignores cancellation; the process ends with
//	             its drain
//	die          sends one chunk, writes "fake: dying on purpose" to
//	             stderr and exits with status 7
//	hangup       sends one chunk and closes the connection (the child
//	             lives)
//	idleclose    answers, then closes the connection while it is idle
//	idlewrite    answers, then writes a chunk on the idle connection
//	flood        writes chunks as fast as it can and never reads
//	textflood    as flood, with {"text": ...} chunks
//	stderrflood  writes 64 MiB to stderr without a newline, then serves
//	             as ok
//	ctrloversize sends a length prefix over max_header on the control
//	             connection
//	ctrlgarbage  sends a header that is not MessagePack on the control
//	             connection
//	mute         stops answering pings, and never answers the call
//	deaf         stops reading the control connection once it has
//	             answered the next ping and the packets its reader already
//	             holds, and answers the pings that reach
//	             it all the same: it peeks at the unread bytes (MSG_PEEK)
//	             and answers the newest ping among them; never answers
//	             the call
//	pongflood    stops answering pings and writes pongs with nonce 1
//	             back to back for as long as the host reads them; never
//	             answers the call
//	closefd3     closes the control connection and goes on serving streams
//	escape       starts a setsid grandchild, waits for its pid file, then
//	             serves as ok
//	escapestuck  as escape; once completed, its pongs report a stuck
//	             handler, so the host recycles the child
//	escapedie    starts a setsid grandchild, waits for its pid file, exits
//	             with status 3
//	evil         sends inline media whose media type holds terminal
//	             escapes, then fails with a message full of them
//	inputdie     reads two caller frames, then exits with status 3
//	inputgarbage reads two caller frames, then sends a header that is not
//	             MessagePack, and goes on reading
//	lostfinish   reads the invoke and never answers; its pongs stop
//	             counting it at once (a handler the child lost track of)
//	latecount    reads the invoke, then as hang, but its pongs count the
//	             call only from the second ping read 1.5 s or more after
//	             the invoke (a handler that got no processor while the
//	             control reader answered pings); one per process
//	logflood     writes {"n"} lines (default 20000) to stdout and as many
//	             to stderr as fast as it can, then completes once the host
//	             has read both pipes
//	mediaflood   sends {"n"} chunks (default 64) of 16 MiB inline media as
//	             fast as the host reads them, then completes
//	daemon       daemonizes mid-call (a double fork through daemonize:
//	             setsid, descriptors closed), then completes
//	swarm        runs a shell that starts 200 setsid sleeps, writes their
//	             pids to FAKECHILD_PIDS/swarm and exits at once (their
//	             parent is gone before any health check), then completes
//	             {"n"}
//	hog          allocates and touches memory 8 MiB at a time, up to 4
//	             GiB, then completes {"mib"}: a memory limit kills it first
//	forkloop     runs a shell that starts sleeps until a fork fails, then
//	             kills them and completes {"n"} with how many it started
//	orphans      runs a shell that double-forks {"n"} (default 100)
//	             short-lived sleeps, one after another, each orphaned at
//	             once (its parent exits as it starts it) and gone 10 ms
//	             later, and returns when the last was started; then
//	             completes {"n", "pid"} (pid: the child's own)
//	spawn        runs a shell that starts one setsid sleep, appends its
//	             pid to FAKECHILD_PIDS/spawn and exits, then completes
//	attackhost   tries to signal (signal 0, the permission check) and to
//	             ptrace its parent, the host, and completes {"uid", "gid",
//	             "nnp", "kill", "ptrace"}: its ids, its no_new_privs flag
//	             and each attempt's error ("" when it succeeded; a ptrace
//	             that succeeds is detached at once)
//
// A tool whose id and description are themselves terminal escapes is
// listed last (evilID); calling it fails with evil's message. Any other
// tool id fails with invalid_frame.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Hostile strings: a window title, a clear screen, a red fake success on a
// line of its own, a right-to-left override.
const (
	evilMessage   = "boom\x1b]0;pwned\x07\r\n\x1b[1;31mFAKE: completed OK\x1b[0m"
	evilMediaType = "audio/x\x1b[2J\x1b[H/../../\u202eevil"
	evilID        = "evil\x1b[2J"
	evilDesc      = "lists\x1b]0;title\x07 a \x1b[31mred\x1b[0m tool\u202e"
)

// Environment variables the fake child reads (see the package doc).
const (
	pidsEnv     = "FAKECHILD_PIDS"
	invokesEnv  = "FAKECHILD_INVOKES"
	envOutEnv   = "FAKECHILD_ENVOUT"
	poolDirEnv  = "FAKECHILD_POOL_DIR"
	poolSizeEnv = "FAKECHILD_POOL_SIZE"
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
	}
	if !slices.Contains(serveModes, mode) {
		fmt.Fprintln(os.Stderr, "fake: unknown mode; the package doc lists them")
		os.Exit(2)
	}
	os.Exit(serve(mode))
}

// serveModes are the modes that speak the protocol (serve runs them); the
// others are the processes the tools start.
var serveModes = []string{
	"serve", "nopong", "stalepong", "badversion", "badtools", "nohello", "exit",
	"poolbarrier", "poolfail", "poolfailearly", "lostread", "lostaccept", "ignorefd3",
}

// grandchild is the process that escapes its parent's group and session.
func grandchild() int {
	syscall.Setsid() // already a session leader when started with Setsid
	signal.Ignore(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	dir := os.Getenv(pidsEnv)
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
	name := filepath.Join(os.Getenv(pidsEnv), "daemon-"+strconv.Itoa(cmd.Process.Pid))
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
	name := filepath.Join(os.Getenv(pidsEnv), "daemon-"+strconv.Itoa(os.Getpid()))
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
	echo $! >> "$FAKECHILD_PIDS/swarm"
	i=$((i + 1))
done`

// orphanScript double-forks $1 sleeps of 10 ms: each subshell starts
// its sleep in the background and exits, so the sleep is orphaned at once
// and reaches its new parent (the host, a subreaper) before it exits.
const orphanScript = `i=0
while [ $i -lt "$1" ]; do
	(sleep 0.01 </dev/null >/dev/null 2>&1 &)
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
		fmt.Fprintln(os.Stderr, "fake: grandchild:", err)
		return
	}
	name := filepath.Join(os.Getenv(pidsEnv), "grandchild-"+strconv.Itoa(cmd.Process.Pid))
	for range 1000 {
		if _, err := os.Stat(name); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
