//go:build !unix

package writev

import (
	"io"
	"time"
)

// Vectored writes loaded pieces to one destination: here, where there is
// no writev, with one Write per piece.
type Vectored struct {
	dst  io.Writer
	left [][]byte // the loaded pieces; bounded by the batch they come from

	// OnFull and OnWritable are never called here: a write cannot tell a
	// full socket from a slow one.
	OnFull, OnWritable func()
}

// FullSince returns the zero time: here a write cannot tell a full socket
// from a slow one.
func (v *Vectored) FullSince() time.Time { return time.Time{} }

// Init sets v up to write to dst.
func (v *Vectored) Init(dst io.Writer) { v.dst = dst }

// Load makes pieces the next write's.
func (v *Vectored) Load(pieces [][]byte) { v.left = pieces }

// Write writes every loaded piece, in order, or returns the first error.
func (v *Vectored) Write() error {
	err := writeEach(v.dst, v.left)
	v.left = nil
	return err
}

// Try is Write: without a file descriptor of its own, a write cannot tell
// a full socket from a slow one, so it never stops part way.
func (v *Vectored) Try() (bool, error) { return true, v.Write() }

// Resume is never called: Try leaves nothing.
func (v *Vectored) Resume() error { return nil }

// ResumeKeep is never called: a write here cannot be interrupted.
func (v *Vectored) ResumeKeep() error { return nil }

// Unload drops the loaded pieces.
func (v *Vectored) Unload() { v.left = nil }

// Interruptible is false: a Write under way holds its piece to the end.
func (v *Vectored) Interruptible() bool { return false }

// Detach cannot take an attachment over: the Write that holds it is under
// way.
func (v *Vectored) Detach([]byte) bool { return false }
