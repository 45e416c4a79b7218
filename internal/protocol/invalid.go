package protocol

import "errors"

// Invalid describes an invalid packet (docs/protocol.md §2, "Errors: two
// tiers"): a frame, invoke or end that parsed whole but broke the rules,
// read from a peer or refused before it was written. The connection is
// still in step, so a reader may answer with a failed invalid_frame.
type Invalid struct {
	// Type is the packet's type.
	Type Type
	// CallID is the packet's call id when it was readable and valid, else
	// empty.
	CallID string
	// Err is wire's error itself.
	Err error
}

// invalidPacket is the method of wire's invalid-packet error that names
// the packet; the error's own type is internal to package wire.
type invalidPacket interface {
	error
	InvalidPacket() (packetType, callID string)
}

// AsInvalid reports whether err, or an error it wraps, is wire's
// invalid-packet error (such an error also matches frame.ErrInvalid), and
// returns the packet it names. Any other error, a protocol error
// (wire.ErrProtocol) among them, gives false.
func AsInvalid(err error) (Invalid, bool) {
	var ip invalidPacket
	if !errors.As(err, &ip) {
		return Invalid{}, false
	}
	t, id := ip.InvalidPacket()
	return Invalid{Type: ParseType(t), CallID: id, Err: ip}, true
}
