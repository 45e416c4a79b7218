// Package mpack writes and reads the MessagePack that Skulk's packets and
// payloads are made of, without allocating: the Append functions build an
// encoding onto a byte slice, Reader reads one back as views into that slice,
// and CheckObject tells whether bytes are a payload Skulk accepts (one map
// with string keys whose values all have a JSON form).
//
// It sits in package frame's tree, below everything else of Skulk: frame
// checks and builds payloads with it, and package wire encodes and decodes
// packet headers with it. A provider or host author uses it to build a
// frame.Payload on a hot path without the reflection of frame.PayloadOf:
//
//	b := mpack.AppendMapHeader(nil, 1)
//	b = mpack.AppendString(b, "text")
//	b = mpack.AppendString(b, "hello")
//	p := frame.Payload(b) // CheckObject(b) == nil: a valid payload
//
// The appenders write the smallest encoding of each value, so that the same
// value always gives the same bytes (wire/testdata/golden compares them byte
// for byte); AppendValue gives the bytes of github.com/vmihailenco/msgpack/v5
// with sorted map keys and compact numbers, the codec frame.PayloadOf falls
// back to. The reader trusts no declared length: every length is checked
// against the bytes present before it is used, and a bad input gives one of
// the errors below, never a panic.
package mpack

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
)

// Errors returned by Reader and CheckObject; match them with errors.Is.
var (
	// ErrShort means the input ended inside a value.
	ErrShort = errors.New("mpack: value truncated")
	// ErrType means the next value is not of the type asked for.
	ErrType = errors.New("mpack: unexpected type")
	// ErrRange means a number does not fit the type asked for.
	ErrRange = errors.New("mpack: number out of range")
	// ErrDepth means values nest deeper than MaxDepth.
	ErrDepth = errors.New("mpack: nested too deeply")
	// ErrNotJSON means a value has no JSON form (binary, extension, a
	// non-string map key, invalid UTF-8, or a NaN or infinite float).
	ErrNotJSON = errors.New("mpack: value has no JSON form")
	// ErrTrailing means bytes follow the single value expected.
	ErrTrailing = errors.New("mpack: trailing bytes after value")
)

// MaxDepth is how deeply maps and arrays may nest in a value checked by
// CheckObject: the outermost map is 1 deep, a map or array inside it 2 deep,
// and so on up to MaxDepth. JSON documents seen in tool payloads are far
// shallower; the bound keeps the checker's stack fixed-size.
const MaxDepth = 64

// AppendMapHeader appends the header of a map with n entries. n must be
// 0 to 2³²-1: outside that range the bytes written are another value,
// which no check can tell from a meant one.
func AppendMapHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return append(b, 0xde, byte(n>>8), byte(n))
	default:
		return append(b, 0xdf, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

// AppendArrayHeader appends the header of an array with n elements, n
// from 0 to 2³²-1 as for AppendMapHeader.
func AppendArrayHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return append(b, 0xdc, byte(n>>8), byte(n))
	default:
		return append(b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

// AppendString appends s as a MessagePack str; s must be shorter than
// 4 GiB, and valid UTF-8 for a payload (CheckObject).
func AppendString(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, s...)
}

// AppendUint appends v in its smallest unsigned encoding.
func AppendUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return append(b, 0xce, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
	}
}

// AppendInt appends v in its smallest encoding: unsigned forms for
// non-negative values, signed forms for negative ones.
func AppendInt(b []byte, v int64) []byte {
	if v >= 0 {
		return AppendUint(b, uint64(v))
	}
	switch {
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return append(b, 0xd1, byte(v>>8), byte(v))
	case v >= math.MinInt32:
		return append(b, 0xd2, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
	}
}

// AppendFloat64 appends f as a float 64.
func AppendFloat64(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(f))
}

// AppendBool appends a boolean.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

// AppendNil appends nil.
func AppendNil(b []byte) []byte { return append(b, 0xc0) }

// Reader reads values from a byte slice. The zero Reader reads nothing; use
// NewReader. Slices it returns are views into the input, valid as long as
// the input is.
type Reader struct {
	b   []byte
	off int
}

// NewReader returns a Reader over b.
func NewReader(b []byte) Reader { return Reader{b: b} }

// Remaining reports how many unread bytes are left.
func (r *Reader) Remaining() int { return len(r.b) - r.off }

// Prefix reports whether the unread bytes start with p, and if so reads
// them. A decoder matches bytes it knows the encoder writes (a fixed key,
// a key with its fixed value) in one comparison instead of one read each.
func (r *Reader) Prefix(p []byte) bool {
	if !bytes.HasPrefix(r.b[r.off:], p) {
		return false
	}
	r.off += len(p)
	return true
}

// Offset reports how many bytes have been read.
func (r *Reader) Offset() int { return r.off }

func (r *Reader) need(n uint64) error {
	if uint64(len(r.b)-r.off) < n {
		return ErrShort
	}
	return nil
}

func (r *Reader) peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, ErrShort
	}
	return r.b[r.off], nil
}

func (r *Reader) be(n int) uint64 {
	var v uint64
	for _, c := range r.b[r.off : r.off+n] {
		v = v<<8 | uint64(c)
	}
	r.off += n
	return v
}

// IsNil reports whether the next value is nil, consuming it if so.
func (r *Reader) IsNil() bool {
	if c, err := r.peek(); err == nil && c == 0xc0 {
		r.off++
		return true
	}
	return false
}

// ReadMapLen reads a map header and returns its entry count.
func (r *Reader) ReadMapLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c&0xf0 == 0x80:
		r.off++
		return int(c & 0x0f), nil
	case c == 0xde, c == 0xdf:
		return r.lenField(c == 0xdf)
	}
	return 0, ErrType
}

// ReadArrayLen reads an array header and returns its element count.
func (r *Reader) ReadArrayLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c&0xf0 == 0x90:
		r.off++
		return int(c & 0x0f), nil
	case c == 0xdc, c == 0xdd:
		return r.lenField(c == 0xdd)
	}
	return 0, ErrType
}

func (r *Reader) lenField(wide bool) (int, error) {
	n := 2
	if wide {
		n = 4
	}
	if err := r.need(uint64(1 + n)); err != nil {
		return 0, err
	}
	r.off++
	return int(r.be(n)), nil
}

// ReadStr reads a str and returns a view of its bytes.
func (r *Reader) ReadStr() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c&0xe0 == 0xa0:
		r.off++
		n = uint64(c & 0x1f)
	case c == 0xd9, c == 0xda, c == 0xdb:
		w := 1 << (c - 0xd9)
		if err := r.need(uint64(1 + w)); err != nil {
			return nil, err
		}
		r.off++
		n = r.be(w)
	default:
		return nil, ErrType
	}
	if err := r.need(n); err != nil {
		return nil, err
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

// ReadInt reads an integer of any encoding as int64.
func (r *Reader) ReadInt() (int64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		r.off++
		return int64(c), nil
	case c >= 0xe0:
		r.off++
		return int64(int8(c)), nil
	case c >= 0xcc && c <= 0xcf:
		w := 1 << (c - 0xcc)
		if err := r.need(uint64(1 + w)); err != nil {
			return 0, err
		}
		r.off++
		v := r.be(w)
		if v > math.MaxInt64 {
			return 0, ErrRange
		}
		return int64(v), nil
	case c >= 0xd0 && c <= 0xd3:
		w := 1 << (c - 0xd0)
		if err := r.need(uint64(1 + w)); err != nil {
			return 0, err
		}
		r.off++
		v := r.be(w)
		shift := 64 - 8*w
		return int64(v<<shift) >> shift, nil
	}
	return 0, ErrType
}

// ReadUint reads a non-negative integer of any encoding.
func (r *Reader) ReadUint() (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c >= 0xcc && c <= 0xcf {
		w := 1 << (c - 0xcc)
		if err := r.need(uint64(1 + w)); err != nil {
			return 0, err
		}
		r.off++
		return r.be(w), nil
	}
	save := r.off
	v, err := r.ReadInt()
	if err != nil {
		return 0, err
	}
	if v < 0 {
		r.off = save
		return 0, ErrRange
	}
	return uint64(v), nil
}

// ReadFloat reads a float 32, a float 64 or an integer as float64.
func (r *Reader) ReadFloat() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xca:
		if err := r.need(5); err != nil {
			return 0, err
		}
		r.off++
		return float64(math.Float32frombits(uint32(r.be(4)))), nil
	case 0xcb:
		if err := r.need(9); err != nil {
			return 0, err
		}
		r.off++
		return math.Float64frombits(r.be(8)), nil
	}
	v, err := r.ReadInt()
	return float64(v), err
}

// ReadBool reads a boolean.
func (r *Reader) ReadBool() (bool, error) {
	c, err := r.peek()
	if err != nil {
		return false, err
	}
	switch c {
	case 0xc2:
		r.off++
		return false, nil
	case 0xc3:
		r.off++
		return true, nil
	}
	return false, ErrType
}

// flatLen returns the length of the value at b[off] (off < len(b)) when
// its header is one of those most payloads are made of: a one-byte value,
// an integer of 1, 2, 4 or 8 bytes, a fixstr or a str8. A length past
// len(b)-off means the value is cut short. It returns 0 for any other
// header (containers, floats, longer strings, the rest) and for a str8 cut
// before its length. Small enough to be inlined in the loops that use it.
func flatLen(b []byte, off int) int {
	c := b[off]
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c-0xc2 < 2: // fixint, nil, false, true
		return 1
	case c&0xe0 == 0xa0: // fixstr
		return 1 + int(c&0x1f)
	case c-0xcc < 8: // integers of 1, 2, 4 or 8 bytes
		return 1 + 1<<(c&3)
	case c == 0xd9 && off+1 < len(b): // str8
		return 2 + int(b[off+1])
	}
	return 0
}

// Skip reads past one whole value of any type and returns its bytes.
// It does not recurse and allocates nothing, whatever the declared sizes.
func (r *Reader) Skip() ([]byte, error) {
	start := r.off
	var pending uint64 = 1
	for pending > 0 {
		pending--
		if r.off >= len(r.b) {
			return nil, ErrShort
		}
		// The headers most of a payload holds are handled here (flatLen,
		// the small containers); describe takes the rest.
		if n := flatLen(r.b, r.off); n > 0 {
			if len(r.b)-r.off < n {
				return nil, ErrShort
			}
			r.off += n
			continue
		}
		c := r.b[r.off]
		switch {
		case c&0xf0 == 0x80: // fixmap: keys and values
			r.off++
			pending += 2 * uint64(c&0x0f)
			continue
		case c&0xf0 == 0x90: // fixarray
			r.off++
			pending += uint64(c & 0x0f)
			continue
		}
		items, size, hdr, err := r.describe(c)
		if err != nil {
			return nil, err
		}
		if err := r.need(uint64(hdr) + size); err != nil {
			return nil, err
		}
		r.off += hdr + int(size)
		pending += items
	}
	return r.b[start:r.off], nil
}

// describe tells, for the value starting with c at r.off, how many child
// items follow it (maps count keys and values), how many payload bytes it
// has after its header, and the header's length. It reads length fields
// without consuming them.
func (r *Reader) describe(c byte) (items, size uint64, hdr int, err error) {
	lenAt := func(w int) (uint64, error) {
		if err := r.need(uint64(1 + w)); err != nil {
			return 0, err
		}
		var v uint64
		for _, x := range r.b[r.off+1 : r.off+1+w] {
			v = v<<8 | uint64(x)
		}
		return v, nil
	}
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		return 0, 0, 1, nil
	case c&0xf0 == 0x80:
		return 2 * uint64(c&0x0f), 0, 1, nil
	case c&0xf0 == 0x90:
		return uint64(c & 0x0f), 0, 1, nil
	case c&0xe0 == 0xa0:
		return 0, uint64(c & 0x1f), 1, nil
	}
	switch c {
	case 0xcc, 0xd0:
		return 0, 1, 1, nil
	case 0xcd, 0xd1:
		return 0, 2, 1, nil
	case 0xce, 0xd2, 0xca:
		return 0, 4, 1, nil
	case 0xcf, 0xd3, 0xcb:
		return 0, 8, 1, nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1,2,4,8,16: type byte + data
		return 0, 1 + (1 << (c - 0xd4)), 1, nil
	case 0xc4, 0xd9: // bin8, str8
		n, err := lenAt(1)
		return 0, n, 2, err
	case 0xc5, 0xda:
		n, err := lenAt(2)
		return 0, n, 3, err
	case 0xc6, 0xdb:
		n, err := lenAt(4)
		return 0, n, 5, err
	case 0xc7: // ext8: len, type
		n, err := lenAt(1)
		return 0, n + 1, 2, err
	case 0xc8:
		n, err := lenAt(2)
		return 0, n + 1, 3, err
	case 0xc9:
		n, err := lenAt(4)
		return 0, n + 1, 5, err
	case 0xdc:
		n, err := lenAt(2)
		return n, 0, 3, err
	case 0xdd:
		n, err := lenAt(4)
		return n, 0, 5, err
	case 0xde:
		n, err := lenAt(2)
		return 2 * n, 0, 3, err
	case 0xdf:
		n, err := lenAt(4)
		return 2 * n, 0, 5, err
	}
	return 0, 0, 0, ErrType // 0xc1 is never used
}

// MapString returns the string at the top-level key of the map b, and
// whether b is a map that has that key with a string value. It reads only
// the keys before it, skipping their values; malformed input gives false.
// It is a lookup for hot paths: the common headers (short strings,
// integers, flat values) are read inline, anything else through Skip.
func MapString(b []byte, key string) ([]byte, bool) {
	r := NewReader(b)
	n, err := r.ReadMapLen()
	if err != nil {
		return nil, false
	}
	for range n {
		k, ok := r.shortStr()
		if !ok {
			return nil, false
		}
		if string(k) == key {
			v, err := r.ReadStr()
			return v, err == nil
		}
		if r.off >= len(r.b) {
			return nil, false
		}
		if n := flatLen(r.b, r.off); n > 0 { // read inline: a call to Skip costs more than the value
			if r.off += n; r.off > len(r.b) {
				return nil, false
			}
			continue
		}
		if _, err := r.Skip(); err != nil {
			return nil, false
		}
	}
	return nil, false
}

// shortStr reads a fixstr or str8, the headers of nearly every key, and
// reports false for anything else or a string cut short (r.off is then
// unspecified).
func (r *Reader) shortStr() ([]byte, bool) {
	if r.off >= len(r.b) {
		return nil, false
	}
	c := r.b[r.off]
	var n, hdr int
	switch {
	case c&0xe0 == 0xa0:
		n, hdr = int(c&0x1f), 1
	case c == 0xd9 && len(r.b)-r.off >= 2:
		n, hdr = int(r.b[r.off+1]), 2
	default:
		s, err := r.ReadStr() // str16, str32, or not a string
		return s, err == nil
	}
	if len(r.b)-r.off-hdr < n {
		return nil, false
	}
	s := r.b[r.off+hdr : r.off+hdr+n]
	r.off += hdr + n
	return s, true
}
