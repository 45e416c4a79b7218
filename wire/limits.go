package wire

// Default and hard limits on packet sizes (docs/protocol.md §2, Limits).
const (
	// DefaultMaxHeader is max_header when nothing else is configured.
	DefaultMaxHeader = 64 << 10
	// DefaultMaxAttachment is max_attachment when nothing else is configured.
	DefaultMaxAttachment = 16 << 20
	// HardMaxHeader is the ceiling any configured max_header is clamped to.
	HardMaxHeader = 1 << 20
	// HardMaxAttachment is the ceiling any configured max_attachment is
	// clamped to.
	HardMaxAttachment = 256 << 20
)

// Limits bound the two lengths of every packet a side reads.
type Limits struct {
	// MaxHeader bounds the header length in bytes; 0 means
	// DefaultMaxHeader, and values above HardMaxHeader mean HardMaxHeader.
	MaxHeader uint32 `json:"max_header"`
	// MaxAttachment bounds the attachment length in bytes; 0 means
	// DefaultMaxAttachment, and values above HardMaxAttachment mean
	// HardMaxAttachment.
	MaxAttachment uint32 `json:"max_attachment"`
}

// DefaultLimits returns the protocol's default limits.
func DefaultLimits() Limits {
	return Limits{MaxHeader: DefaultMaxHeader, MaxAttachment: DefaultMaxAttachment}
}

// Effective returns l with zero fields replaced by the defaults and every
// field clamped to its hard ceiling.
func (l Limits) Effective() Limits {
	if l.MaxHeader == 0 {
		l.MaxHeader = DefaultMaxHeader
	}
	if l.MaxAttachment == 0 {
		l.MaxAttachment = DefaultMaxAttachment
	}
	l.MaxHeader = min(l.MaxHeader, HardMaxHeader)
	l.MaxAttachment = min(l.MaxAttachment, HardMaxAttachment)
	return l
}

// Min returns the smaller of each effective limit of l and o: the limits both
// sides agree on in the handshake.
func (l Limits) Min(o Limits) Limits {
	l, o = l.Effective(), o.Effective()
	return Limits{MaxHeader: min(l.MaxHeader, o.MaxHeader), MaxAttachment: min(l.MaxAttachment, o.MaxAttachment)}
}
