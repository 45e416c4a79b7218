package wire

import (
	"errors"

	"github.com/skulkrt/skulk/frame"
)

// ErrProtocol is matched (errors.Is) by every protocol error: a packet that
// breaks docs/protocol.md §2 or §3 in a way that leaves the connection
// unusable (§2, "Errors: two tiers").
// The side that sees one closes the connection.
var ErrProtocol = errors.New("wire: protocol error")

// ProtocolError is one kind of protocol error. The package's sentinels are
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
