package toolschema

import (
	"math"
	"unicode/utf8"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
)

// fastNode checks MessagePack values against a schema of the subset tool
// schemas mostly use (type, properties, required, additionalProperties,
// minimum, maximum, exclusiveMinimum, exclusiveMaximum, minLength,
// maxLength, items, minItems, maxItems and annotations), reading the bytes
// directly: no decoding, no allocation. It is only ever a shortcut to
// "valid": when it cannot tell, or the value looks invalid, the compiled
// JSON Schema library decides (and explains), so a fastNode must never
// accept a value the library refuses. compileFast builds one only for
// schemas made entirely of that subset.
type fastNode struct {
	always bool // the schema true, or one with no assertion
	never  bool // the schema false
	types  uint8

	min, max, exclMin, exclMax *fastBound

	minLen, maxLen     int // -1: none
	minItems, maxItems int // -1: none
	items              *fastNode

	objectKeys bool                 // properties, required or additionalProperties present
	fields     map[string]fastField // properties and required names
	reqMask    uint64               // one bit per required name
	addl       *fastNode            // additionalProperties; nil accepts anything
}

type fastField struct {
	prop *fastNode // nil: not in properties (additionalProperties applies)
	bit  uint64    // its bit in reqMask, 0 when not required
}

// JSON types of fastNode.types; 0 means any type.
const (
	ftNull uint8 = 1 << iota
	ftBool
	ftObject
	ftArray
	ftNumber
	ftInteger
	ftString
)

var fastTypeNames = map[string]uint8{
	"null": ftNull, "boolean": ftBool, "object": ftObject, "array": ftArray,
	"number": ftNumber, "integer": ftInteger, "string": ftString,
}

// fastAnnotations are keywords that assert nothing.
var fastAnnotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true,
	"$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

// maxExactInt is the largest magnitude up to which every integer is exact
// as a float64.
const maxExactInt = 1 << 53

// fastBound is a numeric bound of a schema.
type fastBound struct {
	isInt bool
	i     int64
	f     float64 // the bound as a float64 (rounded for a large integer bound)
	exact bool    // f holds the bound exactly
}

func boundOf(v any) (*fastBound, bool) {
	switch x := v.(type) {
	case int64:
		return intBound(x), true
	case int:
		return intBound(int64(x)), true
	case int8:
		return intBound(int64(x)), true
	case int16:
		return intBound(int64(x)), true
	case int32:
		return intBound(int64(x)), true
	case uint8:
		return intBound(int64(x)), true
	case uint16:
		return intBound(int64(x)), true
	case uint32:
		return intBound(int64(x)), true
	case uint64:
		if x > math.MaxInt64 {
			return nil, false
		}
		return intBound(int64(x)), true
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, false
		}
		return &fastBound{f: x, exact: true}, true
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, false
		}
		return &fastBound{f: float64(x), exact: true}, true
	}
	return nil, false
}

func intBound(i int64) *fastBound {
	return &fastBound{isInt: true, i: i, f: float64(i), exact: i >= -maxExactInt && i <= maxExactInt}
}

// countOf reads a non-negative integer keyword (minLength and the like).
func countOf(v any) (int, bool) {
	b, ok := boundOf(v)
	if !ok || !b.isInt || b.i < 0 || b.i > math.MaxInt32 {
		return 0, false
	}
	return int(b.i), true
}

// maxFastDepth bounds how deep compileFast descends into a schema.
const maxFastDepth = 32

// compileFast builds the fastNode of schema s, or reports false when s uses
// anything outside the subset (then the library alone validates).
func compileFast(s any, depth int) (*fastNode, bool) {
	if depth > maxFastDepth {
		return nil, false
	}
	switch x := s.(type) {
	case bool:
		return &fastNode{always: x, never: !x}, true
	case map[string]any:
		return compileFastObject(x, depth)
	}
	return nil, false
}

func compileFastObject(s map[string]any, depth int) (*fastNode, bool) {
	n := &fastNode{minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}
	asserts := false
	for k, v := range s {
		if fastAnnotations[k] {
			if !annotationWellFormed(k, v) {
				return nil, false
			}
			continue
		}
		asserts = true
		var ok bool
		switch k {
		case "type":
			ok = n.setTypes(v)
		case "minimum":
			n.min, ok = boundOf(v)
		case "maximum":
			n.max, ok = boundOf(v)
		case "exclusiveMinimum":
			n.exclMin, ok = boundOf(v)
		case "exclusiveMaximum":
			n.exclMax, ok = boundOf(v)
		case "minLength":
			n.minLen, ok = countOf(v)
		case "maxLength":
			n.maxLen, ok = countOf(v)
		case "minItems":
			n.minItems, ok = countOf(v)
		case "maxItems":
			n.maxItems, ok = countOf(v)
		case "items":
			n.items, ok = compileFast(v, depth+1)
		case "additionalProperties":
			n.objectKeys = true
			n.addl, ok = compileFast(v, depth+1)
			if ok && n.addl.always {
				n.addl = nil
			}
		case "properties":
			n.objectKeys = true
			ok = n.setProperties(v, depth)
		case "required":
			n.objectKeys = true
			ok = n.setRequired(v)
		}
		if !ok {
			return nil, false
		}
	}
	if !asserts {
		n.always = true
	}
	return n, true
}

// annotationWellFormed reports whether annotation k's value has the type
// the meta-schema gives it, so that the library compiles the schema (the
// library's schema is compiled only when first needed, see Validator).
func annotationWellFormed(k string, v any) bool {
	switch k {
	case "title", "description", "$comment":
		_, ok := v.(string)
		return ok
	case "deprecated", "readOnly", "writeOnly":
		_, ok := v.(bool)
		return ok
	case "examples":
		_, ok := v.([]any)
		return ok
	}
	return true // default: any value
}

func (n *fastNode) setTypes(v any) bool {
	switch x := v.(type) {
	case string:
		t, ok := fastTypeNames[x]
		n.types = t
		return ok
	case []any:
		if len(x) == 0 {
			return false
		}
		for _, e := range x {
			s, ok := e.(string)
			t := fastTypeNames[s]
			if !ok || t == 0 || n.types&t != 0 { // the meta-schema wants the names unique
				return false
			}
			n.types |= t
		}
		return true
	}
	return false
}

func (n *fastNode) field(name string) fastField {
	if n.fields == nil {
		n.fields = map[string]fastField{}
	}
	return n.fields[name]
}

func (n *fastNode) setProperties(v any, depth int) bool {
	props, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for name, ps := range props {
		sub, ok := compileFast(ps, depth+1)
		if !ok {
			return false
		}
		f := n.field(name)
		f.prop = sub
		n.fields[name] = f
	}
	return true
}

func (n *fastNode) setRequired(v any) bool {
	req, ok := v.([]any)
	if !ok {
		return false
	}
	for _, e := range req {
		name, ok := e.(string)
		if !ok {
			return false
		}
		f := n.field(name)
		switch {
		case f.bit != 0:
			return false // named twice: the meta-schema wants the names unique
		case n.reqMask == math.MaxUint64:
			return false // more than 64 required names
		}
		f.bit = (n.reqMask + 1) &^ n.reqMask // the lowest free bit
		n.reqMask |= f.bit
		n.fields[name] = f
	}
	return true
}

// anyObject reports whether n accepts every object.
func (n *fastNode) anyObject() bool {
	if n.always {
		return true
	}
	return !n.never && (n.types == 0 || n.types&ftObject != 0) && !n.objectKeys
}

// emptyObject is the encoding of {}: a nil payload is validated as it.
var emptyObject = []byte{0x80}

// accepts reports whether payload p is certainly valid under n.
func (n *fastNode) accepts(p frame.Payload) bool {
	b := []byte(p)
	if b == nil {
		b = emptyObject
	}
	r := mpack.NewReader(b)
	return n.check(&r, b, 1) && r.Remaining() == 0
}

// check reads one value from r (whose input is b) and reports whether it
// is certainly valid under n. After false r is left anywhere.
func (n *fastNode) check(r *mpack.Reader, b []byte, depth int) bool {
	if n.never || depth > mpack.MaxDepth {
		return false
	}
	if n.always {
		_, err := r.Skip()
		return err == nil
	}
	off := r.Offset()
	if off >= len(b) {
		return false
	}
	c := b[off]
	switch {
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		if !n.allows(ftInteger) {
			return false
		}
		if c == 0xcf { // uint 64: maybe beyond int64
			u, err := r.ReadUint()
			if err != nil {
				return false
			}
			if u <= math.MaxInt64 {
				return n.checkInt(int64(u))
			}
			return n.checkHugeUint()
		}
		v, err := r.ReadInt()
		return err == nil && n.checkInt(v)
	case c == 0xca || c == 0xcb:
		if n.types != 0 && n.types&ftNumber == 0 {
			return false // "integer" may accept integral floats: the library decides
		}
		f, err := r.ReadFloat()
		return err == nil && n.checkFloat(f)
	case c == 0xc0:
		return n.allows(ftNull) && r.IsNil()
	case c == 0xc2 || c == 0xc3:
		if !n.allows(ftBool) {
			return false
		}
		_, err := r.ReadBool()
		return err == nil
	case (c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb):
		if !n.allows(ftString) {
			return false
		}
		s, err := r.ReadStr()
		if err != nil {
			return false
		}
		if n.minLen >= 0 || n.maxLen >= 0 {
			chars := utf8.RuneCount(s)
			if (n.minLen >= 0 && chars < n.minLen) || (n.maxLen >= 0 && chars > n.maxLen) {
				return false
			}
		}
		return true
	case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
		if !n.allows(ftArray) {
			return false
		}
		l, err := r.ReadArrayLen()
		if err != nil || (n.minItems >= 0 && l < n.minItems) || (n.maxItems >= 0 && l > n.maxItems) {
			return false
		}
		for range l {
			if n.items != nil {
				if !n.items.check(r, b, depth+1) {
					return false
				}
			} else if _, err := r.Skip(); err != nil {
				return false
			}
		}
		return true
	case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
		if !n.allows(ftObject) {
			return false
		}
		return n.checkObject(r, b, depth)
	}
	return false // bin, ext: no JSON form
}

func (n *fastNode) allows(t uint8) bool {
	if n.types == 0 {
		return true
	}
	if t == ftInteger {
		return n.types&(ftInteger|ftNumber) != 0
	}
	return n.types&t != 0
}

func (n *fastNode) checkObject(r *mpack.Reader, b []byte, depth int) bool {
	l, err := r.ReadMapLen()
	if err != nil {
		return false
	}
	var seen uint64
	for range l {
		k, err := r.ReadStr()
		if err != nil {
			return false
		}
		f := n.fields[string(k)] // no allocation: the conversion is only a lookup key
		seen |= f.bit
		sub := f.prop
		if sub == nil {
			sub = n.addl
		}
		if sub == nil {
			if _, err := r.Skip(); err != nil {
				return false
			}
		} else if !sub.check(r, b, depth+1) {
			return false
		}
	}
	return seen == n.reqMask
}

// checkInt checks an integer against the numeric bounds.
func (n *fastNode) checkInt(v int64) bool {
	return intAtLeast(v, n.min, false) && intAtLeast(v, n.exclMin, true) &&
		intAtMost(v, n.max, false) && intAtMost(v, n.exclMax, true)
}

func intAtLeast(v int64, b *fastBound, strict bool) bool {
	switch {
	case b == nil:
		return true
	case b.isInt:
		return v > b.i || (!strict && v == b.i)
	case v < -maxExactInt || v > maxExactInt:
		return false // not exact as a float: the library decides
	}
	return float64(v) > b.f || (!strict && float64(v) == b.f)
}

func intAtMost(v int64, b *fastBound, strict bool) bool {
	switch {
	case b == nil:
		return true
	case b.isInt:
		return v < b.i || (!strict && v == b.i)
	case v < -maxExactInt || v > maxExactInt:
		return false
	}
	return float64(v) < b.f || (!strict && float64(v) == b.f)
}

// checkHugeUint checks an integer above math.MaxInt64: above every integer
// bound; float bounds are left to the library.
func (n *fastNode) checkHugeUint() bool {
	for _, b := range []*fastBound{n.min, n.exclMin} {
		if b != nil && !b.isInt {
			return false
		}
	}
	return n.max == nil && n.exclMax == nil
}

// checkFloat checks a float against the numeric bounds.
func (n *fastNode) checkFloat(f float64) bool {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return false
	}
	for _, c := range [...]struct {
		b           *fastBound
		below, excl bool
	}{{n.min, false, false}, {n.exclMin, false, true}, {n.max, true, false}, {n.exclMax, true, true}} {
		if c.b == nil {
			continue
		}
		if !c.b.exact {
			return false
		}
		switch {
		case c.below && (f > c.b.f || (c.excl && f == c.b.f)):
			return false
		case !c.below && (f < c.b.f || (c.excl && f == c.b.f)):
			return false
		}
	}
	return true
}
