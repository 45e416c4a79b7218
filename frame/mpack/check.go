package mpack

import (
	"encoding/binary"
	"errors"
	"math"
	"unicode/utf8"
)

// CheckObject reports whether b holds exactly one MessagePack map that has a
// JSON form: string keys, values that are nil, booleans, numbers (finite
// floats), valid UTF-8 strings, arrays or maps of the same, nested at most
// MaxDepth deep, and nothing after the map.
//
// It allocates nothing: its stack is a fixed array of MaxDepth+1 entries,
// used only for values nested deeper than shallowDepth.
func CheckObject(b []byte) error {
	r := NewReader(b)
	if _, err := r.ReadObject(); err != nil {
		return err
	}
	if r.Remaining() != 0 {
		return ErrTrailing
	}
	return nil
}

// ReadObject reads one value that CheckObject would accept on its own, a
// map with a JSON form, and returns its bytes: checking and skipping it in
// one pass. What follows the map is not looked at. After an error the
// reader's position is unspecified. It allocates nothing, as CheckObject.
func (r *Reader) ReadObject() ([]byte, error) {
	start := r.off
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	if c&0xf0 != 0x80 && c != 0xde && c != 0xdf {
		return nil, ErrType
	}
	// Most payloads are one flat map of scalars: checkFlat takes those
	// without a stack. Most others nest a level or two: a small stack
	// spares zeroing the full one on every call. A deeper value starts
	// again with it.
	if r.checkFlat() {
		return r.b[start:r.off], nil
	}
	r.off = start
	var shallow [shallowDepth + 1]level
	err = r.checkValue(shallow[:])
	if err == errDeeper {
		var full [MaxDepth + 1]level
		r.off = start
		err = r.checkValue(full[:])
	}
	if err != nil {
		return nil, err
	}
	return r.b[start:r.off], nil
}

// checkFlat checks a map at r.off whose values are all scalars, as
// checkValue would, and reports whether it did; false leaves r.off
// anywhere, for checkValue to start again (a nested value, any error).
func (r *Reader) checkFlat() bool {
	c := r.b[r.off]
	var n int
	switch {
	case c&0xf0 == 0x80:
		n, r.off = int(c&0x0f), r.off+1
	case c == 0xde && len(r.b)-r.off >= 3:
		n, r.off = int(r.b[r.off+1])<<8|int(r.b[r.off+2]), r.off+3
	default:
		return false
	}
	for i := range 2 * n {
		if r.off >= len(r.b) {
			return false
		}
		c := r.b[r.off]
		isKey := i%2 == 0
		var size int // bytes after the header byte
		switch {
		case c&0xe0 == 0xa0, c == 0xd9: // fixstr, str8: key or value
			m, hdr := int(c&0x1f), 1
			if c == 0xd9 {
				if len(r.b)-r.off < 2 {
					return false
				}
				m, hdr = int(r.b[r.off+1]), 2
			}
			if len(r.b)-r.off-hdr < m {
				return false
			}
			s := r.b[r.off+hdr : r.off+hdr+m]
			r.off += hdr + m
			if !validUTF8(s) {
				return false
			}
			continue
		case isKey: // not a string: checkValue says what is wrong
			return false
		case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		case c >= 0xcc && c <= 0xd3:
			size = 1 << ((c - 0xcc) & 3)
		default: // floats (checkValue refuses NaN), long strings, containers, the rest
			return false
		}
		r.off += 1 + size
		if r.off > len(r.b) {
			return false
		}
	}
	return true
}

// shallowDepth is the nesting CheckObject checks with its small stack.
const shallowDepth = 8

// errDeeper: the value nests deeper than the stack checkValue was given,
// which is shorter than MaxDepth+1.
var errDeeper = errors.New("mpack: deeper than the stack")

type level struct {
	left  uint64 // items still to read at this level (maps: keys and values)
	isMap bool
}

// checkValue checks one value, nested at most len(stack)-1 deep: deeper is
// ErrDepth when that is MaxDepth, errDeeper otherwise.
func (r *Reader) checkValue(stack []level) error {
	// stack[0] is a virtual level holding the root; stack[d] is the
	// container nested d deep (the root map is 1 deep).
	depth := 0
	stack[0] = level{left: 1}
	for depth >= 0 {
		top := &stack[depth]
		if top.left == 0 {
			depth--
			continue
		}
		wantKey := top.isMap && top.left%2 == 0
		top.left--
		c, err := r.peek()
		if err != nil {
			return err
		}
		if c&0xe0 == 0xa0 { // fixstr, key or value: most strings in a payload
			n := int(c & 0x1f)
			if len(r.b)-r.off-1 < n {
				return ErrShort
			}
			s := r.b[r.off+1 : r.off+1+n]
			r.off += 1 + n
			if !validUTF8(s) {
				return ErrNotJSON
			}
			continue
		}
		if wantKey {
			s, err := r.ReadStr()
			if err != nil {
				if err == ErrType {
					return ErrNotJSON
				}
				return err
			}
			if !validUTF8(s) {
				return ErrNotJSON
			}
			continue
		}
		switch {
		case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3: // one byte
			r.off++
		case c == 0xd9, c == 0xda, c == 0xdb:
			s, err := r.ReadStr()
			if err != nil {
				return err
			}
			if !validUTF8(s) {
				return ErrNotJSON
			}
		case c == 0xca, c == 0xcb:
			f, err := r.ReadFloat()
			if err != nil {
				return err
			}
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return ErrNotJSON
			}
		case c&0xf0 == 0x80, c == 0xde, c == 0xdf, c&0xf0 == 0x90, c == 0xdc, c == 0xdd:
			var n int
			isMap := c&0xf0 == 0x80 || c == 0xde || c == 0xdf
			if isMap {
				n, err = r.ReadMapLen()
			} else {
				n, err = r.ReadArrayLen()
			}
			if err != nil {
				return err
			}
			if depth+1 >= len(stack) {
				if len(stack) <= MaxDepth {
					return errDeeper
				}
				return ErrDepth
			}
			items := uint64(n)
			if isMap {
				items *= 2
			}
			// Each item takes at least one byte: a count larger than
			// what is left cannot be honest.
			if items > uint64(r.Remaining()) {
				return ErrShort
			}
			depth++
			stack[depth] = level{left: items, isMap: isMap}
		case c >= 0xcc && c <= 0xd3:
			if _, err := r.Skip(); err != nil {
				return err
			}
		default: // binary, extension, or the never-used 0xc1
			return ErrNotJSON
		}
	}
	return nil
}

// validUTF8 is utf8.Valid with a faster way over short ASCII strings,
// which most keys and values are: eight bytes at a time by one load, then
// byte by byte; the first non-ASCII byte hands the rest to utf8.Valid
// (what was skipped is whole runes). From 64 bytes on, utf8.Valid is the
// faster.
func validUTF8(s []byte) bool {
	if len(s) >= 64 {
		return utf8.Valid(s)
	}
	for len(s) >= 8 {
		if binary.LittleEndian.Uint64(s)&0x8080808080808080 != 0 {
			return utf8.Valid(s)
		}
		s = s[8:]
	}
	for _, c := range s {
		if c >= utf8.RuneSelf {
			return utf8.Valid(s)
		}
	}
	return true
}
