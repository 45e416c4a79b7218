package wire

import (
	"strconv"
	"time"

	"github.com/skulkrt/skulk/frame"
)

// ProtocolVersion is the version of the wire protocol this package speaks.
const ProtocolVersion = 1

// IngressQueue is the size of the child's per-call queue of caller frames;
// version 1 fixes it at 8.
const IngressQueue = 8

// DefaultCancelGraceMS is startup's cancel_grace_ms when the packet does
// not have the key (docs/protocol.md §3); an explicit 0 is a grace of zero.
const DefaultCancelGraceMS = 1000

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
)

var typeNames = [...]string{
	TypeHello: "hello", TypeStartup: "startup", TypePing: "ping", TypePong: "pong", TypeCancel: "cancel",
	TypeDrain: "drain", TypeBye: "bye", TypeInvoke: "invoke", TypeFrame: "frame", TypeEnd: "end",
}

// String returns the wire name, or "Type(n)" for an unknown value.
func (t Type) String() string {
	if t >= TypeHello && t <= TypeEnd {
		return typeNames[t]
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

func parseType(b []byte) Type {
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
	}
	return 0
}

// Packet is one of *Hello, *Startup, *Ping, *Pong, *Cancel, *Drain, *Bye,
// *Invoke, *Frame and *End.
type Packet interface {
	// Type returns the packet's type.
	Type() Type
}

// Schema is a JSON Schema (2020-12) as a decoded JSON object.
type Schema = map[string]any

// Tool describes one tool a child offers.
type Tool struct {
	// ID names the tool: 1 to 128 characters.
	ID string `json:"id"`
	// Version changes whenever the descriptor or the provider's build
	// changes; empty means not given. At most 128 characters.
	Version string `json:"version,omitempty"`
	// Description says what the tool does, for people.
	Description string `json:"description,omitempty"`
	// ArgumentsSchema checks the invoke's arguments; nil means any object.
	ArgumentsSchema Schema `json:"arguments_schema,omitempty"`
	// InputSchema checks caller chunk payloads; nil means any object.
	InputSchema Schema `json:"input_schema,omitempty"`
	// OutputSchema checks provider chunk payloads; nil means any object.
	OutputSchema Schema `json:"output_schema,omitempty"`
	// ResultSchema checks the payload of the provider's completed frame;
	// nil means any object.
	ResultSchema Schema `json:"result_schema,omitempty"`
	// InputMedia says every caller chunk carries media (a payload beside
	// it is optional): the host refuses a caller chunk without media.
	// false: a caller chunk may carry media or not.
	InputMedia bool `json:"input_media,omitempty"`
	// NoInput says the tool reads no caller input: its output does not
	// depend on caller chunks (the caller may still send some; the host
	// does not refuse them). The MCP bridge, which has no input stream to
	// offer, says nothing of input for such a tool. false: the tool may
	// read caller input.
	NoInput bool `json:"no_input,omitempty"`
}

// Hello is the child's first packet on the control connection.
type Hello struct {
	// Protocol lists the versions the child speaks, e.g. [1].
	Protocol []int64
	// SDK names the child's SDK and its version.
	SDK string
	// PID is the child's process id.
	PID int64
	// MaxStreams is how many calls the child runs at once (≥ 1).
	MaxStreams int64
	// Limits are the child's packet limits.
	Limits Limits
	// Tools are the tools the child offers.
	Tools []Tool
}

// Startup is the host's answer to Hello.
type Startup struct {
	// Protocol is the version the host chose.
	Protocol int64
	// ChildID is the id the host gave the child.
	ChildID string
	// Limits are the effective limits: the smaller of both sides'.
	Limits Limits
	// HealthIntervalMS is how often the host pings.
	HealthIntervalMS int64
	// CancelGraceMS is how long a cancelled handler may run before it is
	// reported stuck; 0 is no grace. A decoded startup without the key
	// has DefaultCancelGraceMS.
	CancelGraceMS int64
	// IngressQueue is the per-call caller frame queue; always 8 in version 1.
	IngressQueue int64
	// Calls is what the host lets the child call through it; nil means
	// nothing (docs/protocol.md §8).
	Calls *Calls
}

// MaxSocketPath bounds Calls.Socket in bytes: what a Unix socket address
// holds on Linux (sun_path of 108 bytes, less the terminating NUL).
const MaxSocketPath = 107

// Calls is startup's calls map: the tools a child may call through its
// host, and where and how (docs/protocol.md §8).
type Calls struct {
	// Socket is the path of the host's call socket, which the child dials
	// for each call connection: 1 to MaxSocketPath bytes.
	Socket string
	// Tools are the tools the child may call, in hello's descriptor form.
	Tools []Tool
	// MaxDepth is the deepest a call the child makes may be in its tree
	// (the tree's outermost call is at depth 0); at least 1.
	MaxDepth int64
	// MaxInFlight is how many calls the child may have open through the
	// host at once; at least 1.
	MaxInFlight int64
}

// Ping is a health probe from the host.
type Ping struct {
	// Nonce is echoed in the Pong.
	Nonce uint64
}

// Pong answers a Ping.
type Pong struct {
	// Nonce is the Ping's nonce.
	Nonce uint64
	// Streams counts handlers that have not returned, stuck ones included.
	Streams int64
	// Stuck counts cancelled handlers still running past cancel_grace_ms.
	Stuck int64
}

// Cancel asks the child to cancel one call's handler.
type Cancel struct {
	// CallID names the call.
	CallID string
	// Reason says why; empty means not given.
	Reason string
}

// Drain asks the child to finish its calls and exit.
type Drain struct {
	// GraceMS is how long running calls may go on before they are cancelled.
	GraceMS int64
}

// Bye is the child's last packet of a drain.
type Bye struct {
	// Reason says why; empty means not given.
	Reason string
}

// Invoke starts a call on a stream connection.
type Invoke struct {
	// CallID names the call: 1 to 128 characters, unique per host.
	CallID string
	// ToolID names the tool.
	ToolID string
	// Arguments is the call's arguments, a JSON object.
	Arguments frame.Payload
	// TimeoutMS is the call's deadline in milliseconds; 0 means none.
	TimeoutMS int64
	// Trace carries tracing context such as W3C traceparent; nil means none.
	Trace map[string]string
	// Tree is the call id of the outermost call of this call's tree; empty
	// means not given.
	Tree string
	// Parent is the call id of the call that made this one; empty means none.
	// On a call connection (docs/protocol.md §8) it is required: the
	// child's call whose handler makes this one.
	Parent string
	// Depth is the call's depth in its tree: 0 for the tree's outermost
	// call, its parent's depth + 1 for a step. Only the host writes it.
	Depth int64
	// Detached asks, on a call connection, for a call that is a tree of
	// its own rather than a step of Parent (docs/protocol.md §8).
	Detached bool
}

// Frame is a frame packet.
type Frame struct {
	frame.Frame
}

// End is a stream's end packet: the child's cleanup acknowledgment, sent
// after the call's terminal frame once the child has forgotten the call.
type End struct {
	// CallID names the call: 1 to 128 characters.
	CallID string
}

// Type returns TypeHello.
func (*Hello) Type() Type { return TypeHello }

// Type returns TypeStartup.
func (*Startup) Type() Type { return TypeStartup }

// Type returns TypePing.
func (*Ping) Type() Type { return TypePing }

// Type returns TypePong.
func (*Pong) Type() Type { return TypePong }

// Type returns TypeCancel.
func (*Cancel) Type() Type { return TypeCancel }

// Type returns TypeDrain.
func (*Drain) Type() Type { return TypeDrain }

// Type returns TypeBye.
func (*Bye) Type() Type { return TypeBye }

// Type returns TypeInvoke.
func (*Invoke) Type() Type { return TypeInvoke }

// Type returns TypeFrame.
func (*Frame) Type() Type { return TypeFrame }

// Type returns TypeEnd.
func (*End) Type() Type { return TypeEnd }

// maxMillis is the longest Duration Millis gives: half the largest
// Duration, about 146 years, so that two of them add up without
// overflowing.
const maxMillis = time.Duration(1<<63-1) / 2

// Millis converts a packet's millisecond field (timeout_ms, grace_ms,
// cancel_grace_ms, health_interval_ms) to a Duration: a negative value
// gives 0, and a value too large for a Duration gives maxMillis rather
// than wrapping around to a negative one.
func Millis(ms int64) time.Duration {
	switch {
	case ms <= 0:
		return 0
	case ms >= int64(maxMillis/time.Millisecond):
		return maxMillis
	}
	return time.Duration(ms) * time.Millisecond
}
