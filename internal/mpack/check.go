package mpack

import (
	"math"
	"unicode/utf8"
)

// CheckObject reports whether b holds exactly one MessagePack map that has a
// JSON form: string keys, values that are nil, booleans, numbers (finite
// floats), valid UTF-8 strings, arrays or maps of the same, nested at most
// MaxDepth deep, and nothing after the map.
//
// It allocates nothing: its stack is a fixed array of MaxDepth+1 entries.
func CheckObject(b []byte) error {
	r := NewReader(b)
	c, err := r.peek()
	if err != nil {
		return err
	}
	if c&0xf0 != 0x80 && c != 0xde && c != 0xdf {
		return ErrType
	}
	if err := r.checkValue(); err != nil {
		return err
	}
	if r.Remaining() != 0 {
		return ErrTrailing
	}
	return nil
}

type level struct {
	left  uint64 // items still to read at this level (maps: keys and values)
	isMap bool
}

func (r *Reader) checkValue() error {
	// stack[0] is a virtual level holding the root; stack[d] is the
	// container nested d deep (the root map is 1 deep).
	var stack [MaxDepth + 1]level
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
		if wantKey {
			s, err := r.ReadStr()
			if err != nil {
				if err == ErrType {
					return ErrNotJSON
				}
				return err
			}
			if !utf8.Valid(s) {
				return ErrNotJSON
			}
			continue
		}
		switch {
		case c&0xe0 == 0xa0, c == 0xd9, c == 0xda, c == 0xdb:
			s, err := r.ReadStr()
			if err != nil {
				return err
			}
			if !utf8.Valid(s) {
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
			if depth+1 > MaxDepth {
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
		case c <= 0x7f, c >= 0xe0, c >= 0xcc && c <= 0xd3, c == 0xc0, c == 0xc2, c == 0xc3:
			if _, err := r.Skip(); err != nil {
				return err
			}
		default: // binary, extension, or the never-used 0xc1
			return ErrNotJSON
		}
	}
	return nil
}
