// Package packetio is the module's side of package wire on a connection:
// the Reader the host and the child SDK read every connection with, and
// the limits arithmetic of the handshake (DefaultLimits, Effective,
// MinLimits).
//
// A Reader belongs to one goroutine. It checks both lengths against its
// limits before it reads or allocates anything, decodes the header with
// a wire.Decoder (an allocation-free MessagePack reader, frames of one
// call sharing one call-id string, small payloads copied side by side into
// shared blocks), validates frames and invokes, and returns a new packet
// the caller may keep. A caller that is done with an inline frame's data
// may hand it back with Reader.Recycle, so that large media is read without
// a new buffer per frame. Errors come in two tiers:
//
//   - a protocol error (errors.Is(err, wire.ErrProtocol)) means the
//     connection can no longer be trusted: the Reader returns it again on
//     every later call, and the side that sees it closes the connection;
//   - an invalid-packet error (errors.Is(err, frame.ErrInvalid);
//     protocol.AsInvalid names the packet and its call id) reports a
//     frame, invoke or end that parsed whole but broke the rules: the
//     connection is still in step, so the reader can answer with a failed
//     invalid_frame before it closes the connection.
//
// Packets are written by internal/coalesce.
package packetio
