package wire

import "github.com/skulkrt/skulk/wire/internal/protocol"

// Limits bound the two lengths of every packet a side reads
// (docs/protocol.md §2, Limits).
type Limits struct {
	// MaxHeader bounds the header length in bytes; 0 means the default
	// of 64 KiB, and values above the hard ceiling of 1 MiB mean 1 MiB.
	MaxHeader uint32 `json:"max_header"`
	// MaxAttachment bounds the attachment length in bytes; 0 means the
	// default of 16 MiB, and values above the hard ceiling of 256 MiB mean
	// 256 MiB.
	MaxAttachment uint32 `json:"max_attachment"`
}

// effective returns l with zero fields replaced by the defaults and every
// field clamped to its hard ceiling.
func (l Limits) effective() Limits {
	return Limits{MaxHeader: protocol.EffectiveHeader(l.MaxHeader), MaxAttachment: protocol.EffectiveAttachment(l.MaxAttachment)}
}

// check checks a packet's header length and attachment length, as its
// prefix declares them, against l (zero fields meaning the defaults,
// values above the hard ceilings clamped): nil, or a protocol error
// (errors.Is(err, ErrProtocol)) that also matches ErrTooLarge when a
// length is above its limit. A header length of 0 is out of bounds too.
func (l Limits) check(header, attachment uint32) error {
	l = l.effective()
	return protocol.CheckLengths(header, attachment, l.MaxHeader, l.MaxAttachment)
}
