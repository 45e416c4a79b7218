package protocol

import (
	"errors"
	"fmt"

	"github.com/skulkrt/skulk/frame"
)

// ErrProtocol is matched (errors.Is) by every protocol error: a packet that
// breaks docs/protocol.md §2 or §3 in a way that leaves the connection
// unusable (§2, "Errors: two tiers"). The side that sees one closes the
// connection. Package wire exports it as wire.ErrProtocol.
var ErrProtocol = errors.New("wire: protocol error")

// ErrTooLarge is matched (errors.Is) by the length errors CheckLengths and
// LengthError return for a length above its limit: a packet longer than
// the limits allow, refused before it is written or read. Package wire
// exports it as wire.ErrTooLarge.
var ErrTooLarge = errors.New("wire: packet longer than the limits allow")

// ProtocolError is one kind of protocol error. The sentinels below are
// *ProtocolError values; match them with errors.Is.
type ProtocolError struct{ msg string }

func (e *ProtocolError) Error() string { return "wire: " + e.msg }

// Is makes every ProtocolError match ErrProtocol.
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

// Protocol errors, one per rule.
var (
	// ErrHeaderLength: the header length is 0 or above max_header.
	ErrHeaderLength = &ProtocolError{"header length out of bounds"}
	// ErrAttachmentLength: the attachment length is above max_attachment.
	ErrAttachmentLength = &ProtocolError{"attachment length out of bounds"}
	// ErrMalformedHeader: the header is not exactly one MessagePack map
	// with string keys.
	ErrMalformedHeader = &ProtocolError{"header is not one MessagePack map with string keys"}
	// ErrUnknownType: the header's "t" is missing or names no packet type.
	ErrUnknownType = &ProtocolError{"unknown packet type"}
	// ErrUnexpectedAttachment: an attachment on a packet other than an
	// inline-media frame.
	ErrUnexpectedAttachment = &ProtocolError{"attachment on a packet that takes none"}
	// ErrBadField: a field of a control or stream packet other than a
	// frame has the wrong type or breaks its rule.
	ErrBadField = &ProtocolError{"packet field invalid"}
)

// CheckLengths checks a packet's header length h and attachment length a
// against the limits (already effective): ErrHeaderLength or
// ErrAttachmentLength, with both figures in the message, or nil.
func CheckLengths(h, a, maxHeader, maxAttachment uint32) error {
	if h == 0 || h > maxHeader {
		return &lengthError{ErrHeaderLength, uint64(h), maxHeader}
	}
	if a > maxAttachment {
		return &lengthError{ErrAttachmentLength, uint64(a), maxAttachment}
	}
	return nil
}

// LengthError returns err (ErrHeaderLength or ErrAttachmentLength) for a
// length of got bytes over limit.
func LengthError(err *ProtocolError, got uint64, limit uint32) error {
	return &lengthError{err, got, limit}
}

// lengthError is ErrHeaderLength or ErrAttachmentLength with the lengths
// involved. It formats its message only when asked, so that refusing a
// length costs one small allocation.
type lengthError struct {
	err   *ProtocolError
	got   uint64
	limit uint32
}

func (e *lengthError) Error() string {
	return fmt.Sprintf("%v: %d bytes, limit %d", e.err, e.got, e.limit)
}

func (e *lengthError) Unwrap() error { return e.err }

// Is makes a length above its limit match ErrTooLarge (a header length of
// 0 is out of bounds, not too large).
func (e *lengthError) Is(target error) bool { return target == ErrTooLarge && e.got > uint64(e.limit) }

// InvalidError reports a frame, invoke or end packet that parsed but broke
// the rules of docs/protocol.md §3 or §4: an invalid frame. The connection is
// still in step (the whole packet was consumed), so the reader may answer
// with a failed invalid_frame before closing it.
//
// It matches frame.ErrInvalid, and unwraps to the *frame.FieldError naming
// the field.
type InvalidError struct {
	// Type is the packet's type.
	Type Type
	// CallID is the packet's call id when it was readable and valid, else
	// empty.
	CallID string
	// Err names the field at fault.
	Err error
}

func (e *InvalidError) Error() string {
	return "wire: invalid " + e.Type.String() + ": " + e.Err.Error()
}

// Unwrap returns the field error.
func (e *InvalidError) Unwrap() error { return e.Err }

// Is makes every InvalidError match frame.ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == frame.ErrInvalid }

// InvalidPacket returns the packet's type name on the wire ("frame",
// "invoke", "end", "cancel") and its call id (empty when it was not
// readable and valid): what a reader above package wire, which cannot name
// this type, needs to answer with a failed invalid_frame. It finds them
// with errors.As into an interface that has this method, as
// internal/protocol.AsInvalid does.
func (e *InvalidError) InvalidPacket() (packetType, callID string) {
	return e.Type.String(), e.CallID
}
