// Package wire is the packets of Skulk's protocol and their encoding
// (docs/protocol.md §2 and §3 describe the format, and testdata/golden
// holds a byte-exact vector of every packet type, for implementations in
// other languages too).
//
// It sits on top of package frame and below the host and child packages:
// the control connection carries Hello, Startup, Ping, Pong, Cancel, Drain,
// Bye and Tools (a running child's new tool list, once Startup offered
// it); a stream connection carries Invoke, Frame and End. Every packet
// is an 8-byte prefix (header length and attachment length, both uint32
// big-endian), a header that is exactly one MessagePack map with string
// keys, and an attachment of raw bytes that only an inline-media frame may
// have: its media data, never copied into the header nor base64-encoded.
//
// AppendPacket encodes a packet, returning its header and its attachment
// apart so that a writer can send both with one vectored write without
// copying the attachment. Decode decodes one whole packet. Both check the
// two lengths against Limits before anything else: 64 KiB of header and
// 16 MiB of attachment by default, configured values clamped to 1 MiB and
// 256 MiB; after the handshake both sides use the smaller of each.
//
// Errors come in two tiers:
//
//   - a protocol error (errors.Is(err, ErrProtocol)) means the connection
//     can no longer be trusted, and the side that sees it closes the
//     connection; ErrTooLarge is the one a sender may meet before anything
//     is written;
//   - a frame, invoke or end that parsed whole but broke the rules is an
//     invalid packet (errors.Is(err, frame.ErrInvalid); errors.As finds
//     the *frame.FieldError naming the field): the connection is still in
//     step, so the reader can answer with a failed invalid_frame before it
//     closes the connection. The error has a method InvalidPacket()
//     (packetType, callID string) naming the packet ("frame", "invoke",
//     "end") and its call id when that was readable and valid; errors.As
//     into a variable of type interface{ InvalidPacket() (string, string) }
//     finds it.
//
// The host and the child SDK read their connections with the module's
// own reader (internal/packetio), which decodes through a Decoder, and
// write them with one coalescing writer (internal/coalesce).
package wire
