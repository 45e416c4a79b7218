package asif

import (
	"errors"
	"fmt"
	"io"

	"github.com/skulkrt/skulk/internal/strictjson"
)

// Bounds of the strict JSON reader. They apply to a whole session document
// and, separately, to every assembled tool_arguments stream.
const (
	// MaxDocumentBytes is the largest input Read and Check accept (64 MiB).
	// Larger input is refused with ErrTooLarge before parsing.
	MaxDocumentBytes = strictjson.MaxBytes

	// MaxDepth is the deepest nesting of arrays and objects accepted (128).
	// The top-level value is at depth 1.
	MaxDepth = strictjson.MaxDepth

	// MaxValues is the largest number of JSON values (objects, arrays,
	// strings, numbers, literals and object keys excluded) in one input
	// (4,194,304). It bounds the memory of the decoded tree independently of
	// the byte size: a 64 MiB array of zeros would otherwise decode into
	// tens of millions of interface values.
	MaxValues = strictjson.MaxValues
)

// Sentinel reasons for refusing input as JSON. A *ReadError wraps exactly
// one of them; match with errors.Is.
var (
	// ErrTooLarge: the input is longer than MaxDocumentBytes.
	ErrTooLarge = strictjson.ErrTooLarge
	// ErrTooDeep: arrays and objects nest deeper than MaxDepth.
	ErrTooDeep = strictjson.ErrTooDeep
	// ErrTooManyValues: the input holds more than MaxValues values.
	ErrTooManyValues = strictjson.ErrTooManyValues
	// ErrSyntax: the input is not RFC 8259 JSON (including a byte order
	// mark, trailing data after the value, or an empty input).
	ErrSyntax = strictjson.ErrSyntax
	// ErrDuplicateKey: an object names the same key twice.
	ErrDuplicateKey = strictjson.ErrDuplicateKey
	// ErrNonFiniteNumber: NaN, Infinity or -Infinity appears where a value
	// is expected; these are not JSON numbers.
	ErrNonFiniteNumber = strictjson.ErrNonFiniteNumber
	// ErrInvalidUTF8: a string holds bytes that are not UTF-8 or an escaped
	// UTF-16 surrogate that is not part of a valid pair.
	ErrInvalidUTF8 = strictjson.ErrInvalidUTF8
)

// ReadError reports why input was refused as JSON and the byte offset where
// the problem was found. It never carries the input's content.
type ReadError struct {
	// Offset is the zero-based byte offset of the refused token (for
	// ErrTooLarge, the bound that was exceeded).
	Offset int64
	// Err is one of ErrTooLarge, ErrTooDeep, ErrTooManyValues, ErrSyntax,
	// ErrDuplicateKey, ErrNonFiniteNumber or ErrInvalidUTF8.
	Err error
}

// Error describes the reason and offset.
func (e *ReadError) Error() string {
	return fmt.Sprintf("%v (byte offset %d)", e.Err, e.Offset)
}

// Unwrap returns the sentinel reason.
func (e *ReadError) Unwrap() error { return e.Err }

// Read reads a whole document from r, refusing with a *ReadError wrapping
// ErrTooLarge as soon as more than MaxDocumentBytes arrive. Errors from r are
// returned as they are.
func Read(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxDocumentBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxDocumentBytes {
		return nil, &ReadError{Offset: MaxDocumentBytes, Err: ErrTooLarge}
	}
	return data, nil
}

// parseJSON decodes one value with the strict reader, reporting a refusal
// as a *ReadError.
func parseJSON(data []byte) (any, error) {
	v, err := strictjson.Parse(data)
	var se *strictjson.Error
	if errors.As(err, &se) {
		return nil, &ReadError{Offset: se.Offset, Err: se.Err}
	}
	return v, err
}
