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

// The protocol's fixed numbers (docs/protocol.md §2 and §3), for a reader
// that splits packets by their prefixes and for the defaults a packet's
// fields take.
const (
	// PrefixLen is the length of every packet's prefix: the header length
	// and the attachment length, both uint32 big-endian.
	PrefixLen = protocol.PrefixLen
	// DefaultMaxHeader is the header limit when Limits.MaxHeader is 0:
	// 64 KiB.
	DefaultMaxHeader = protocol.DefaultMaxHeader
	// DefaultMaxAttachment is the attachment limit when
	// Limits.MaxAttachment is 0: 16 MiB.
	DefaultMaxAttachment = protocol.DefaultMaxAttachment
	// HardMaxHeader is the ceiling Limits.MaxHeader is clamped to: 1 MiB.
	HardMaxHeader = protocol.HardMaxHeader
	// HardMaxAttachment is the ceiling Limits.MaxAttachment is clamped
	// to: 256 MiB.
	HardMaxAttachment = protocol.HardMaxAttachment
	// IngressQueue is the size of a child's per-call queue of caller
	// frames, Hello's and Startup's IngressQueue: 8 in version 1.
	IngressQueue = protocol.IngressQueue
	// DefaultCancelGraceMS is Startup.CancelGraceMS of a decoded startup
	// without the key: 1000 (an explicit 0 is a grace of zero).
	DefaultCancelGraceMS = protocol.DefaultCancelGraceMS
)

// Effective returns l as it applies: zero fields replaced by the defaults
// (DefaultMaxHeader, DefaultMaxAttachment) and every field clamped to its
// hard ceiling (HardMaxHeader, HardMaxAttachment).
func (l Limits) Effective() Limits {
	return Limits{MaxHeader: protocol.EffectiveHeader(l.MaxHeader), MaxAttachment: protocol.EffectiveAttachment(l.MaxAttachment)}
}

// Check checks a packet's header length and attachment length, as its
// prefix declares them, against l (zero fields meaning the defaults,
// values above the hard ceilings clamped): nil, or a protocol error
// (errors.Is(err, ErrProtocol)) that also matches ErrTooLarge when a
// length is above its limit. A header length of 0 is out of bounds too.
// A reader checks them before it reads or allocates anything for the
// packet.
func (l Limits) Check(header, attachment uint32) error {
	l = l.Effective()
	return protocol.CheckLengths(header, attachment, l.MaxHeader, l.MaxAttachment)
}
