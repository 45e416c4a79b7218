package protocol

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Environment of a child process (docs/protocol.md §1): child.Run reads
// it, the host sets it, and a program that serves the protocol itself
// (skulk-mcp) reads it too.
const (
	// EnvProtocol carries the protocol version the host speaks ("1").
	EnvProtocol = "SKULK_PROTOCOL"
	// EnvControlFD names the fd of the control connection ("3").
	EnvControlFD = "SKULK_CONTROL_FD"
	// EnvStreamsFD names the fd of the stream listener ("4").
	EnvStreamsFD = "SKULK_STREAMS_FD"
	// EnvChildID carries the id the host gave the child.
	EnvChildID = "SKULK_CHILD_ID"
)

// Exit statuses of a child process (docs/protocol.md §1), as child.Run
// returns them.
const (
	// ExitOK: drained, or the host went away.
	ExitOK = 0
	// ExitFailure: the host broke the protocol, or the connections failed.
	ExitFailure = 1
	// ExitStart: started outside a host, no startup in time, a startup
	// with a version the child did not offer, or no valid startup at all.
	ExitStart = 2
)

// ErrNotHosted is matched (errors.Is) when a child process was started
// outside a Skulk host: the SKULK_* environment of docs/protocol.md §1 or
// fds 3 and 4 are missing or wrong. child.Run and skulk-mcp print it and
// exit with ExitStart.
var ErrNotHosted = errors.New("child: not started by a Skulk host")

// ChildFailure is how a child process (child.Run, skulk-mcp) states err,
// an error of package child, as its last word on stderr: "PROG: message",
// the program's name in place of the package's "child: " prefix.
func ChildFailure(prog string, err error) string {
	return prog + ": " + strings.TrimPrefix(err.Error(), "child: ")
}

// PrefixLen is the length of a packet's prefix: the header length and the
// attachment length, both uint32 big-endian.
const PrefixLen = 8

// IngressQueue is the size of the child's per-call queue of caller frames;
// version 1 fixes it at 8.
const IngressQueue = 8

// DefaultCancelGraceMS is startup's cancel_grace_ms when the packet does
// not have the key (docs/protocol.md §3); an explicit 0 is a grace of zero.
const DefaultCancelGraceMS = 1000

// Default and hard limits on packet sizes (docs/protocol.md §2, Limits),
// as wire.Limits applies them.
const (
	// DefaultMaxHeader is max_header when nothing else is configured.
	DefaultMaxHeader = 64 << 10
	// DefaultMaxAttachment is max_attachment when nothing else is configured.
	DefaultMaxAttachment = 16 << 20
	// HardMaxHeader is the ceiling any configured max_header is clamped to.
	HardMaxHeader = 1 << 20
	// HardMaxAttachment is the ceiling any configured max_attachment is
	// clamped to.
	HardMaxAttachment = 256 << 20
)

// EffectiveHeader returns max_header n as it applies: 0 means
// DefaultMaxHeader, and values above HardMaxHeader mean HardMaxHeader.
func EffectiveHeader(n uint32) uint32 {
	if n == 0 {
		return DefaultMaxHeader
	}
	return min(n, HardMaxHeader)
}

// EffectiveAttachment returns max_attachment n as it applies: 0 means
// DefaultMaxAttachment, and values above HardMaxAttachment mean
// HardMaxAttachment.
func EffectiveAttachment(n uint32) uint32 {
	if n == 0 {
		return DefaultMaxAttachment
	}
	return min(n, HardMaxAttachment)
}

// maxMillis is the longest Duration Millis gives: half the largest
// Duration, about 146 years, so that two of them add up without
// overflowing.
const maxMillis = time.Duration(1<<63-1) / 2

// Millis converts a packet's millisecond field (timeout_ms, grace_ms,
// cancel_grace_ms, health_interval_ms) to a Duration: a negative value
// gives 0, and a value too large for a Duration gives about 146 years
// rather than wrapping around to a negative one.
func Millis(ms int64) time.Duration {
	switch {
	case ms <= 0:
		return 0
	case ms >= int64(maxMillis/time.Millisecond):
		return maxMillis
	}
	return time.Duration(ms) * time.Millisecond
}

// Type is a packet's type, the header key "t", as logs and the readers
// above wire name it.
type Type uint8

// Packet types of docs/protocol.md §3. The zero Type is invalid.
const (
	TypeHello Type = iota + 1
	TypeStartup
	TypePing
	TypePong
	TypeCancel
	TypeDrain
	TypeBye
	TypeInvoke
	TypeFrame
	TypeEnd
	TypeTools
)

var typeNames = [...]string{
	TypeHello: "hello", TypeStartup: "startup", TypePing: "ping", TypePong: "pong", TypeCancel: "cancel",
	TypeDrain: "drain", TypeBye: "bye", TypeInvoke: "invoke", TypeFrame: "frame", TypeEnd: "end",
	TypeTools: "tools",
}

// String returns the wire name, or "Type(n)" for an unknown value.
func (t Type) String() string {
	if t >= TypeHello && t <= TypeTools {
		return typeNames[t]
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// ParseType returns the Type whose wire name is s, or 0.
func ParseType(s string) Type {
	for t := TypeHello; t <= TypeTools; t++ {
		if typeNames[t] == s {
			return t
		}
	}
	return 0
}
