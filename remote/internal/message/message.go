// Package message is the format of the messages a remote call's two ends
// exchange over NATS (docs/protocol.md §10): an 18-byte header (version,
// kind, sequence, arg) and a body, every length checked before anything
// is kept. Parse reads one message and Append writes one; a message that
// breaks the format is an *Error matching ErrMalformed, which fails that
// call only.
package message

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/skulkrt/skulk/internal/protocol"
)

// maxCallIDBytes bounds a tree message's body before it is read as a
// string: a call id is 1 to 128 characters (docs/protocol.md §4), each at
// most 4 bytes of UTF-8.
const maxCallIDBytes = 4 * 128

// Kind is the type of one message of a call over NATS
// (docs/protocol.md §10). Parsing an unknown kind is an error.
type Kind uint8

// The message kinds.
const (
	// KindOpen starts a call: the caller's first message, sent to the
	// service's call subject with the caller's reply subject. Its arg is
	// the caller's receive window; its body the first bytes of the
	// caller's stream (at most MaxOpenData).
	KindOpen Kind = iota + 1
	// KindAccept is the serving host's first message: its arg is its
	// receive window for the caller's stream (counted from the stream's
	// first byte, the open's included), its body the subject the caller
	// sends the call's later messages to.
	KindAccept
	// KindData carries the next bytes of the sender's stream (1 to
	// MaxFragment of them), within the credit the receiver gave.
	KindData
	// KindCredit raises the sender's limit: arg is the stream offset the
	// receiver lets the peer send up to. It only moves forward.
	KindCredit
	// KindPing says the sender is alive; sent when nothing else was sent
	// for a heartbeat interval.
	KindPing
	// KindCancel asks the serving host to cancel the call (caller to host
	// only). It needs no credit, so it passes a stream that is blocked.
	KindCancel
	// KindFin ends the sender's stream: nothing follows it. Its arg holds
	// flags (FinSynthetic).
	KindFin
	// KindAbort ends the call at once: its arg is the frame.Code of the
	// failure, its body a reason (at most MaxReason bytes of UTF-8).
	KindAbort
	// KindTree names the tree the serving host records the call in (host
	// to caller, at most once, after the accept and before the fin): its
	// body is that tree's id, a call id (1 to 128 characters of UTF-8),
	// its arg 0.
	KindTree
)

var kindNames = [...]string{"", "open", "accept", "data", "credit", "ping", "cancel", "fin", "abort", "tree"}

// String returns the kind's name, or "kind(N)" for an unknown value.
func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Message layout and limits (docs/protocol.md §10).
const (
	// Version is the version of the message format, the first byte of
	// every message.
	Version = 1
	// HeaderLen is the fixed header of every message: version (1 byte),
	// kind (1), sequence (8, big-endian), arg (8, big-endian).
	HeaderLen = 18
	// MaxFragment is the most stream bytes one data message may carry,
	// whatever the server's max_payload; a sender uses less when the
	// server allows less.
	MaxFragment = 1 << 20
	// MaxOpenData is the most stream bytes an open may carry.
	MaxOpenData = 64 << 10
	// MaxSubject is the longest subject an accept may name, in bytes.
	MaxSubject = 255
	// MaxReason is the longest reason an abort may carry, in bytes.
	MaxReason = 512
	// MaxMessage is the largest message a receiver accepts.
	MaxMessage = HeaderLen + MaxFragment
)

// FinSynthetic is a flag of a fin's arg: the provider terminal before it
// was made up by the serving host (its child died, hung, timed out or
// broke the protocol), not written by the provider.
const FinSynthetic = 1

// ErrMalformed is matched (errors.Is) by every *MessageError: a message of a
// call that breaks docs/protocol.md §10. It fails that call only.
var ErrMalformed = errors.New("remote: malformed message")

// Error reports a message that breaks the format; it names the
// field and the rule, never the value.
type Error struct {
	// Field is the part at fault: "length", "version", "kind",
	// "sequence", "arg" or "body".
	Field string
	// Reason says which rule it breaks.
	Reason string
}

func (e *Error) Error() string {
	return "remote: malformed message: " + e.Field + ": " + e.Reason
}

// Is makes a *MessageError match ErrMessage.
func (e *Error) Is(target error) bool { return target == ErrMalformed }

// Message is one parsed message. Body aliases the bytes it was parsed
// from: it is valid as long as they are.
type Message struct {
	Kind Kind
	Seq  uint64
	Arg  uint64
	Body []byte
}

// Parse parses b, checking the length of every part against the
// limits above before anything is kept. It never allocates.
func Parse(b []byte) (Message, error) {
	if len(b) < HeaderLen {
		return Message{}, &Error{"length", "shorter than the header"}
	}
	if len(b) > MaxMessage {
		return Message{}, &Error{"length", "over the message limit"}
	}
	if b[0] != Version {
		return Message{}, &Error{"version", "unknown version"}
	}
	m := Message{Kind: Kind(b[1]), Seq: binary.BigEndian.Uint64(b[2:]), Arg: binary.BigEndian.Uint64(b[10:]), Body: b[HeaderLen:]}
	n := len(m.Body)
	switch m.Kind {
	case KindOpen:
		if n > MaxOpenData {
			return Message{}, &Error{"body", "open data over its limit"}
		}
		if m.Seq != 0 {
			return Message{}, &Error{"sequence", "an open is message 0"}
		}
		if m.Arg == 0 {
			return Message{}, &Error{"arg", "a window of zero"}
		}
	case KindAccept:
		if n == 0 || n > MaxSubject || !validSubject(m.Body) {
			return Message{}, &Error{"body", "not a subject of 1 to 255 bytes without spaces or wildcards"}
		}
		if m.Seq != 0 {
			return Message{}, &Error{"sequence", "an accept is message 0"}
		}
		if m.Arg == 0 {
			return Message{}, &Error{"arg", "a window of zero"}
		}
	case KindData:
		if n == 0 {
			return Message{}, &Error{"body", "empty data"}
		}
		if m.Arg != 0 {
			return Message{}, &Error{"arg", "must be 0"}
		}
	case KindCredit:
		if n != 0 {
			return Message{}, &Error{"body", "must be empty"}
		}
	case KindPing, KindCancel:
		if n != 0 || m.Arg != 0 {
			return Message{}, &Error{"body", "arg and body must be empty"}
		}
	case KindFin:
		if n != 0 {
			return Message{}, &Error{"body", "must be empty"}
		}
		if m.Arg&^FinSynthetic != 0 {
			return Message{}, &Error{"arg", "unknown flags"}
		}
	case KindAbort:
		if n > MaxReason || !utf8.Valid(m.Body) {
			return Message{}, &Error{"body", "a reason over 512 bytes or not UTF-8"}
		}
		if m.Arg == 0 || m.Arg > 255 {
			return Message{}, &Error{"arg", "not a failure code"}
		}
	case KindTree:
		if n > maxCallIDBytes || protocol.CheckCallID(string(m.Body)) != nil {
			return Message{}, &Error{"body", "not a call id of 1 to 128 characters of UTF-8"}
		}
		if m.Arg != 0 {
			return Message{}, &Error{"arg", "must be 0"}
		}
	default:
		return Message{}, &Error{"kind", "unknown kind"}
	}
	return m, nil
}

// Append appends the encoding of m to b.
func Append(b []byte, m Message) []byte {
	b = append(b, Version, byte(m.Kind))
	b = binary.BigEndian.AppendUint64(b, m.Seq)
	b = binary.BigEndian.AppendUint64(b, m.Arg)
	return append(b, m.Body...)
}

// validSubject reports whether s is a literal NATS subject: printable
// ASCII tokens separated by dots, no wildcards, no empty token.
func validSubject(s []byte) bool {
	tok := 0
	for _, c := range s {
		switch {
		case c == '.':
			if tok == 0 {
				return false
			}
			tok = 0
		case c <= ' ' || c >= 0x7f || c == '*' || c == '>':
			return false
		default:
			tok++
		}
	}
	return tok > 0
}
