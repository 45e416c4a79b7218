// Command fakechild is a scripted Skulk child for the black-box conformance
// tests of skulk-host (package hostconf in ../host). Each mode is one
// behaviour — most of them one way of breaking the wire contract in
// docs/protocol.md — and the tests check what the host does about it.
//
// Usage (as the child command line given to skulk-host):
//
//	fakechild MODE [EVENTS]
//
// EVENTS is the path of a Unix stream socket the test listens on. The child
// reports there what it saw and did, one JSON object per line:
//
//	{"ev": NAME, "child": SKULK_CHILD_ID, "pid": PID, ...fields}
//
// NAME is one of start, sockets, hello, startup, startup_error, ping, pong,
// pongs_changed, cancel, drain, control, control_eof, bye, conn, invoke,
// recv, conn_eof, violation, unread, quiet, end, handler_done, drain_seen,
// grandchild, signal, note and exit (see the emit calls). A grandchild
// (mode grandchild, started by other modes) reports as
// "<SKULK_CHILD_ID>/grandchild". Without EVENTS, or when the socket cannot
// be reached, events go to stderr.
//
// The child offers the tools t (scripted by the mode, with all four
// schemas), count and media (the shapes `skulk-host bench` needs). Unless a
// mode says otherwise, t sends chunks {"i":0} and {"i":1} (sequences 1 and 2)
// and then does what the mode is about. Every child ends itself after
// [watchdog], so a host that fails to stop it leaves nothing for long; the
// tests check that nothing is left long before that.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// watchdog bounds the life of every fakechild process and grandchild.
const watchdog = 60 * time.Second

// main reports the start, then runs the mode named by the first argument.
func main() {
	fds := probeFDs() // first, before this process opens anything itself
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fakechild MODE [EVENTS]")
		os.Exit(2)
	}
	c := &child{
		mode:    os.Args[1],
		id:      os.Getenv("SKULK_CHILD_ID"),
		drained: make(chan struct{}),
		tools: map[string]func(*call) bool{
			"t":     replyOK,
			"count": countTool,
			"media": mediaTool,
		},
	}
	if len(os.Args) > 2 {
		c.eventsPath = os.Args[2]
		c.ev = dialEvents(c.eventsPath)
	}
	if c.mode == "grandchild" {
		c.id += "/grandchild"
	}
	run, ok := modes()[c.mode]
	if !ok {
		c.emit("note", fields{"error": "unknown mode " + c.mode})
		os.Exit(2)
	}
	pgid, _ := syscall.Getpgid(0)
	env := os.Environ()
	sort.Strings(env)
	c.emit("start", fields{"mode": c.mode, "pgid": pgid, "ppid": os.Getppid(), "args": os.Args, "fds": fds, "env": env})
	fmt.Println("fakechild started: stdout")
	fmt.Fprintln(os.Stderr, "fakechild started: stderr")
	time.AfterFunc(watchdog, func() { c.exit(9, "watchdog") })
	c.watchSignals()
	run(c)
}

// modes maps each mode name to the function that runs it. The doc comment
// of each function says what the child does and which part of
// docs/protocol.md it breaks or exercises.
func modes() map[string]func(*child) {
	return map[string]func(*child){
		// A well-behaved child, and valid edge cases the host must accept.
		"grandchild":          modeGrandchild,
		"ok":                  modeOK,
		"calls_probe":         modeCallsProbe,
		"logs":                modeLogs,
		"quiet":               modeQuiet,
		"extra_keys":          modeExtraKeys,
		"header_at_limit":     modeHeaderAtLimit,
		"attachment_at_limit": modeAttachmentAtLimit,
		"wide_integers":       modeWideIntegers,
		"empty_media":         modeEmptyMedia,
		"failed_no_message":   modeFailedNoMessage,
		"cancelled_bare":      modeCancelledBare,
		"duplicate_keys":      modeDuplicateKeys,
		"message_2048":        modeMessage2048,
		"cancel_aware":        modeCancelAware,

		// Handshake.
		"exit_before_hello":          modeExitBeforeHello,
		"no_hello":                   modeNoHello,
		"hello_unsupported_versions": modeHelloUnsupportedVersions,
		"hello_no_versions":          modeHelloNoVersions,
		"hello_many_versions":        modeHelloManyVersions,
		"hello_max_streams_zero":     modeHelloMaxStreamsZero,
		"hello_bad_schema":           modeHelloBadSchema,
		"hello_small_limits":         modeHelloSmallLimits,
		"hello_big_limits":           modeHelloBigLimits,
		"crash_after_startup":        modeCrashAfterStartup,

		// Provider frames that break §3/§4 (invalid frames).
		"gap":                     modeGap,
		"duplicate":               modeDuplicate,
		"started_again":           modeStartedAgain,
		"started_nonzero":         modeStartedNonzero,
		"negative_sequence":       modeNegativeSequence,
		"stale_call":              modeStaleCall,
		"wrong_direction":         modeWrongDirection,
		"synthetic_chunk":         modeSyntheticChunk,
		"synthetic_terminal":      modeSyntheticTerminal,
		"empty_chunk":             modeEmptyChunk,
		"failed_no_error":         modeFailedNoError,
		"failed_code_cancelled":   modeFailedCodeCancelled,
		"unknown_error_code":      modeUnknownErrorCode,
		"cancelled_wrong_code":    modeCancelledWrongCode,
		"completed_with_error":    modeCompletedWithError,
		"completed_with_media":    modeCompletedWithMedia,
		"unknown_kind":            modeUnknownKind,
		"payload_not_map":         modePayloadNotMap,
		"message_too_long":        modeMessageTooLong,
		"message_bad_utf8":        modeMessageBadUTF8,
		"call_id_too_long":        modeCallIDTooLong,
		"blob_bad_sha256":         modeBlobBadSHA256,
		"blob_negative_size":      modeBlobNegativeSize,
		"inline_sample_rate_zero": modeInlineSampleRateZero,
		"inline_negative_time":    modeInlineNegativeTime,
		"inline_data_key":         modeInlineDataKey,
		"output_schema":           modeOutputSchema,
		"result_schema":           modeResultSchema,

		// Packets that break §2/§3 on a stream connection.
		"header_length_zero":      modeHeaderLengthZero,
		"header_length_huge":      modeHeaderLengthHuge,
		"header_over_limit":       modeHeaderOverLimit,
		"attachment_over_limit":   modeAttachmentOverLimit,
		"small_limits_header":     modeSmallLimitsHeader,
		"small_limits_attachment": modeSmallLimitsAttachment,
		"unknown_type":            modeUnknownType,
		"missing_type":            modeMissingType,
		"non_string_key":          modeNonStringKey,
		"header_not_map":          modeHeaderNotMap,
		"header_trailing_bytes":   modeHeaderTrailingBytes,
		"attachment_not_inline":   modeAttachmentNotInline,
		"end_before_terminal":     modeEndBeforeTerminal,
		"invoke_from_child":       modeInvokeFromChild,

		// The stream connection or the process goes away.
		"stream_eof":                      modeStreamEOF,
		"stream_reset":                    modeStreamReset,
		"truncated_packet":                modeTruncatedPacket,
		"exit_mid_call":                   modeExitMidCall,
		"exit_mid_call_grandchild":        modeExitMidCallGrandchild,
		"exit_mid_call_grandchild_leakfd": modeExitMidCallGrandchildLeakFD,
		"truncated_then_exit":             modeTruncatedThenExit,
		"terminal_then_exit":              modeTerminalThenExit,
		"eof_then_exit_soon":              modeEOFThenExitSoon,
		"eof_then_exit_late":              modeEOFThenExitLate,

		// The control connection.
		"control_close":   modeControlClose,
		"control_garbage": modeControlGarbage,
		"unsolicited_bye": modeUnsolicitedBye,

		// Health.
		"no_pong":                       modeNoPong,
		"no_pong_grandchild_ignoreterm": modeNoPongGrandchildIgnoreTerm,
		"stale_nonce":                   modeStaleNonce,
		"foreign_nonce":                 modeForeignNonce,
		"slow_pong":                     modeSlowPong,
		"stuck_pong":                    modeStuckPong,

		// Deadlines, cancellation and shutdown.
		"hang":                      modeHang,
		"cancel_aware_ignore_drain": modeCancelAwareIgnoreDrain,
		"ignore_drain":              modeIgnoreDrain,
		"ignore_drain_ignoreterm":   modeIgnoreDrainIgnoreTerm,
		"bye_no_exit":               modeByeNoExit,
		"bye_no_exit_ignoreterm":    modeByeNoExitIgnoreTerm,
		"bye_leave_grandchild":      modeByeLeaveGrandchild,

		// Misbehaviour on the first call only, for `skulk-host bench`.
		"after_terminal_chunk":        modeAfterTerminalChunk,
		"after_terminal_completed":    modeAfterTerminalCompleted,
		"after_terminal_garbage":      modeAfterTerminalGarbage,
		"after_terminal_unknown_type": modeAfterTerminalUnknownType,
		"no_end":                      modeNoEnd,
		"max_streams_1":               modeMaxStreams(1),
		"max_streams_2":               modeMaxStreams(2),
		"max_streams_1_late_end":      modeMaxStreamsLateEnd,
	}
}

// ---------------------------------------------------------------------------
// Well-behaved modes and valid edge cases.

// modeGrandchild is no child of the host: it is the grandchild other modes
// start in their process group (`fakechild grandchild EVENTS [ignoreterm]`).
// It reports its start (pid, pgid) and every signal, exits on SIGTERM
// unless told to ignore it, and otherwise waits for the watchdog, so the
// tests can see which signals reach the child's whole process group
// (docs/protocol.md §7 "Stopping a child").
func modeGrandchild(c *child) {
	c.ignoreTerm.Store(len(os.Args) > 3 && os.Args[3] == "ignoreterm")
	c.hold()
}

// modeOK is a well-behaved child: t sends two chunks and completes with
// {"n": 2}; drain, bye and exit 0 on shutdown. The baseline of every
// comparison.
func modeOK(c *child) { c.run() }

// modeLogs writes a line longer than 4 KiB, a CRLF line, an empty line and
// a stderr line during the call, to check the forwarding of the child's
// output (docs/protocol.md §1 and §7 "Child output").
func modeLogs(c *child) {
	c.tools["t"] = func(x *call) bool {
		fmt.Println(strings.Repeat("L", 10000))
		fmt.Print("line-a\r\nline-b\n\nafter-empty\n")
		fmt.Fprintln(os.Stderr, "stderr-only-line")
		return replyOK(x)
	}
	c.run()
}

// modeQuiet completes after the caller's terminal and then watches the
// connection for 300 ms before its end: the host must send nothing in that
// quiet interval (docs/protocol.md §6 item 6).
func modeQuiet(c *child) {
	c.tools["t"] = func(x *call) bool {
		r := x.awaitCallerTerminal(5 * time.Second)
		x.chunk(1, 0)
		x.chunk(2, 1)
		x.send(x.frame(3, "completed", fields{"payload": fields{"n": 2}}), nil)
		n := 0
		window := time.After(300 * time.Millisecond)
	watch:
		for {
			select {
			case _, ok := <-x.conn.in:
				if !ok {
					break watch
				}
				n++
			case <-window:
				break watch
			}
		}
		x.emit("quiet", fields{"caller_terminal": r, "packets": n})
		x.end()
		return true
	}
	c.run()
}

// modeExtraKeys sends a chunk with unknown header keys (a bin, a map and an
// ext value), optional keys given as nil (media, error) and an explicit
// "synthetic": false: valid, unknown keys are ignored and nil optional keys
// are absent ones (docs/protocol.md §2 "Unknown keys", "Optional keys";
// §3).
func modeExtraKeys(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		h := encode(x.frame(3, "chunk", fields{"payload": fields{"i": 2}, "zz_unknown": []byte{1, 2, 3}, "another": fields{"x": 1}, "synthetic": false, "media": nil, "error": nil}))
		h[0]++ // the fixmap gets one more entry: "zz_ext" → fixext1
		h = appendStr(h, "zz_ext")
		h = append(h, 0xd4, 0x01, 0x00)
		x.sendRaw(h, nil, len(h), 0)
		return x.completeAndEnd(4)
	}
	c.run()
}

// modeHeaderAtLimit sends a chunk whose header is exactly 65,536 bytes, the
// default max_header: valid (docs/protocol.md §2 "1 ≤ H ≤ max_header").
func modeHeaderAtLimit(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		pad := 65000
		var h []byte
		for range 3 {
			h = encode(x.frame(3, "chunk", fields{"payload": fields{"i": 2, "pad": strings.Repeat("p", pad)}}))
			pad += 65536 - len(h)
		}
		x.emit("note", fields{"header_bytes": len(h)})
		x.sendRaw(h, nil, len(h), 0)
		return x.completeAndEnd(4)
	}
	c.run()
}

// modeAttachmentAtLimit sends an inline chunk of exactly 16,777,216 bytes,
// the default max_attachment: valid (docs/protocol.md §2 "0 ≤ A ≤
// max_attachment").
func modeAttachmentAtLimit(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		x.send(x.frame(3, "chunk", fields{"media": fields{"kind": "inline", "media_type": "application/octet-stream"}}), make([]byte, 16777216))
		return x.completeAndEnd(4)
	}
	c.run()
}

// modeWideIntegers sends two chunks whose sequence is encoded as uint64
// (0xcf) and int64 (0xd3), and a payload int64: valid, any integer encoding
// that holds the value is accepted (docs/protocol.md §2 "Numbers").
func modeWideIntegers(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.chunk(1, 0)
		x.chunk(2, 1)
		for i, prefix := range []byte{0xcf, 0xd3} {
			var h []byte
			h = append(h, 0x86) // fixmap of 6
			h = appendStrPair(h, "t", "frame")
			h = appendStrPair(h, "call_id", x.id)
			h = appendStrPair(h, "direction", "provider_to_caller")
			h = appendStr(h, "sequence")
			h = append(h, prefix)
			h = binary.BigEndian.AppendUint64(h, uint64(3+i))
			h = appendStrPair(h, "kind", "chunk")
			h = appendStr(h, "payload")
			h = append(h, 0x81)
			h = appendStr(h, "i")
			h = append(h, 0xd3)
			h = binary.BigEndian.AppendUint64(h, uint64(2+i))
			x.sendRaw(h, nil, len(h), 0)
		}
		return x.completeAndEnd(5)
	}
	c.run()
}

// modeEmptyMedia sends an inline chunk with no attachment (empty data), a
// blob of size 0, and a completed with a nil payload: all valid
// (docs/protocol.md §2 "An inline frame with `A = 0` has empty data", §4).
func modeEmptyMedia(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.chunk(1, 0)
		x.chunk(2, 1)
		x.send(x.frame(3, "chunk", fields{"media": fields{"kind": "inline", "media_type": "text/plain"}}), nil)
		x.send(x.frame(4, "chunk", fields{"media": fields{"kind": "blob", "blob_id": "b1", "size_bytes": 0, "sha256": strings.Repeat("a", 64), "media_type": "text/plain"}}), nil)
		x.send(x.frame(5, "completed", fields{"payload": nil}), nil)
		x.awaitCallerTerminal(2 * time.Second)
		x.end()
		return true
	}
	c.run()
}

// modeFailedNoMessage ends with failed/timeout whose error has no message:
// valid, an absent message is empty (docs/protocol.md §3, Error).
func modeFailedNoMessage(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.chunk(1, 0)
		x.chunk(2, 1)
		x.send(x.frame(3, "failed", fields{"error": fields{"code": "timeout"}}), nil)
		x.end()
		return true
	}
	c.run()
}

// modeCancelledBare ends with a cancelled frame without an error: valid,
// the error is optional on cancelled (docs/protocol.md §4.1 shape table).
func modeCancelledBare(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.chunk(1, 0)
		x.chunk(2, 1)
		x.send(x.frame(3, "cancelled", nil), nil)
		x.end()
		return true
	}
	c.run()
}

// modeDuplicateKeys sends a frame whose header has "kind" twice, "failed"
// then "chunk": the last occurrence wins, so it is a valid chunk
// (docs/protocol.md §2 "Duplicate keys").
func modeDuplicateKeys(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.chunk(1, 0)
		x.chunk(2, 1)
		h := []byte{0x87} // fixmap of 7
		h = appendStrPair(h, "t", "frame")
		h = appendStrPair(h, "call_id", x.id)
		h = appendStrPair(h, "direction", "provider_to_caller")
		h = appendStrPair(h, "kind", "failed")
		h = appendStr(h, "sequence")
		h = append(h, 3)
		h = appendStrPair(h, "kind", "chunk")
		h = appendStr(h, "payload")
		h = append(h, 0x81)
		h = appendStr(h, "i")
		h = append(h, 2)
		x.sendRaw(h, nil, len(h), 0)
		return x.completeAndEnd(4)
	}
	c.run()
}

// modeMessage2048 ends with failed/provider_error whose message is exactly
// 2,048 characters (4,096 bytes): valid, the limit counts characters
// (docs/protocol.md §3; characters are code points, as its introduction says).
func modeMessage2048(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.chunk(1, 0)
		x.chunk(2, 1)
		x.send(x.frame(3, "failed", fields{"error": fields{"code": "provider_error", "message": strings.Repeat("é", 2048)}}), nil)
		x.end()
		return true
	}
	c.run()
}

// modeCancelAware sends two chunks, then waits for the call to be
// cancelled (a control cancel, or the caller's cancelled or failed) and
// answers with its own cancelled terminal (docs/protocol.md §6 item 4, the
// terminal by cause). The caller's completed (half-close) does not end it.
func modeCancelAware(c *child) {
	c.tools["t"] = cancelAware
	c.run()
}

// ---------------------------------------------------------------------------
// Handshake.

// modeExitBeforeHello exits with status 1 before writing hello: the start
// fails (docs/operations.md "Starting").
func modeExitBeforeHello(c *child) { c.exit(1, "before hello") }

// modeNoHello takes its descriptors and never writes hello: the host's
// start times out after 10 s (docs/operations.md "Starting": StartTimeout).
func modeNoHello(c *child) {
	c.takeFDs()
	c.hold()
}

// modeHelloUnsupportedVersions offers only protocol versions 2 and 3: the
// host must fail the start and stop the child (docs/protocol.md §5 item 2).
// The child does not exit by itself when its control connection
// ends, so the host has to stop it.
func modeHelloUnsupportedVersions(c *child) {
	c.helloEdit = func(h fields) { h["protocol"] = []any{2, 3} }
	c.run()
}

// modeHelloNoVersions sends a hello without "protocol": no common version
// (docs/protocol.md §2 "Optional keys": an absent array is an empty one).
func modeHelloNoVersions(c *child) {
	c.helloEdit = func(h fields) { delete(h, "protocol") }
	c.run()
}

// modeHelloManyVersions offers versions 7, 1 and 3: the host must choose 1
// in startup (docs/protocol.md §3 startup: "the version chosen").
func modeHelloManyVersions(c *child) {
	c.helloEdit = func(h fields) { h["protocol"] = []any{7, 1, 3} }
	c.run()
}

// modeHelloMaxStreamsZero announces max_streams 0, against §3's "required,
// ≥ 1": a protocol error on the control connection, the start fails
// (docs/protocol.md §3, the paragraph on control packets' fields).
func modeHelloMaxStreamsZero(c *child) {
	c.helloEdit = func(h fields) { h["max_streams"] = 0 }
	c.run()
}

// modeHelloBadSchema declares an arguments_schema that is no JSON Schema
// ({"type": 5}): the handshake fails (docs/protocol.md §3 tool descriptor;
// docs/operations.md "Starting").
func modeHelloBadSchema(c *child) {
	c.helloEdit = func(h fields) {
		h["tools"] = []any{fields{"id": "t", "arguments_schema": fields{"type": 5}}}
	}
	c.run()
}

// modeHelloSmallLimits declares max_header 1,000 and max_attachment 5,000,
// below the host's defaults: startup must carry these, the smaller of both
// sides (docs/protocol.md §2, Limits), and the host must hold itself to them.
func modeHelloSmallLimits(c *child) {
	c.helloEdit = smallLimits
	c.run()
}

// modeHelloBigLimits declares limits above the host's defaults: startup
// must carry the host's own (docs/protocol.md §2, the smaller of the two).
func modeHelloBigLimits(c *child) {
	c.helloEdit = func(h fields) { h["limits"] = fields{"max_header": 10000000, "max_attachment": 1 << 30} }
	c.run()
}

// modeCrashAfterStartup exits with status 3 right after reading startup,
// before it accepts any stream connection: the call fails as unreachable
// (docs/protocol.md §7 "EOF before the terminal": "unreachable if the
// child died").
func modeCrashAfterStartup(c *child) {
	c.takeFDs()
	if c.handshake() {
		c.exit(3, "crash after startup")
	}
	c.hold()
}

// ---------------------------------------------------------------------------
// Invalid provider frames: each writes chunks 1 and 2, then the frame
// below, then waits for the host to close the connection. docs/protocol.md
// §7 "Provider frames that break the rules":
// the caller gets a synthetic failed/invalid_frame and the connection is
// closed.

// modeGap writes chunk 4 after chunk 2: a sequence gap (docs/protocol.md
// §4.2 sequence fence).
func modeGap(c *child) { c.runViolation(func(x *call) { x.chunk(4, 2) }) }

// modeDuplicate writes chunk 2 a second time: a duplicate (replay)
// (docs/protocol.md §4.2 sequence fence).
func modeDuplicate(c *child) { c.runViolation(func(x *call) { x.chunk(2, 2) }) }

// modeStartedAgain writes a provider started (sequence 0), which the host
// owns: a duplicate on the wire (docs/protocol.md §4.2 "the child's first
// frame is sequence 1").
func modeStartedAgain(c *child) {
	c.runViolation(func(x *call) { x.send(x.frame(0, "started", nil), nil) })
}

// modeStartedNonzero writes a started frame with sequence 3
// (docs/protocol.md §4.2 "sequence is 0 exactly when kind is started").
func modeStartedNonzero(c *child) {
	c.runViolation(func(x *call) { x.send(x.frame(3, "started", nil), nil) })
}

// modeNegativeSequence writes a chunk with sequence -1 (docs/protocol.md
// §3: sequence is a uint64).
func modeNegativeSequence(c *child) {
	c.runViolation(func(x *call) { x.send(x.frame(-1, "chunk", payloadI(2)), nil) })
}

// modeStaleCall writes chunk 3 of another call id (docs/protocol.md §4.2
// sequence fence: stale call).
func modeStaleCall(c *child) {
	c.runViolation(func(x *call) {
		h := x.frame(3, "chunk", payloadI(2))
		h["call_id"] = "other-call"
		x.send(h, nil)
	})
}

// modeWrongDirection writes chunk 3 marked caller_to_provider
// (docs/protocol.md §4.2 sequence fence: the other direction).
func modeWrongDirection(c *child) {
	c.runViolation(func(x *call) {
		h := x.frame(3, "chunk", payloadI(2))
		h["direction"] = "caller_to_provider"
		x.send(h, nil)
	})
}

// modeSyntheticChunk writes a chunk with "synthetic": true (docs/protocol.md
// §4.4 "Such frames never travel on the wire"; §3 "must be false or absent
// on the wire").
func modeSyntheticChunk(c *child) {
	c.runViolation(func(x *call) {
		h := x.frame(3, "chunk", payloadI(2))
		h["synthetic"] = true
		x.send(h, nil)
	})
}

// modeSyntheticTerminal writes a completed with "synthetic": true: the host
// must not take it as its own (docs/protocol.md §4.4).
func modeSyntheticTerminal(c *child) {
	c.runViolation(func(x *call) { x.send(x.frame(3, "completed", fields{"synthetic": true}), nil) })
}

// modeEmptyChunk writes a chunk with neither payload nor media
// (docs/protocol.md §4.1 shape table: at least one).
func modeEmptyChunk(c *child) {
	c.runViolation(func(x *call) { x.send(x.frame(3, "chunk", nil), nil) })
}

// modeFailedNoError writes a failed frame without an error
// (docs/protocol.md §4.1 shape table: error required).
func modeFailedNoError(c *child) {
	c.runViolation(func(x *call) { x.send(x.frame(3, "failed", nil), nil) })
}

// modeFailedCodeCancelled writes a failed frame with code cancelled
// (docs/protocol.md §4.1 shape table: code ≠ cancelled).
func modeFailedCodeCancelled(c *child) {
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "failed", fields{"error": fields{"code": "cancelled", "message": "x"}}), nil)
	})
}

// modeUnknownErrorCode writes a failed frame with the code "bogus"
// (docs/protocol.md §3, Error: code is one of six).
func modeUnknownErrorCode(c *child) {
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "failed", fields{"error": fields{"code": "bogus", "message": "x"}}), nil)
	})
}

// modeCancelledWrongCode writes a cancelled frame whose error code is
// timeout (docs/protocol.md §4.1 shape table: code = cancelled).
func modeCancelledWrongCode(c *child) {
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "cancelled", fields{"error": fields{"code": "timeout", "message": "x"}}), nil)
	})
}

// modeCompletedWithError writes a completed frame carrying an error
// (docs/protocol.md §4.1 shape table: completed has no error).
func modeCompletedWithError(c *child) {
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "completed", fields{"error": fields{"code": "timeout", "message": "x"}}), nil)
	})
}

// modeCompletedWithMedia writes a completed frame carrying media
// (docs/protocol.md §4.1 shape table: completed has no media).
func modeCompletedWithMedia(c *child) {
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "completed", fields{"media": fields{"kind": "inline", "media_type": "text/plain"}}), nil)
	})
}

// modeUnknownKind writes a frame of kind "progress" (docs/protocol.md §3
// frame: an unknown kind).
func modeUnknownKind(c *child) {
	c.runViolation(func(x *call) { x.send(x.frame(3, "progress", payloadI(2)), nil) })
}

// modePayloadNotMap writes a chunk whose payload is an array
// (docs/protocol.md §4.3: a payload that is not a map).
func modePayloadNotMap(c *child) {
	c.runViolation(func(x *call) { x.send(x.frame(3, "chunk", fields{"payload": []any{1, 2}}), nil) })
}

// modeMessageTooLong writes a failed frame whose message has 2,049
// characters (docs/protocol.md §3, Error: "at most 2,048 characters").
func modeMessageTooLong(c *child) {
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "failed", fields{"error": fields{"code": "provider_error", "message": strings.Repeat("é", 2049)}}), nil)
	})
}

// modeMessageBadUTF8 writes a failed frame whose message is not valid UTF-8
// (docs/protocol.md §3, Error: "valid UTF-8").
func modeMessageBadUTF8(c *child) {
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "failed", fields{"error": fields{"code": "provider_error", "message": "ab\xff\xfe"}}), nil)
	})
}

// modeCallIDTooLong writes chunk 3 with a call id of 129 characters
// (docs/protocol.md §3 frame: call_id "1..128 characters").
func modeCallIDTooLong(c *child) {
	c.runViolation(func(x *call) {
		h := x.frame(3, "chunk", payloadI(2))
		h["call_id"] = strings.Repeat("x", 129)
		x.send(h, nil)
	})
}

// modeBlobBadSHA256 writes a blob chunk whose sha256 is upper-case hex
// (docs/protocol.md §3 blob media: sha256 "matching ^[a-f0-9]{64}$").
func modeBlobBadSHA256(c *child) {
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "chunk", fields{"media": fields{"kind": "blob", "blob_id": "b1", "size_bytes": 3, "sha256": strings.Repeat("A", 64), "media_type": "text/plain"}}), nil)
	})
}

// modeBlobNegativeSize writes a blob chunk with size_bytes -1
// (docs/protocol.md §3 blob media: size_bytes "int ≥ 0").
func modeBlobNegativeSize(c *child) {
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "chunk", fields{"media": fields{"kind": "blob", "blob_id": "b1", "size_bytes": -1, "sha256": strings.Repeat("a", 64), "media_type": "text/plain"}}), nil)
	})
}

// modeInlineSampleRateZero writes an inline chunk with an explicit
// sample_rate 0 (docs/protocol.md §3 inline media: "An explicit 0 for
// sample_rate or channels makes the frame invalid").
func modeInlineSampleRateZero(c *child) {
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "chunk", fields{"media": fields{"kind": "inline", "media_type": "audio/pcm", "sample_rate": 0}}), []byte("abcd"))
	})
}

// modeInlineNegativeTime writes an inline chunk with timestamp_seconds -1
// (docs/protocol.md §3 inline media: timestamp_seconds "finite, ≥ 0").
func modeInlineNegativeTime(c *child) {
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "chunk", fields{"media": fields{"kind": "inline", "media_type": "text/plain", "timestamp_seconds": -1.0}}), nil)
	})
}

// modeInlineDataKey writes an inline chunk whose media map has a "data" key
// (docs/protocol.md §2 "the media map has no data key"; §3 inline media:
// a data key that is not nil makes the frame invalid).
func modeInlineDataKey(c *child) {
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "chunk", fields{"media": fields{"kind": "inline", "media_type": "text/plain", "data": []byte("hi")}}), nil)
	})
}

// modeOutputSchema writes a chunk whose payload breaks the tool's
// output_schema ("i" must be an integer; it is a secret string that must
// not appear in any output) (docs/protocol.md §7 "Schemas": provider
// payloads are validated against output_schema).
func modeOutputSchema(c *child) {
	c.runViolation(func(x *call) { x.send(x.frame(3, "chunk", fields{"payload": fields{"i": secretOut}}), nil) })
}

// modeResultSchema ends with a completed whose payload breaks the tool's
// result_schema ("n" is a secret string) (docs/protocol.md §7 "Schemas":
// result_schema on receipt).
func modeResultSchema(c *child) {
	c.runViolation(func(x *call) { x.send(x.frame(3, "completed", fields{"payload": fields{"n": secretResult}}), nil) })
}

// Secret values the schema modes send; the tests check that they never
// appear in the host's output (docs/protocol.md §7 "Schemas": "never the
// value itself").
const (
	secretOut    = "SECRET-OUT-VALUE"
	secretResult = "SECRET-RESULT-VALUE"
)

// ---------------------------------------------------------------------------
// Packets that break §2/§3 on a stream connection, before the terminal.
// docs/protocol.md §7 "Provider frames that break the rules": before the
// terminal a packet-level break gives the caller a synthetic
// failed/invalid_frame.

// modeHeaderLengthZero writes a packet prefix with H = 0 (docs/protocol.md
// §2 "1 ≤ H").
func modeHeaderLengthZero(c *child) {
	c.runViolation(func(x *call) { x.writeBytes(make([]byte, 8)) })
}

// modeHeaderLengthHuge writes only a prefix claiming a 2 GiB header and then
// nothing: a reader that checks H before reading refuses it at once instead
// of waiting for the bytes (docs/protocol.md §2 "Check before reading").
func modeHeaderLengthHuge(c *child) {
	c.runViolation(func(x *call) { x.writeBytes([]byte{0x80, 0, 0, 0, 0, 0, 0, 0}) })
}

// modeHeaderOverLimit writes a whole chunk whose header is just over the
// default max_header of 65,536 bytes (docs/protocol.md §2 "H ≤ max_header").
func modeHeaderOverLimit(c *child) {
	c.runViolation(func(x *call) {
		h := encode(x.frame(3, "chunk", fields{"payload": fields{"i": 2, "pad": strings.Repeat("p", 65600)}}))
		x.sendRaw(h, nil, len(h), 0)
	})
}

// modeAttachmentOverLimit writes an inline chunk header that claims an
// attachment of 16 MiB + 1 bytes, and no attachment (docs/protocol.md §2
// "A ≤ max_attachment", checked before reading).
func modeAttachmentOverLimit(c *child) {
	c.runViolation(func(x *call) {
		h := encode(x.frame(3, "chunk", fields{"media": fields{"kind": "inline", "media_type": "application/octet-stream"}}))
		x.sendRaw(h, nil, len(h), 16777217)
	})
}

// modeSmallLimitsHeader declares max_header 1,000 and then writes a chunk
// with a header of about 1,500 bytes: over the effective limit, though under
// the host's default (docs/protocol.md §2, Limits: startup carries the
// effective limits).
func modeSmallLimitsHeader(c *child) {
	c.helloEdit = smallLimits
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "chunk", fields{"payload": fields{"i": 2, "pad": strings.Repeat("p", 1500)}}), nil)
	})
}

// modeSmallLimitsAttachment declares max_attachment 5,000 and then writes an
// inline chunk of 6,000 bytes (docs/protocol.md §2 effective limits).
func modeSmallLimitsAttachment(c *child) {
	c.helloEdit = smallLimits
	c.runViolation(func(x *call) {
		x.send(x.frame(3, "chunk", fields{"media": fields{"kind": "inline", "media_type": "application/octet-stream"}}), make([]byte, 6000))
	})
}

// modeUnknownType writes a packet with t "bogus" (docs/protocol.md §2: an
// unknown t is a protocol error).
func modeUnknownType(c *child) {
	c.runViolation(func(x *call) { x.send(fields{"t": "bogus", "call_id": x.id}, nil) })
}

// modeMissingType writes a frame-like packet without t (docs/protocol.md
// §2: "A missing `t` ... is a protocol error").
func modeMissingType(c *child) {
	c.runViolation(func(x *call) {
		h := x.frame(3, "chunk", payloadI(2))
		delete(h, "t")
		x.send(h, nil)
	})
}

// modeNonStringKey writes chunk 3 with one extra integer key in its header
// map (docs/protocol.md §2: a header's keys are strings, "any other key
// type ... is a protocol error").
func modeNonStringKey(c *child) {
	c.runViolation(func(x *call) {
		h := encode(x.frame(3, "chunk", payloadI(2)))
		h[0]++ // the fixmap gets one more entry: 7 → 1
		h = append(h, 0x07, 0x01)
		x.sendRaw(h, nil, len(h), 0)
	})
}

// modeHeaderNotMap writes a packet whose header is a msgpack array
// (docs/protocol.md §2 "exactly one MessagePack map").
func modeHeaderNotMap(c *child) {
	c.runViolation(func(x *call) {
		h, _ := msgpack.Marshal([]any{"frame", x.id})
		x.sendRaw(h, nil, len(h), 0)
	})
}

// modeHeaderTrailingBytes writes chunk 3 with a nil byte after its header
// map, inside H (docs/protocol.md §2: "no bytes after the map").
func modeHeaderTrailingBytes(c *child) {
	c.runViolation(func(x *call) {
		h := append(encode(x.frame(3, "chunk", payloadI(2))), 0xc0)
		x.sendRaw(h, nil, len(h), 0)
	})
}

// modeAttachmentNotInline writes a payload chunk (no media) with a 3-byte
// attachment (docs/protocol.md §2: the attachment may be non-empty only on
// a frame whose media is inline; "An attachment on any other packet is a
// protocol error").
func modeAttachmentNotInline(c *child) {
	c.runViolation(func(x *call) { x.send(x.frame(3, "chunk", payloadI(2)), []byte("xyz")) })
}

// modeEndBeforeTerminal writes end before any provider terminal
// (docs/protocol.md §3 end: "after exactly one provider terminal").
func modeEndBeforeTerminal(c *child) {
	c.runViolation(func(x *call) { x.send(fields{"t": "end", "call_id": x.id}, nil) })
}

// modeInvokeFromChild writes an invoke on the stream connection, a packet
// only the host may send (docs/protocol.md §3 "Stream connection": "Child →
// host: provider `frame`s, then `end`").
func modeInvokeFromChild(c *child) {
	c.runViolation(func(x *call) {
		x.send(fields{"t": "invoke", "call_id": "zz-1", "tool_id": "t", "arguments": fields{}}, nil)
	})
}

// ---------------------------------------------------------------------------
// The stream connection or the process goes away before the terminal.

// modeStreamEOF closes the stream connection after two chunks and stays
// alive: synthetic failed/transport_error (docs/protocol.md §7 "EOF before
// the terminal").
func modeStreamEOF(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		x.conn.nc.Close()
		x.emit("violation", nil)
		x.awaitDrain(5 * time.Second)
		return false
	}
	c.run()
}

// modeStreamReset reads only the invoke, sends two chunks and closes the
// connection with the caller's frames still unread, which resets it on a
// Unix socket (ECONNRESET): it counts as EOF (docs/protocol.md §7 "EOF
// before the terminal": "EOF (or a reset)").
func modeStreamReset(c *child) {
	c.readOnlyInvoke = true
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		x.emit("unread", fields{"bytes": unreadBytes(x.conn.nc)})
		x.conn.nc.Close()
		x.emit("violation", nil)
		x.awaitDrain(5 * time.Second)
		return false
	}
	c.run()
}

// modeTruncatedPacket writes the prefix and half the header of chunk 3,
// then closes the connection and stays alive: EOF before the terminal,
// transport_error (docs/protocol.md §7 "EOF before the terminal").
func modeTruncatedPacket(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		h := encode(x.frame(3, "chunk", payloadI(2)))
		p := binary.BigEndian.AppendUint32(nil, uint32(len(h)))
		p = binary.BigEndian.AppendUint32(p, 0)
		x.writeBytes(append(p, h[:len(h)/2]...))
		x.conn.nc.Close()
		x.emit("violation", nil)
		x.awaitDrain(5 * time.Second)
		return false
	}
	c.run()
}

// modeExitMidCall writes two chunks and exits with status 3 at once: the
// chunks must still reach the caller, then a synthetic failed/unreachable
// (docs/protocol.md §7 "EOF before the terminal" and "Frames written before
// a child died are delivered").
func modeExitMidCall(c *child) {
	c.tools["t"] = exitMidCall
	c.run()
}

// modeExitMidCallGrandchild is modeExitMidCall with a grandchild in
// the child's process group: the host must not leave it behind
// (docs/protocol.md §7 "Stopping a child": "Signals always go to the whole
// process group").
func modeExitMidCallGrandchild(c *child) {
	c.startGrandchild(false, false)
	c.tools["t"] = exitMidCall
	c.run()
}

// modeExitMidCallGrandchildLeakFD is modeExitMidCallGrandchild where the
// grandchild inherits fds 3 and 4: the control connection and listener stay
// open after the child died, so only the process exit tells the host
// (docs/protocol.md §7 "Unhealthy or dead child", "Stopping a child").
func modeExitMidCallGrandchildLeakFD(c *child) {
	c.startGrandchild(true, false)
	c.tools["t"] = exitMidCall
	c.run()
}

// modeTruncatedThenExit writes the prefix and half the header of chunk 3 and
// exits with status 3: a packet cut short by the death is unreachable, not
// invalid_frame (docs/protocol.md §7 "Frames written before a child died
// are delivered").
func modeTruncatedThenExit(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		h := encode(x.frame(3, "chunk", payloadI(2)))
		p := binary.BigEndian.AppendUint32(nil, uint32(len(h)))
		p = binary.BigEndian.AppendUint32(p, 0)
		x.writeBytes(append(p, h[:len(h)/2]...))
		x.emit("violation", nil)
		c.exit(3, "exit mid packet")
		return false
	}
	c.run()
}

// modeTerminalThenExit writes two chunks and its completed, then exits with
// status 3 without an end: the real terminal found in the socket wins over a
// synthetic one (docs/protocol.md §7 "Frames written before a child died
// are delivered").
func modeTerminalThenExit(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		x.send(x.frame(3, "completed", fields{"payload": fields{"n": 2}}), nil)
		x.emit("violation", nil)
		c.exit(3, "exit after the terminal")
		return false
	}
	c.run()
}

// modeEOFThenExitSoon closes the stream connection and exits 10 ms later:
// within the host's wait for the exit, so unreachable (docs/protocol.md §7
// "EOF before the terminal": "waits up to 100 ms").
func modeEOFThenExitSoon(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		x.conn.nc.Close()
		x.emit("violation", nil)
		time.Sleep(10 * time.Millisecond) // the misbehaviour: exit shortly after the EOF
		c.exit(3, "exit 10ms after EOF")
		return false
	}
	c.run()
}

// modeEOFThenExitLate closes the stream connection and exits 400 ms later:
// the child was alive when the host decided, so transport_error
// (docs/protocol.md §7 "EOF before the terminal").
func modeEOFThenExitLate(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		x.conn.nc.Close()
		x.emit("violation", nil)
		time.Sleep(400 * time.Millisecond) // the misbehaviour: exit well after the EOF
		c.exit(3, "exit 400ms after EOF")
		return false
	}
	c.run()
}

// ---------------------------------------------------------------------------
// The control connection.

// modeControlClose closes its control connection mid-call and stays alive:
// the child is gone for the host (synthetic unreachable), which must stop
// it (docs/protocol.md §7 "Unhealthy or dead child"; docs/operations.md "Health": the control connection
// ends).
func modeControlClose(c *child) {
	c.stayOnControlEOF = true
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		c.ctrl.Close()
		x.emit("violation", nil)
		x.awaitHostClose(20 * time.Second)
		return false
	}
	c.run()
}

// modeControlGarbage writes a control packet of unknown type mid-call
// (docs/protocol.md §2: an unknown t is a protocol error, and the side that
// sees it closes the connection): the child is dead for the host, unreachable.
func modeControlGarbage(c *child) {
	c.stayOnControlEOF = true
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		c.writeControl(fields{"t": "bogus"})
		x.emit("violation", nil)
		x.awaitHostClose(20 * time.Second)
		return false
	}
	c.run()
}

// modeUnsolicitedBye writes bye mid-call without a drain: the host takes it
// as the child leaving, lets the running call finish and drains it
// (docs/protocol.md §3 bye; §7 "`bye` without a `drain`").
func modeUnsolicitedBye(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		c.writeControl(fields{"t": "bye", "reason": "leaving"})
		x.emit("violation", nil)
		x.awaitDrain(time.Second)
		return x.completeAndEnd(3)
	}
	c.run()
}

// ---------------------------------------------------------------------------
// Health.

// modeNoPong stops answering pings once the call runs and ignores the
// call's cancellation: after the health timeout the host must give the call
// a synthetic failed/unreachable and stop the child with SIGTERM
// (docs/protocol.md §5 item 4; §7 "Unhealthy or dead child").
func modeNoPong(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		c.setPongs(pongNone)
		x.awaitHostClose(20 * time.Second)
		return false
	}
	c.run()
}

// modeNoPongGrandchildIgnoreTerm is modeNoPong where the child and a
// grandchild in its process group ignore SIGTERM (and report it): the
// SIGTERM must reach both, and the host must SIGKILL the group after its
// grace (docs/protocol.md §7 "Stopping a child": SIGTERM to its process
// group, then SIGKILL after a grace; signals always go to the whole group).
func modeNoPongGrandchildIgnoreTerm(c *child) {
	c.ignoreTerm.Store(true)
	c.startGrandchild(false, true)
	modeNoPong(c)
}

// modeStaleNonce answers every ping after the call started with the first
// nonce it ever got: it has not answered since, so it is unhealthy
// (docs/protocol.md §5 item 4; §3 pong: the nonce "echoed exactly").
func modeStaleNonce(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		c.setPongs(pongStale)
		x.awaitHostClose(20 * time.Second)
		return false
	}
	c.run()
}

// modeForeignNonce answers every ping after the call started with a nonce
// the host never sent: such pongs are ignored, so it is unhealthy
// (docs/protocol.md §5 item 4).
func modeForeignNonce(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		c.setPongs(pongForeign)
		x.awaitHostClose(20 * time.Second)
		return false
	}
	c.run()
}

// modeSlowPong answers each ping 2.5 s late once the call runs, and
// completes the call after 6 s: late pongs within the 5 s health timeout
// keep it healthy (docs/protocol.md §5 item 4: health timeout, default 5 s).
func modeSlowPong(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		c.setPongs(pongLate)
		closed := x.awaitHostClose(6 * time.Second)
		c.setPongs(pongNormal)
		if closed {
			return false
		}
		return x.completeAndEnd(3)
	}
	c.run()
}

// modeStuckPong reports one stuck handler in its pongs while the call runs,
// and completes the call once it is drained: the host recycles a child whose
// stuck count grows (docs/protocol.md §6 item 7, §7 "Unhealthy or dead child"), and
// the running call finishes.
func modeStuckPong(c *child) {
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		c.stuck.Store(1)
		seen := x.awaitDrain(8 * time.Second)
		x.emit("drain_seen", fields{"seen": seen})
		c.stuck.Store(0)
		return x.completeAndEnd(3)
	}
	c.run()
}

// ---------------------------------------------------------------------------
// Deadlines, cancellation and shutdown.

// modeHang writes two chunks and then ignores everything — the deadline, the
// caller's terminal and cancel — until the host closes the connection
// (docs/protocol.md §7 "Deadlines": no terminal by timeout_ms plus a grace
// gives a synthetic failed timeout; §7 "A cancel with no answer" for cancel).
func modeHang(c *child) {
	c.lingerAfterBye = true
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		x.awaitHostClose(30 * time.Second)
		return false
	}
	c.run()
}

// modeCancelAwareIgnoreDrain answers cancellation like modeCancelAware but
// ignores drain: shutdown needs signals (docs/protocol.md §7 "Shutdown":
// "`drain`, wait for `bye` and the exit, then SIGTERM").
func modeCancelAwareIgnoreDrain(c *child) {
	c.drainStyle = drainIgnore
	c.tools["t"] = cancelAware
	c.run()
}

// modeIgnoreDrain completes the call and ignores drain: no bye, no exit, so
// the host must SIGTERM it (docs/protocol.md §7 "Shutdown").
func modeIgnoreDrain(c *child) {
	c.drainStyle = drainIgnore
	c.run()
}

// modeIgnoreDrainIgnoreTerm ignores drain and SIGTERM: the host must SIGKILL
// it after its grace (docs/protocol.md §7 "Shutdown").
func modeIgnoreDrainIgnoreTerm(c *child) {
	c.ignoreTerm.Store(true)
	c.drainStyle = drainIgnore
	c.run()
}

// modeByeNoExit answers drain with bye but does not exit: the host waits for
// the exit, then SIGTERM (docs/protocol.md §3 bye: "the child then exits
// with status 0"; §7 "Shutdown").
func modeByeNoExit(c *child) {
	c.drainStyle = drainByeNoExit
	c.run()
}

// modeByeNoExitIgnoreTerm answers drain with bye, does not exit and ignores
// SIGTERM: SIGKILL (docs/protocol.md §7 "Shutdown").
func modeByeNoExitIgnoreTerm(c *child) {
	c.ignoreTerm.Store(true)
	c.drainStyle = drainByeNoExit
	c.run()
}

// modeByeLeaveGrandchild starts a grandchild in its process group when it is
// drained, then says bye and exits 0: the grandchild must not outlive it
// (docs/protocol.md §7 "Stopping a child": signals go to the whole group;
// docs/operations.md "SIGKILL to any process of the group left").
func modeByeLeaveGrandchild(c *child) {
	c.drainStyle = drainLeaveGrandchild
	c.run()
}

// ---------------------------------------------------------------------------
// Misbehaviour on the child's first call, for `skulk-host bench` (count).

// modeAfterTerminalChunk writes a chunk after the first call's completed
// (then end): the outcome stands, the connection is closed and never reused
// (docs/protocol.md §7 "Provider frames that break the rules").
func modeAfterTerminalChunk(c *child) {
	c.afterTerminal(func(x *call, seq int) { x.send(x.frame(seq, "chunk", payloadI(99)), nil) })
}

// modeAfterTerminalCompleted writes a second completed after the first
// call's completed: a duplicate terminal (docs/protocol.md §7 "Provider
// frames that break the rules").
func modeAfterTerminalCompleted(c *child) {
	c.afterTerminal(func(x *call, seq int) { x.send(x.frame(seq, "completed", nil), nil) })
}

// modeAfterTerminalGarbage writes a packet prefix with H = 0 after the first
// call's completed (docs/protocol.md §7 "Provider frames that break the
// rules", §2).
func modeAfterTerminalGarbage(c *child) {
	c.afterTerminal(func(x *call, _ int) { x.writeBytes(make([]byte, 8)) })
}

// modeAfterTerminalUnknownType writes a packet of unknown t after the first
// call's completed (docs/protocol.md §7 "Provider frames that break the
// rules", §2).
func modeAfterTerminalUnknownType(c *child) {
	c.afterTerminal(func(x *call, _ int) { x.send(fields{"t": "bogus", "call_id": x.id}, nil) })
}

// modeNoEnd withholds end after the first call's completed: the host must
// close that connection after its end grace instead of reusing it
// (docs/protocol.md §6 item 7: "The host closes a connection that got a
// terminal but no `end` within its end grace").
func modeNoEnd(c *child) {
	c.tools["count"] = func(x *call) bool {
		if x.k != 1 {
			return countTool(x)
		}
		x.send(x.frame(1, "completed", fields{"payload": fields{"n": 0}}), nil)
		x.emit("violation", nil)
		if x.awaitHostClose(8 * time.Second) {
			return false
		}
		x.end()
		return true
	}
	c.run()
}

// modeMaxStreams announces max_streams n and makes every count call last
// 50 ms, so that calls overlap: the host must never run more than n calls on
// it at once (docs/protocol.md §7 "Streams": "Never run more than
// `max_streams` calls on one child at once").
func modeMaxStreams(n int) func(*child) {
	return func(c *child) {
		c.helloEdit = func(h fields) { h["max_streams"] = n }
		c.tools["count"] = func(x *call) bool {
			time.Sleep(50 * time.Millisecond) // hold the stream slot
			return countTool(x)
		}
		c.run()
	}
}

// modeMaxStreamsLateEnd announces max_streams 1 and writes each count
// call's end 50 ms after its completed: the call holds its stream slot until
// the end, not just until the terminal (docs/protocol.md §7 "Streams"; §3
// end: "its handler has returned and released what it held").
func modeMaxStreamsLateEnd(c *child) {
	c.helloEdit = func(h fields) { h["max_streams"] = 1 }
	c.tools["count"] = func(x *call) bool {
		n := max(toInt(x.args["n"]), 0)
		for i := range n {
			x.chunk(int(i+1), int(i))
		}
		x.send(x.frame(int(n+1), "completed", fields{"payload": fields{"n": n}}), nil)
		time.Sleep(50 * time.Millisecond) // the handler is still running
		x.end()
		return true
	}
	c.run()
}

// ---------------------------------------------------------------------------
// Tool handlers shared by the modes.

// replyOK is the well-behaved t: chunks 1 and 2, completed {"n": 2}, end
// once the caller's terminal came.
func replyOK(x *call) bool {
	x.twoChunks()
	return x.completeAndEnd(3)
}

// exitMidCall writes two chunks and exits with status 3.
func exitMidCall(x *call) bool {
	x.twoChunks()
	x.emit("violation", nil)
	x.c.exit(3, "exit mid call")
	return false
}

// cancelAware writes two chunks and answers the call's cancellation with
// cancelled; a caller's completed (half-close) does not end it.
func cancelAware(x *call) bool {
	x.twoChunks()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := x.awaitCallerTerminal(time.Until(deadline))
		switch r {
		case "completed":
			continue // half-close: the input ended, the output goes on
		case "closed":
			return false
		case "timeout":
			x.send(x.frame(3, "failed", fields{"error": fields{"code": "provider_error", "message": "never cancelled"}}), nil)
		default:
			x.send(x.frame(3, "cancelled", fields{"error": fields{"code": "cancelled", "message": "cancelled by " + r}}), nil)
		}
		x.end()
		return true
	}
}

// countTool sends n chunks {"i": i} and completes with {"n": n} (the demo
// tool's shape, which skulk-host bench uses).
func countTool(x *call) bool {
	n := toInt(x.args["n"])
	if n < 0 {
		n = 1
	}
	for i := range n {
		x.chunk(int(i+1), int(i))
	}
	x.send(x.frame(int(n+1), "completed", fields{"payload": fields{"n": n}}), nil)
	x.end()
	return true
}

// mediaTool sends "bytes" bytes of inline media in chunks of "chunk" bytes
// and completes with their sha256.
func mediaTool(x *call) bool {
	total := toInt(x.args["bytes"])
	size := toInt(x.args["chunk"])
	if size <= 0 {
		size = 65536
	}
	h := sha256.New()
	seq := 1
	for off := int64(0); off < total; off += size {
		b := make([]byte, min(size, total-off))
		for i := range b {
			b[i] = byte(off + int64(i))
		}
		h.Write(b)
		x.send(x.frame(seq, "chunk", fields{"media": fields{"kind": "inline", "media_type": "application/octet-stream"}}), b)
		seq++
	}
	x.send(x.frame(seq, "completed", fields{"payload": fields{"sha256": hex.EncodeToString(h.Sum(nil))}}), nil)
	x.end()
	return true
}

// smallLimits edits a hello to declare max_header 1,000 and max_attachment
// 5,000.
func smallLimits(h fields) { h["limits"] = fields{"max_header": 1000, "max_attachment": 5000} }

// payloadI is the extra fields of a chunk with payload {"i": i}.
func payloadI(i int) fields { return fields{"payload": fields{"i": i}} }

// ---------------------------------------------------------------------------
// The child: descriptors, handshake, control loop, stream connections.

type fields = map[string]any

// pong styles, set by health modes once their call runs.
const (
	pongNormal  int32 = iota
	pongNone          // no answer at all
	pongStale         // the first nonce ever seen, over and over
	pongForeign       // a nonce the host never sent
	pongLate          // the right nonce, 2.5 s late
)

// drain styles.
const (
	drainNormal          = iota // close the listener, wait for running calls, bye, exit 0
	drainIgnore                 // do nothing
	drainByeNoExit              // bye at once, never exit
	drainLeaveGrandchild        // start a grandchild, bye, exit 0
)

// child is the whole fake process. Modes set its behaviour fields before
// calling run; after that only the atomics change.
type child struct {
	mode       string
	id         string
	eventsPath string
	ev         *eventConn

	ctrl    net.Conn
	ctrlMu  sync.Mutex // one writer at a time on ctrl
	startup fields     // the host's startup, once the handshake read it
	ln      net.Listener

	helloEdit        func(fields)
	tools            map[string]func(*call) bool
	drainStyle       int
	stayOnControlEOF bool
	readOnlyInvoke   bool // read only the invoke of a connection, nothing after
	lingerAfterBye   bool // keep reading control packets for 200 ms after bye

	sigs       chan os.Signal
	ignoreTerm atomic.Bool
	pongs      atomic.Int32
	stuck      atomic.Int64
	active     atomic.Int64
	firstNonce atomic.Uint64
	haveNonce  atomic.Bool
	invokes    atomic.Int64
	conns      atomic.Int64
	cancels    sync.Map // call id → chan struct{}, closed by a control cancel
	drained    chan struct{}
	drainOnce  sync.Once
}

// watchSignals reports every SIGTERM, SIGINT, SIGCONT and SIGHUP, and exits
// with 143 on SIGTERM unless the mode ignores it.
func (c *child) watchSignals() {
	c.sigs = make(chan os.Signal, 8)
	signal.Notify(c.sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCONT, syscall.SIGHUP)
	go func() { // stopped by the process exit
		for s := range c.sigs {
			c.emit("signal", fields{"signal": s.String()})
			if s == syscall.SIGTERM && !c.ignoreTerm.Load() {
				c.exit(143, "SIGTERM")
			}
		}
	}()
}

// exit reports the exit and ends the process.
func (c *child) exit(code int, why string) {
	c.emit("exit", fields{"code": code, "why": why})
	os.Exit(code)
}

// hold blocks until the watchdog ends the process (or a signal does).
func (c *child) hold() {
	time.Sleep(watchdog + time.Second)
	c.exit(9, "hold")
}

// startGrandchild starts a fakechild in grandchild mode in the child's
// process group and reports its pid. With inheritFDs it inherits fds 3 and
// 4 (which the host passed without close-on-exec); otherwise they are made
// close-on-exec first. With ignoreTerm it ignores SIGTERM (but reports it).
func (c *child) startGrandchild(inheritFDs, ignoreTerm bool) {
	if !inheritFDs {
		syscall.CloseOnExec(3)
		syscall.CloseOnExec(4)
	}
	self, err := os.Executable()
	if err != nil {
		c.emit("note", fields{"error": "grandchild: " + err.Error()})
		return
	}
	args := []string{"grandchild", c.eventsPath}
	if ignoreTerm {
		args = append(args, "ignoreterm")
	}
	cmd := exec.Command(self, args...)
	if err := cmd.Start(); err != nil {
		c.emit("note", fields{"error": "grandchild: " + err.Error()})
		return
	}
	c.emit("grandchild", fields{"grandchild_pid": cmd.Process.Pid})
	go cmd.Wait() //nolint:errcheck // reaps it; stopped by its exit
}

// takeFDs takes over fd 3 (control) and fd 4 (stream listener).
func (c *child) takeFDs() {
	cf := os.NewFile(3, "control")
	lf := os.NewFile(4, "streams")
	var err error
	if c.ctrl, err = net.FileConn(cf); err != nil {
		c.emit("note", fields{"error": "fd 3: " + err.Error()})
		c.exit(2, "fd 3")
	}
	if c.ln, err = net.FileListener(lf); err != nil {
		c.emit("note", fields{"error": "fd 4: " + err.Error()})
		c.exit(2, "fd 4")
	}
	cf.Close() // FileConn and FileListener hold close-on-exec duplicates
	lf.Close()
	c.emit("sockets", fields{"listener": c.ln.Addr().String()})
}

// hello builds the hello packet, edited by the mode.
func (c *child) hello() fields {
	h := fields{
		"t": "hello", "protocol": []any{1}, "sdk": "fakechild/1", "pid": os.Getpid(),
		"max_streams": 64, "limits": fields{"max_header": 65536, "max_attachment": 16777216},
		"tools": toolDescriptors(),
	}
	if c.helloEdit != nil {
		c.helloEdit(h)
	}
	return h
}

// toolDescriptors are the tools of every mode's hello (unless edited).
func toolDescriptors() []any {
	obj := fields{"type": "object"}
	return []any{
		fields{
			"id": "t", "version": "1", "description": "scripted by the mode",
			"arguments_schema": fields{"type": "object", "properties": fields{
				"n":    fields{"type": "integer"},
				"name": fields{"type": "string", "maxLength": 5},
				"d":    fields{"type": "integer", "default": 7},
			}},
			"input_schema":  fields{"type": "object", "properties": fields{"text": fields{"type": "string", "maxLength": 8}}},
			"output_schema": fields{"type": "object", "properties": fields{"i": fields{"type": "integer"}}},
			"result_schema": fields{"type": "object", "properties": fields{"n": fields{"type": "integer"}}},
		},
		fields{"id": "count", "arguments_schema": obj},
		fields{"id": "media", "arguments_schema": obj},
	}
}

// handshake writes hello and reads startup; it reports whether a startup
// came.
func (c *child) handshake() bool {
	h := c.hello()
	c.emit("hello", fields{"packet": h})
	if err := c.writeControl(h); err != nil {
		c.emit("startup_error", fields{"error": err.Error()})
		return false
	}
	m, _, err := readPacket(c.ctrl)
	if err != nil {
		c.emit("startup_error", fields{"error": err.Error()})
		return false
	}
	c.emit("startup", fields{"packet": m})
	c.startup = m
	return true
}

// run is the usual life: descriptors, handshake, then serving streams and
// the control connection until drained. A failed handshake holds the
// process, so that the host has to stop it.
func (c *child) run() {
	c.takeFDs()
	if !c.handshake() {
		c.hold()
	}
	go c.acceptLoop() // stopped by closing ln (drain) or the process exit
	c.controlLoop()
}

// runViolation runs a child whose t writes two chunks, then calls bad, then
// waits for the host to close the connection. It lingers after its bye, so
// that a control cancel the host sends with the close is seen even when it
// comes after the drain.
func (c *child) runViolation(bad func(*call)) {
	c.lingerAfterBye = true // a control cancel sent with the close may trail the drain
	c.tools["t"] = func(x *call) bool {
		x.twoChunks()
		bad(x)
		x.emit("violation", nil)
		x.awaitHostClose(5 * time.Second)
		return false
	}
	c.run()
}

// afterTerminal makes the first count call misbehave after its completed
// (then send end); later calls behave.
func (c *child) afterTerminal(bad func(x *call, nextSeq int)) {
	c.tools["count"] = func(x *call) bool {
		if x.k != 1 {
			return countTool(x)
		}
		x.send(x.frame(1, "completed", fields{"payload": fields{"n": 0}}), nil)
		bad(x, 2)
		x.emit("violation", nil)
		x.end()
		return true
	}
	c.run()
}

// writeControl writes one packet on the control connection.
func (c *child) writeControl(h fields) error {
	c.ctrlMu.Lock()
	defer c.ctrlMu.Unlock()
	return writePacket(c.ctrl, h, nil)
}

// setPongs switches the pong style and reports it.
func (c *child) setPongs(style int32) {
	c.pongs.Store(style)
	c.emit("pongs_changed", fields{"style": style})
}

// controlLoop reads the control connection until it ends.
func (c *child) controlLoop() {
	for {
		m, _, err := readPacket(c.ctrl)
		if err != nil {
			c.emit("control_eof", fields{"error": err.Error()})
			if c.stayOnControlEOF {
				c.hold()
			}
			c.exit(0, "control EOF")
		}
		switch t, _ := m["t"].(string); t {
		case "ping":
			c.answerPing(toUint(m["nonce"]))
		case "cancel":
			id, _ := m["call_id"].(string)
			c.emit("cancel", fields{"call_id": id, "reason": m["reason"]})
			if ch, ok := c.cancels.LoadAndDelete(id); ok {
				close(ch.(chan struct{}))
			}
		case "drain":
			grace := time.Duration(toInt(m["grace_ms"])) * time.Millisecond
			c.emit("drain", fields{"grace_ms": toInt(m["grace_ms"])})
			c.drainOnce.Do(func() { close(c.drained) })
			go c.drain(grace) // ends the process (or not, by mode)
		default:
			c.emit("control", fields{"t": t, "packet": m})
		}
	}
}

// answerPing answers one ping as the pong style says.
func (c *child) answerPing(nonce uint64) {
	if !c.haveNonce.Swap(true) {
		c.firstNonce.Store(nonce)
	}
	c.emit("ping", fields{"nonce": nonce})
	reply := nonce
	switch c.pongs.Load() {
	case pongNone:
		return
	case pongStale:
		reply = c.firstNonce.Load()
	case pongForeign:
		reply = nonce ^ 0xdeadbeefcafe0000
	case pongLate:
		go func() { // stopped after one delayed write
			time.Sleep(2500 * time.Millisecond) // the misbehaviour: a late pong
			c.pong(nonce, nonce, true)
		}()
		return
	}
	c.pong(nonce, reply, false)
}

// pong writes one pong and reports it.
func (c *child) pong(nonce, reply uint64, late bool) {
	stuck := c.stuck.Load()
	streams := c.active.Load()
	if stuck > streams {
		streams = stuck
	}
	c.writeControl(fields{"t": "pong", "nonce": reply, "streams": streams, "stuck": stuck}) //nolint:errcheck // a gone host is seen by the control loop
	c.emit("pong", fields{"nonce": reply, "genuine": reply == nonce, "late": late, "stuck": stuck})
}

// drain handles a drain as the mode says.
func (c *child) drain(grace time.Duration) {
	switch c.drainStyle {
	case drainIgnore:
		return
	case drainByeNoExit:
		c.bye()
		return
	case drainLeaveGrandchild:
		c.startGrandchild(false, false)
		c.bye()
		c.exit(0, "drained")
	}
	c.ln.Close()
	limit := time.Now().Add(grace + 900*time.Millisecond)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for c.active.Load() > 0 && time.Now().Before(limit) {
		<-tick.C
	}
	c.bye()
	if c.lingerAfterBye {
		time.Sleep(200 * time.Millisecond) // the control loop still reports what comes
	}
	c.exit(0, "drained")
}

// bye writes bye.
func (c *child) bye() {
	c.writeControl(fields{"t": "bye", "reason": "drained"}) //nolint:errcheck // nothing to do about a gone host
	c.emit("bye", fields{"active": c.active.Load()})
}

// acceptLoop accepts stream connections until the listener closes.
func (c *child) acceptLoop() {
	for {
		nc, err := c.ln.Accept()
		if err != nil {
			return
		}
		sc := &conn{c: c, nc: nc, n: c.conns.Add(1), in: make(chan fields, 256), eof: make(chan struct{})}
		c.emit("conn", fields{"conn": sc.n})
		go sc.serve() // stopped by the connection's EOF or the handler's return
	}
}

// conn is one stream connection.
type conn struct {
	c   *child
	nc  net.Conn
	n   int64
	wmu sync.Mutex  // one writer at a time on nc
	in  chan fields // packets read after the invoke; closed at EOF
	eof chan struct{}
}

// readLoop reads packets into in until the connection ends.
func (sc *conn) readLoop() {
	defer close(sc.in)
	defer close(sc.eof)
	for {
		m, att, err := readPacket(sc.nc)
		if err != nil {
			sc.c.emit("conn_eof", fields{"conn": sc.n, "error": errText(err)})
			return
		}
		f := fields{"conn": sc.n, "t": m["t"], "call_id": m["call_id"], "attachment": len(att)}
		if m["t"] == "frame" {
			for _, k := range []string{"direction", "sequence", "kind", "payload"} {
				f[k] = m[k]
			}
		}
		sc.c.emit("recv", f)
		sc.in <- m
	}
}

// serve runs the calls of one connection, one at a time.
func (sc *conn) serve() {
	defer sc.nc.Close()
	if sc.c.readOnlyInvoke {
		m, _, err := readPacket(sc.nc)
		if err == nil && m["t"] == "invoke" {
			sc.invoke(m)
		}
		return
	}
	go sc.readLoop() // stopped by the connection's EOF (serve closes nc)
	for m := range sc.in {
		if m["t"] != "invoke" {
			continue // frames of an ended call are read and discarded (§6 item 6)
		}
		if !sc.invoke(m) {
			return
		}
	}
}

// invoke runs one call; it reports whether the connection may be reused.
func (sc *conn) invoke(m fields) bool {
	c := sc.c
	x := &call{c: c, conn: sc, k: c.invokes.Add(1), invoke: m, cancel: make(chan struct{})}
	x.id, _ = m["call_id"].(string)
	x.tool, _ = m["tool_id"].(string)
	x.args, _ = m["arguments"].(map[string]any)
	c.cancels.Store(x.id, x.cancel)
	defer c.cancels.Delete(x.id)
	active := c.active.Add(1)
	c.emit("invoke", fields{"conn": sc.n, "k": x.k, "call_id": x.id, "tool_id": x.tool, "arguments": x.args, "timeout_ms": m["timeout_ms"], "active": active})
	h := c.tools[x.tool]
	if h == nil {
		h = func(x *call) bool {
			x.send(x.frame(1, "failed", fields{"error": fields{"code": "invalid_frame", "message": "unknown tool"}}), nil)
			x.end()
			return true
		}
	}
	keep := h(x)
	if !x.ended {
		c.active.Add(-1)
	}
	x.emit("handler_done", fields{"keep": keep})
	return keep
}

// call is one call on a stream connection, as its handler sees it.
type call struct {
	c      *child
	conn   *conn
	k      int64 // the child's k-th invoke, from 1
	id     string
	tool   string
	args   map[string]any
	invoke fields
	cancel chan struct{} // closed by a control cancel
	ended  bool
}

// emit reports an event about this call.
func (x *call) emit(ev string, f fields) {
	if f == nil {
		f = fields{}
	}
	f["conn"] = x.conn.n
	f["call_id"] = x.id
	x.c.emit(ev, f)
}

// frame builds a provider frame header of this call.
func (x *call) frame(seq int, kind string, extra fields) fields {
	h := fields{"t": "frame", "call_id": x.id, "direction": "provider_to_caller", "sequence": seq, "kind": kind}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

// send writes one packet on the call's connection.
func (x *call) send(h fields, att []byte) {
	b := encode(h)
	x.sendRaw(b, att, len(b), len(att))
}

// sendRaw writes a packet with the given header bytes, attachment and
// declared lengths (which may lie).
func (x *call) sendRaw(h, att []byte, hl, al int) {
	p := binary.BigEndian.AppendUint32(nil, uint32(hl))
	p = binary.BigEndian.AppendUint32(p, uint32(al))
	p = append(p, h...)
	p = append(p, att...)
	x.writeBytes(p)
}

// writeBytes writes raw bytes on the call's connection.
func (x *call) writeBytes(b []byte) {
	x.conn.wmu.Lock()
	defer x.conn.wmu.Unlock()
	x.conn.nc.Write(b) //nolint:errcheck // a closed connection is the host's answer, seen by the reader
}

// chunk writes a chunk {"i": i} with the given sequence.
func (x *call) chunk(seq, i int) { x.send(x.frame(seq, "chunk", payloadI(i)), nil) }

// twoChunks writes chunks {"i":0} and {"i":1}, sequences 1 and 2.
func (x *call) twoChunks() {
	x.chunk(1, 0)
	x.chunk(2, 1)
}

// completeAndEnd writes completed {"n": seq-1} with the given sequence, waits
// (bounded) for the caller's terminal and writes end.
func (x *call) completeAndEnd(seq int) bool {
	x.send(x.frame(seq, "completed", fields{"payload": fields{"n": seq - 1}}), nil)
	x.awaitCallerTerminal(2 * time.Second)
	x.end()
	return true
}

// end writes end; the call no longer counts as running.
func (x *call) end() {
	if !x.ended {
		x.ended = true
		x.c.active.Add(-1)
	}
	x.send(fields{"t": "end", "call_id": x.id}, nil)
	x.emit("end", nil)
}

// awaitCallerTerminal waits for the caller's terminal of this call and
// says what ended the wait: "completed", "cancelled" or "failed" (the
// caller's terminal), "cancel" (a control cancel), "closed" or "timeout".
func (x *call) awaitCallerTerminal(d time.Duration) string {
	tm := time.NewTimer(d)
	defer tm.Stop()
	for {
		select {
		case m, ok := <-x.conn.in:
			if !ok {
				return "closed"
			}
			if m["t"] == "frame" && m["call_id"] == x.id {
				switch k, _ := m["kind"].(string); k {
				case "completed", "cancelled", "failed":
					return k
				}
			}
		case <-x.cancel:
			return "cancel"
		case <-tm.C:
			return "timeout"
		}
	}
}

// awaitHostClose waits for the host to close the connection; it reports
// whether it did within d.
func (x *call) awaitHostClose(d time.Duration) bool {
	if x.conn.eof == nil || x.c.readOnlyInvoke {
		return false
	}
	select {
	case <-x.conn.eof:
		return true
	case <-time.After(d):
		return false
	}
}

// awaitDrain waits for a drain; it reports whether one came within d.
func (x *call) awaitDrain(d time.Duration) bool {
	select {
	case <-x.c.drained:
		return true
	case <-time.After(d):
		return false
	}
}

// unreadBytes is how many received bytes nc holds unread (FIONREAD).
func unreadBytes(nc net.Conn) int {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	rc.Control(func(fd uintptr) { //nolint:errcheck // n stays -1
		var v int32
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&v))); e == 0 {
			n = int(v)
		}
	})
	return n
}

// ---------------------------------------------------------------------------
// Packets.

// encode marshals a header with the smallest integer encodings and sorted
// keys.
func encode(h fields) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(h); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// writePacket writes one packet.
func writePacket(w io.Writer, h fields, att []byte) error {
	b := encode(h)
	p := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	p = binary.BigEndian.AppendUint32(p, uint32(len(att)))
	p = append(p, b...)
	p = append(p, att...)
	_, err := w.Write(p)
	return err
}

// readPacket reads one packet, exactly its bytes and no more.
func readPacket(r io.Reader) (fields, []byte, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, nil, err
	}
	hl := binary.BigEndian.Uint32(pre[0:])
	al := binary.BigEndian.Uint32(pre[4:])
	if hl == 0 || hl > 1<<20 || al > 1<<28 {
		return nil, nil, fmt.Errorf("packet lengths out of bounds: header %d, attachment %d", hl, al)
	}
	hb := make([]byte, hl)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, nil, err
	}
	att := make([]byte, al)
	if _, err := io.ReadFull(r, att); err != nil {
		return nil, nil, err
	}
	var m fields
	if err := msgpack.Unmarshal(hb, &m); err != nil {
		return nil, nil, err
	}
	return m, att, nil
}

// appendStr appends a msgpack str (fixstr or str8).
func appendStr(b []byte, s string) []byte {
	v, _ := msgpack.Marshal(s)
	return append(b, v...)
}

// appendStrPair appends a key and a string value.
func appendStrPair(b []byte, k, v string) []byte { return appendStr(appendStr(b, k), v) }

// toInt reads any msgpack integer (or float) as int64; -1 when absent.
func toInt(v any) int64 {
	switch x := v.(type) {
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case int:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		return int64(x)
	case float32:
		return int64(x)
	case float64:
		return int64(x)
	}
	return -1
}

// toUint reads a nonce.
func toUint(v any) uint64 {
	if x, ok := v.(uint64); ok {
		return x
	}
	return uint64(toInt(v))
}

// errText shortens the usual end-of-connection errors.
func errText(err error) string {
	switch {
	case errors.Is(err, io.EOF):
		return "EOF"
	case errors.Is(err, syscall.ECONNRESET):
		return "ECONNRESET"
	}
	return err.Error()
}

// ---------------------------------------------------------------------------
// Events and the start-up probe.

// eventConn writes events to the test's socket.
type eventConn struct {
	mu sync.Mutex
	w  io.Writer
}

// dialEvents connects to the test's event socket; stderr when it cannot.
func dialEvents(path string) *eventConn {
	nc, err := net.Dial("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakechild: events:", err)
		return &eventConn{w: os.Stderr}
	}
	return &eventConn{w: nc}
}

// emit writes one event.
func (c *child) emit(ev string, f fields) {
	m := fields{}
	for k, v := range f {
		m[k] = v
	}
	m["ev"] = ev
	m["child"] = c.id
	m["pid"] = os.Getpid()
	b, err := json.Marshal(m)
	if err != nil {
		b, _ = json.Marshal(fields{"ev": "note", "error": err.Error(), "child": c.id, "pid": os.Getpid()})
	}
	w := c.ev
	if w == nil {
		w = &eventConn{w: os.Stderr}
		c.ev = w
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.w.Write(append(b, '\n')) //nolint:errcheck // a test that stopped listening loses events
}

// fdInfo describes one descriptor the process had at its start.
type fdInfo struct {
	FD        int    `json:"fd"`
	Target    string `json:"target"`
	Socket    bool   `json:"socket,omitempty"`
	Type      int    `json:"type,omitempty"`       // SO_TYPE: 1 stream
	Domain    int    `json:"domain,omitempty"`     // SO_DOMAIN: 1 AF_UNIX
	Listening bool   `json:"listening,omitempty"`  // SO_ACCEPTCONN
	Connected bool   `json:"connected,omitempty"`  // has a peer
	Name      string `json:"name,omitempty"`       // bound path
	DirMode   string `json:"dir_mode,omitempty"`   // permissions of the bound path's directory
	DevNull   bool   `json:"dev_null,omitempty"`   // the character device /dev/null
	ReadOnly  bool   `json:"read_only,omitempty"`  // opened O_RDONLY
	OpenFlags int    `json:"open_flags,omitempty"` // F_GETFL
}

// probeFDs lists the descriptors the process was started with. The Go
// runtime's own (cgroup files it reads at start) are left out; the listing
// uses raw system calls so that it opens nothing but its directory (whose
// descriptor is left out too).
func probeFDs() []fdInfo {
	dfd, err := syscall.Open("/proc/self/fd", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(dfd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := syscall.ReadDirent(dfd, buf)
		if err != nil || n <= 0 {
			break
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
	var out []fdInfo
	for _, name := range names {
		fd, _ := strconv.Atoi(name)
		if fd == dfd {
			continue
		}
		tgt, _ := os.Readlink("/proc/self/fd/" + name)
		if strings.HasPrefix(tgt, "/sys/fs/cgroup/") {
			continue
		}
		info := fdInfo{FD: fd, Target: tgt}
		if typ, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE); err == nil {
			info.Socket = true
			info.Type = typ
			info.Domain, _ = syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, 39) // SO_DOMAIN
			acc, _ := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN)
			info.Listening = acc == 1
			if sa, err := syscall.Getsockname(fd); err == nil {
				if u, ok := sa.(*syscall.SockaddrUnix); ok {
					info.Name = u.Name
					if i := strings.LastIndex(u.Name, "/"); i > 0 {
						if st, err := os.Stat(u.Name[:i]); err == nil {
							info.DirMode = fmt.Sprintf("%o", st.Mode().Perm())
						}
					}
				}
			}
			_, perr := syscall.Getpeername(fd)
			info.Connected = perr == nil
		}
		var st, null syscall.Stat_t
		if syscall.Fstat(fd, &st) == nil && syscall.Stat("/dev/null", &null) == nil {
			info.DevNull = st.Mode&syscall.S_IFMT == syscall.S_IFCHR && st.Rdev == null.Rdev
		}
		if fl, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0); e == 0 {
			info.OpenFlags = int(fl)
			info.ReadOnly = fl&syscall.O_ACCMODE == syscall.O_RDONLY
		}
		out = append(out, info)
	}
	return out
}

// modeCallsProbe: t calls through the host (§8) before it answers, on one
// call connection: first nope, a tool no host offers, then count. It
// reports each answer as a "nested" event (the terminal's kind and code,
// the chunks, whether end followed), or {"offered": false} when startup
// has no calls map, then answers as ok does.
func modeCallsProbe(c *child) {
	c.tools["t"] = func(x *call) bool {
		calls, _ := c.startup["calls"].(fields)
		if calls == nil {
			x.emit("nested", fields{"offered": false})
			return replyOK(x)
		}
		sock, _ := calls["socket"].(string)
		nc, err := net.Dial("unix", sock)
		if err != nil {
			x.emit("nested", fields{"offered": true, "error": err.Error()})
			return replyOK(x)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		for i, tool := range []string{"nope", "count"} {
			id := fmt.Sprintf("n%d", i)
			frame := func(seq int, kind string) fields {
				return fields{"t": "frame", "call_id": id, "direction": "caller_to_provider", "sequence": seq, "kind": kind}
			}
			writePacket(nc, fields{"t": "invoke", "call_id": id, "tool_id": tool, "arguments": fields{"n": 2}, "parent": x.id}, nil)
			writePacket(nc, frame(0, "started"), nil)
			writePacket(nc, frame(1, "completed"), nil)
			ev := fields{"offered": true, "tool": tool, "chunks": 0, "end": false}
			for {
				m, _, err := readPacket(nc)
				if err != nil {
					ev["error"] = err.Error()
					break
				}
				if m["t"] == "end" {
					ev["end"] = true
					break
				}
				if m["kind"] == "chunk" {
					ev["chunks"] = ev["chunks"].(int) + 1
					continue
				}
				ev["kind"] = m["kind"]
				if e, ok := m["error"].(fields); ok {
					ev["code"] = e["code"]
				}
			}
			x.emit("nested", ev)
		}
		return replyOK(x)
	}
	c.run()
}
