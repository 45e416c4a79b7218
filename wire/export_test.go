package wire

import (
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
)

// The decoder's parts, for the tests of package wire_test.

// TestDecoder is the package's header decoder.
type TestDecoder = decoder

// NewTestDecoder returns a new decoder.
func NewTestDecoder() *TestDecoder { return &decoder{} }

func (d *decoder) DecodeFrameFast(h []byte, attLen uint32) *Frame {
	return d.decodeFrameFast(h, attLen)
}

func (d *decoder) DecodeGeneral(h []byte, attLen uint32) (Packet, error) {
	return d.decodeGeneral(h, attLen)
}

func (d *decoder) CanonicalHead(r *mpack.Reader) *Frame { return d.canonicalHead(r) }

func (d *decoder) NewFrame() *Frame { return d.newFrame() }

// ValidateCalls is the check startup's calls map passes before it is
// encoded.
func ValidateCalls(c *Calls) error { return c.validate() }

// DecodeSchema and DecodeTools are hello's schema and tools decoders.
func DecodeSchema(raw []byte, dst *map[string]any) error { return decodeSchema(raw, dst) }

func DecodeTools(r *mpack.Reader) ([]Tool, error) { return decodeTools(r) }

func (d *decoder) Decode(h []byte, attLen uint32) (Packet, error) { return d.decode(h, attLen) }

// AppendTool is appendTool, for the canonical-encoding tests.
var AppendTool = appendTool

// CheckLengths is Limits.check: the length check Decode makes first.
func CheckLengths(l Limits, header, attachment uint32) error { return l.check(header, attachment) }

// CheckCallID is the call id check of the encoder and the decoder.
func CheckCallID(id string) error { return checkCallID(id) }

// CheckPayload is the payload check of the encoder.
func CheckPayload(p frame.Payload) error { return checkPayload(p) }
