package child_test

import (
	"encoding/binary"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
)

// withSynthetic returns the encoded frame packet b with "synthetic": true
// added to its header map.
func withSynthetic(b []byte) []byte {
	h := binary.BigEndian.Uint32(b)
	hdr := b[8 : 8+h]
	r := mpack.NewReader(hdr)
	n, err := r.ReadMapLen()
	if err != nil {
		panic(err)
	}
	out := mpack.AppendMapHeader(nil, n+1)
	out = append(out, hdr[r.Offset():]...)
	out = mpack.AppendBool(mpack.AppendString(out, "synthetic"), true)
	return packet(out)
}

// encodeUnchecked encodes a frame without validating it (no media).
func encodeUnchecked(f frame.Frame) []byte {
	n := 5
	if f.Payload != nil {
		n++
	}
	out := mpack.AppendMapHeader(nil, n)
	out = mpack.AppendString(mpack.AppendString(out, "t"), "frame")
	out = mpack.AppendString(mpack.AppendString(out, "call_id"), f.CallID)
	out = mpack.AppendString(mpack.AppendString(out, "direction"), f.Direction.String())
	out = mpack.AppendUint(mpack.AppendString(out, "sequence"), f.Sequence)
	out = mpack.AppendString(mpack.AppendString(out, "kind"), f.Kind.String())
	if f.Payload != nil {
		out = append(mpack.AppendString(out, "payload"), f.Payload...)
	}
	return packet(out)
}

func packet(hdr []byte) []byte {
	b := make([]byte, 8, 8+len(hdr))
	binary.BigEndian.PutUint32(b, uint32(len(hdr)))
	return append(b, hdr...)
}

// invokeWithStringArguments encodes an invoke whose arguments are a string,
// not a map: it parses as a packet but breaks §3.
func invokeWithStringArguments(callID string) []byte {
	out := mpack.AppendMapHeader(nil, 5)
	out = mpack.AppendString(mpack.AppendString(out, "t"), "invoke")
	out = mpack.AppendString(mpack.AppendString(out, "call_id"), callID)
	out = mpack.AppendString(mpack.AppendString(out, "tool_id"), "echo")
	out = mpack.AppendString(mpack.AppendString(out, "arguments"), "not a map")
	out = mpack.AppendInt(mpack.AppendString(out, "timeout_ms"), 0)
	return packet(out)
}
