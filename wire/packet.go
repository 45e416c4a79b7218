package wire

import (
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire/internal/protocol"
)

// ProtocolVersion is the version of the wire protocol this package speaks.
const ProtocolVersion = 1

// Packet is one of *Hello, *Startup, *Ping, *Pong, *Cancel, *Drain, *Bye,
// *Tools, *Invoke, *Frame and *End.
// Only this package's packet types implement it.
type Packet interface {
	packetType() protocol.Type
}

// Tool describes one tool a child offers. Its schemas are JSON Schema
// (2020-12) documents as decoded JSON objects.
type Tool struct {
	// ID names the tool: 1 to 128 characters.
	ID string `json:"id"`
	// Version changes whenever the descriptor or the provider's build
	// changes; empty means not given. At most 128 characters.
	Version string `json:"version,omitempty"`
	// Description says what the tool does, for people.
	Description string `json:"description,omitempty"`
	// ArgumentsSchema checks the invoke's arguments; nil means any object.
	ArgumentsSchema map[string]any `json:"arguments_schema,omitempty"`
	// InputSchema checks caller chunk payloads; nil means any object.
	InputSchema map[string]any `json:"input_schema,omitempty"`
	// OutputSchema checks provider chunk payloads; nil means any object.
	OutputSchema map[string]any `json:"output_schema,omitempty"`
	// ResultSchema checks the payload of the provider's completed frame;
	// nil means any object.
	ResultSchema map[string]any `json:"result_schema,omitempty"`
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
	// has 1000 (docs/protocol.md §3).
	CancelGraceMS int64
	// IngressQueue is the per-call caller frame queue; always 8 in version 1.
	IngressQueue int64
	// Calls is what the host lets the child call through it; nil means
	// nothing (docs/protocol.md §8).
	Calls *Calls
	// ToolsUpdates says the host takes Tools packets, which replace the
	// child's tool list while it runs; false: the child's tools are those
	// of its hello for its whole life, and a Tools packet is a protocol
	// error (ErrProtocol).
	ToolsUpdates bool
}

// Calls is startup's calls map: the tools a child may call through its
// host, and where and how (docs/protocol.md §8).
type Calls struct {
	// Socket is the path of the host's call socket, which the child dials
	// for each call connection: 1 to 107 bytes (what a Unix socket address holds on Linux).
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

// Tools replaces the child's tool list while it runs: new calls are made
// against these tools, calls already started keep theirs. A child sends it
// on the control connection only when startup's ToolsUpdates is true.
type Tools struct {
	// Tools are the tools the child offers from now on, in hello's form;
	// at most 4,096. Empty: none.
	Tools []Tool
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

func (*Hello) packetType() protocol.Type { return protocol.TypeHello }

func (*Startup) packetType() protocol.Type { return protocol.TypeStartup }

func (*Ping) packetType() protocol.Type { return protocol.TypePing }

func (*Pong) packetType() protocol.Type { return protocol.TypePong }

func (*Cancel) packetType() protocol.Type { return protocol.TypeCancel }

func (*Drain) packetType() protocol.Type { return protocol.TypeDrain }

func (*Bye) packetType() protocol.Type { return protocol.TypeBye }

func (*Tools) packetType() protocol.Type { return protocol.TypeTools }

func (*Invoke) packetType() protocol.Type { return protocol.TypeInvoke }

func (*Frame) packetType() protocol.Type { return protocol.TypeFrame }

func (*End) packetType() protocol.Type { return protocol.TypeEnd }
