// Package wire reads and writes the packets of Skulk's protocol
// (docs/protocol.md §2 and §3 describe the format, and testdata/golden
// holds a byte-exact vector of every packet type).
//
// It sits on top of package frame and below the host and child packages:
// the control connection carries Hello, Startup, Ping, Pong, Cancel, Drain
// and Bye; a stream connection carries Invoke, Frame and End. Every packet
// is an 8-byte prefix (header length and attachment length, both uint32
// big-endian), a header that is exactly one MessagePack map with string
// keys, and an attachment of raw bytes that only an inline-media frame may
// have: its media data, never copied into the header nor base64-encoded.
//
// # Reading
//
// A Reader belongs to one goroutine. It checks both lengths against its
// Limits before it reads or allocates anything, decodes the header with an
// allocation-free MessagePack reader, validates frames (frame.Validate) and
// invokes, and returns a new Packet the caller may keep. A caller that is
// done with an inline frame's data may hand it back with Reader.Recycle, so
// that large media is read without a new buffer per frame. Errors come in
// two tiers:
//
//   - a protocol error (errors.Is(err, ErrProtocol): ErrHeaderLength,
//     ErrAttachmentLength, ErrMalformedHeader, ErrUnknownType,
//     ErrUnexpectedAttachment, ErrBadField) means the connection can no
//     longer be trusted: the Reader returns it again on every later call,
//     and the side that sees it closes the connection;
//   - an *InvalidError (errors.Is(err, frame.ErrInvalid)) reports a frame,
//     invoke or end that parsed whole but broke the rules (an invalid
//     frame): the connection is still in step, so the reader can answer
//     with a failed invalid_frame before it closes the connection.
//
// # Writing
//
// A Writer writes one packet at a time, header and attachment side by
// side and the attachment never copied: with one vectored write (writev,
// made without package net, which the package does not link) where the
// destination has a file descriptor, and one Write per piece elsewhere. It has no
// goroutine of its own and is safe for concurrent use. Packets are
// validated before anything is written: an invalid frame is refused with
// an *InvalidError and nothing is written. The host and the child SDK use
// a coalescing writer of their own, built on AppendPacket, that batches
// the packets queued while a write is under way.
//
// Limits default to 64 KiB of header and 16 MiB of attachment; configured
// values are clamped to HardMaxHeader (1 MiB) and HardMaxAttachment
// (256 MiB). After the handshake both sides use Limits.Min of the two.
package wire
