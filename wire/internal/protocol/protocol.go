package protocol

import "strconv"

// PrefixLen is the length of a packet's prefix: the header length and the
// attachment length, both uint32 big-endian.
const PrefixLen = 8

// IngressQueue is the size of the child's per-call queue of caller frames;
// version 1 fixes it at 8.
const IngressQueue = 8

// DefaultCancelGraceMS is startup's cancel_grace_ms when the packet does
// not have the key (docs/protocol.md §3); an explicit 0 is a grace of zero.
const DefaultCancelGraceMS = 1000

// MaxSocketPath bounds startup's calls.socket in bytes: what a Unix socket
// address holds on Linux (sun_path of 108 bytes, less the terminating NUL).
const MaxSocketPath = 107

// Default and hard limits on packet sizes (docs/protocol.md §2, Limits).
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

// Type is a packet's type, the header key "t".
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

// ParseType returns the Type whose wire name is b, or 0.
func ParseType(b []byte) Type {
	switch string(b) {
	case "hello":
		return TypeHello
	case "startup":
		return TypeStartup
	case "ping":
		return TypePing
	case "pong":
		return TypePong
	case "cancel":
		return TypeCancel
	case "drain":
		return TypeDrain
	case "bye":
		return TypeBye
	case "invoke":
		return TypeInvoke
	case "frame":
		return TypeFrame
	case "end":
		return TypeEnd
	case "tools":
		return TypeTools
	}
	return 0
}
