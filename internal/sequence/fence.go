package sequence

import (
	"errors"
	"fmt"

	"github.com/skulkrt/skulk/frame"
)

// Refusals, one per rule. Each Accept error matches exactly one of them with
// errors.Is, and every one of them matches ErrRefused.
var (
	// ErrRefused is matched by every refusal of this package.
	ErrRefused = errors.New("sequence: frame refused")
	// ErrStaleCall: the frame belongs to another call.
	ErrStaleCall = &refusal{"frame of another call"}
	// ErrWrongDirection: the frame travels the other way.
	ErrWrongDirection = &refusal{"frame of the other direction"}
	// ErrGap: the sequence is above the next expected one.
	ErrGap = &refusal{"sequence gap"}
	// ErrDuplicate: the sequence is below the next expected one (a replay).
	ErrDuplicate = &refusal{"duplicate sequence"}
	// ErrDuplicateTerminal: a second terminal after the direction's terminal.
	ErrDuplicateTerminal = &refusal{"duplicate terminal"}
	// ErrAfterTerminal: a non-terminal frame after the direction's terminal.
	ErrAfterTerminal = &refusal{"frame after terminal"}
)

type refusal struct{ msg string }

func (r *refusal) Error() string { return "sequence: " + r.msg }

// Is makes every refusal match ErrRefused.
func (r *refusal) Is(target error) bool { return target == ErrRefused }

// Fence admits the frames of one direction of one call.
//
// The zero Fence admits nothing useful; use New.
type Fence struct {
	callID string
	dir    frame.Direction
	next   uint64
	closed bool
}

// New returns a fence for callID's dir direction whose first expected
// sequence is next: 0 for the caller direction (the host sends started), 1
// for the provider direction on the wire (the host owns the provider's
// started).
func New(callID string, dir frame.Direction, next uint64) *Fence {
	return &Fence{callID: callID, dir: dir, next: next}
}

// Accept admits f if it is the next frame of this direction, and closes the
// fence when f is a terminal. A refused frame changes nothing. The error
// wraps one of the package's refusals and names the sequence numbers, never
// the frame's content.
func (fc *Fence) Accept(f *frame.Frame) error {
	switch {
	case f.CallID != fc.callID:
		return ErrStaleCall
	case f.Direction != fc.dir:
		return ErrWrongDirection
	case fc.closed && f.Kind.IsTerminal():
		return ErrDuplicateTerminal
	case fc.closed:
		return ErrAfterTerminal
	case f.Sequence > fc.next:
		return fmt.Errorf("%w: got %d, want %d", ErrGap, f.Sequence, fc.next)
	case f.Sequence < fc.next:
		return fmt.Errorf("%w: got %d, want %d", ErrDuplicate, f.Sequence, fc.next)
	}
	fc.next++
	if f.Kind.IsTerminal() {
		fc.closed = true
	}
	return nil
}

// Next returns the sequence number the fence expects next. After the
// terminal it is one past the terminal's.
func (fc *Fence) Next() uint64 { return fc.next }

// Closed reports whether the direction's terminal has been admitted.
func (fc *Fence) Closed() bool { return fc.closed }
