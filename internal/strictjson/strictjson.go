// Package strictjson is the strict JSON reader of package asif: RFC 8259
// with duplicate keys, NaN and Infinity, invalid UTF-8 and unpaired
// surrogate escapes refused, numbers kept as their exact text
// (json.Number), and bounded size, depth and value count. Package asif
// checks documents with it and asif/export compares argument streams with
// it, so that both read JSON exactly alike. Its messages carry the "asif:"
// prefix because they reach users as asif errors.
package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Bounds of the reader. Package asif applies them to a whole session
// document and, separately, to every assembled tool_arguments stream.
const (
	// MaxBytes is the largest input Parse accepts (64 MiB). Larger input
	// is refused with ErrTooLarge before parsing.
	MaxBytes = 64 << 20

	// MaxDepth is the deepest nesting of arrays and objects accepted (128).
	// The top-level value is at depth 1.
	MaxDepth = 128

	// MaxValues is the largest number of JSON values (objects, arrays,
	// strings, numbers, literals and object keys excluded) in one input
	// (4,194,304). It bounds the memory of the decoded tree independently of
	// the byte size: a 64 MiB array of zeros would otherwise decode into
	// tens of millions of interface values.
	MaxValues = 1 << 22
)

// Sentinel reasons for refusing input as JSON. A *Error wraps exactly
// one of them; match with errors.Is.
var (
	// ErrTooLarge: the input is longer than MaxBytes.
	ErrTooLarge = errors.New("asif: input exceeds MaxDocumentBytes")
	// ErrTooDeep: arrays and objects nest deeper than MaxDepth.
	ErrTooDeep = errors.New("asif: JSON nesting exceeds MaxDepth")
	// ErrTooManyValues: the input holds more than MaxValues values.
	ErrTooManyValues = errors.New("asif: JSON value count exceeds MaxValues")
	// ErrSyntax: the input is not RFC 8259 JSON (including a byte order
	// mark, trailing data after the value, or an empty input).
	ErrSyntax = errors.New("asif: invalid JSON syntax")
	// ErrDuplicateKey: an object names the same key twice.
	ErrDuplicateKey = errors.New("asif: duplicate JSON object key")
	// ErrNonFiniteNumber: NaN, Infinity or -Infinity appears where a value
	// is expected; these are not JSON numbers.
	ErrNonFiniteNumber = errors.New("asif: non-finite number constant")
	// ErrInvalidUTF8: a string holds bytes that are not UTF-8 or an escaped
	// UTF-16 surrogate that is not part of a valid pair.
	ErrInvalidUTF8 = errors.New("asif: string is not valid UTF-8")
)

// Error reports why input was refused as JSON and the byte offset where
// the problem was found. It never carries the input's content.
type Error struct {
	// Offset is the zero-based byte offset of the refused token (for
	// ErrTooLarge, the bound that was exceeded).
	Offset int64
	// Err is one of ErrTooLarge, ErrTooDeep, ErrTooManyValues, ErrSyntax,
	// ErrDuplicateKey, ErrNonFiniteNumber or ErrInvalidUTF8.
	Err error
}

// Error describes the reason and offset.
func (e *Error) Error() string {
	return fmt.Sprintf("%v (byte offset %d)", e.Err, e.Offset)
}

// Unwrap returns the sentinel reason.
func (e *Error) Unwrap() error { return e.Err }

// Parse decodes one JSON value strictly: duplicate object keys, NaN and
// Infinity, invalid UTF-8, unpaired surrogate escapes, trailing data, input
// over MaxBytes, nesting over MaxDepth and more than MaxValues values
// are refused with a *Error. The result uses map[string]any, []any,
// string, bool, nil and json.Number; numbers keep their exact text. It is
// safe to call concurrently.
func Parse(data []byte) (any, error) {
	if len(data) > MaxBytes {
		return nil, &Error{Offset: MaxBytes, Err: ErrTooLarge}
	}
	p := parser{data: data}
	p.space()
	v, err := p.value(1)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos != len(p.data) {
		return nil, p.fail(ErrSyntax)
	}
	return v, nil
}

// parser is a recursive-descent RFC 8259 parser. Recursion is bounded by
// MaxDepth, so peer input cannot exhaust the stack.
type parser struct {
	data   []byte
	pos    int
	values int
	buf    []byte // reused scratch space for strings with escapes
}

func (p *parser) fail(err error) *Error {
	return &Error{Offset: int64(p.pos), Err: err}
}

func (p *parser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.fail(ErrSyntax)
	}
	p.values++
	if p.values > MaxValues {
		return nil, p.fail(ErrTooManyValues)
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == 'N' || c == 'I' || c == '+':
		return nil, p.fail(ErrNonFiniteNumber)
	default:
		return nil, p.fail(ErrSyntax)
	}
}

func (p *parser) literal(word string) error {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return p.fail(ErrSyntax)
	}
	p.pos += len(word)
	return nil
}

func (p *parser) object(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, p.fail(ErrTooDeep)
	}
	p.pos++ // '{'
	obj := map[string]any{}
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return obj, nil
	}
	for {
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.fail(ErrSyntax)
		}
		keyAt := p.pos
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		if _, dup := obj[key]; dup {
			return nil, &Error{Offset: int64(keyAt), Err: ErrDuplicateKey}
		}
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.fail(ErrSyntax)
		}
		p.pos++
		p.space()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		obj[key] = v
		p.space()
		if p.pos >= len(p.data) {
			return nil, p.fail(ErrSyntax)
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return obj, nil
		default:
			return nil, p.fail(ErrSyntax)
		}
	}
}

func (p *parser) array(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, p.fail(ErrTooDeep)
	}
	p.pos++ // '['
	arr := []any{}
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return arr, nil
	}
	for {
		p.space()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
		p.space()
		if p.pos >= len(p.data) {
			return nil, p.fail(ErrSyntax)
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return arr, nil
		default:
			return nil, p.fail(ErrSyntax)
		}
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and keeps its
// text exactly.
func (p *parser) number() (any, error) {
	start := p.pos
	d := p.data
	if d[p.pos] == '-' {
		p.pos++
		if p.pos < len(d) && d[p.pos] == 'I' {
			return nil, p.fail(ErrNonFiniteNumber)
		}
	}
	switch {
	case p.pos < len(d) && d[p.pos] == '0':
		p.pos++
	case p.pos < len(d) && d[p.pos] >= '1' && d[p.pos] <= '9':
		for p.pos < len(d) && isDigit(d[p.pos]) {
			p.pos++
		}
	default:
		return nil, p.fail(ErrSyntax)
	}
	if p.pos < len(d) && d[p.pos] == '.' {
		p.pos++
		if p.pos >= len(d) || !isDigit(d[p.pos]) {
			return nil, p.fail(ErrSyntax)
		}
		for p.pos < len(d) && isDigit(d[p.pos]) {
			p.pos++
		}
	}
	if p.pos < len(d) && (d[p.pos] == 'e' || d[p.pos] == 'E') {
		p.pos++
		if p.pos < len(d) && (d[p.pos] == '+' || d[p.pos] == '-') {
			p.pos++
		}
		if p.pos >= len(d) || !isDigit(d[p.pos]) {
			return nil, p.fail(ErrSyntax)
		}
		for p.pos < len(d) && isDigit(d[p.pos]) {
			p.pos++
		}
	}
	return json.Number(d[start:p.pos]), nil
}

// str decodes a string starting at the opening quote.
func (p *parser) str() (string, error) {
	p.pos++ // opening quote
	start := p.pos
	d := p.data
	// Fast path: no escapes.
	for p.pos < len(d) {
		c := d[p.pos]
		switch {
		case c == '"':
			s := d[start:p.pos]
			if !utf8.Valid(s) {
				p.pos = start + firstInvalid(s)
				return "", p.fail(ErrInvalidUTF8)
			}
			p.pos++
			return string(s), nil
		case c == '\\':
			return p.slowStr(start)
		case c < 0x20:
			return "", p.fail(ErrSyntax)
		}
		p.pos++
	}
	return "", p.fail(ErrSyntax)
}

func firstInvalid(s []byte) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(s)
}

func (p *parser) slowStr(start int) (string, error) {
	d := p.data
	buf := append(p.buf[:0], d[start:p.pos]...)
	if !utf8.Valid(buf) {
		p.pos = start + firstInvalid(buf)
		return "", p.fail(ErrInvalidUTF8)
	}
	for p.pos < len(d) {
		c := d[p.pos]
		switch {
		case c == '"':
			p.pos++
			p.buf = buf
			return string(buf), nil
		case c < 0x20:
			return "", p.fail(ErrSyntax)
		case c == '\\':
			if p.pos+1 >= len(d) {
				return "", p.fail(ErrSyntax)
			}
			esc := d[p.pos+1]
			switch esc {
			case '"', '\\', '/':
				buf = append(buf, esc)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := p.hex4(p.pos + 2)
				if !ok {
					return "", p.fail(ErrSyntax)
				}
				switch {
				case utf16.IsSurrogate(r):
					if r >= 0xDC00 || p.pos+12 > len(d) || d[p.pos+6] != '\\' || d[p.pos+7] != 'u' {
						return "", p.fail(ErrInvalidUTF8)
					}
					lo, ok := p.hex4(p.pos + 8)
					if !ok {
						return "", p.fail(ErrSyntax)
					}
					pair := utf16.DecodeRune(r, lo)
					if pair == utf8.RuneError {
						return "", p.fail(ErrInvalidUTF8)
					}
					buf = utf8.AppendRune(buf, pair)
					p.pos += 6
				default:
					buf = utf8.AppendRune(buf, r)
				}
				p.pos += 4
			default:
				return "", p.fail(ErrSyntax)
			}
			p.pos += 2
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			p.pos++
		default:
			r, n := utf8.DecodeRune(d[p.pos:])
			if r == utf8.RuneError && n <= 1 {
				return "", p.fail(ErrInvalidUTF8)
			}
			buf = append(buf, d[p.pos:p.pos+n]...)
			p.pos += n
		}
	}
	return "", p.fail(ErrSyntax)
}

func (p *parser) hex4(at int) (rune, bool) {
	if at+4 > len(p.data) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p.data[at:at+4]), 16, 16)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}
