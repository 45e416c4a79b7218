package wire

import "github.com/skulkrt/skulk/wire/internal/protocol"

// ErrProtocol is matched (errors.Is) by every protocol error: a packet that
// breaks docs/protocol.md §2 or §3 in a way that leaves the connection
// unusable (§2, "Errors: two tiers"): a length out of bounds, a header that
// is not one MessagePack map with string keys, an unknown packet type, an
// attachment on a packet that takes none, a control field of the wrong
// type. The side that sees one closes the connection.
//
// A frame, invoke or end that parsed whole but broke the rules is the
// other tier: its error matches frame.ErrInvalid (and errors.As finds the
// *frame.FieldError naming the field), not ErrProtocol.
var ErrProtocol = protocol.ErrProtocol

// ErrTooLarge is matched (errors.Is) by the error for a packet whose header
// is longer than max_header or whose attachment is longer than
// max_attachment: AppendPacket refuses to encode it (nothing is written),
// and read from a peer it is a protocol error that also matches
// ErrProtocol.
var ErrTooLarge = protocol.ErrTooLarge
