//go:build !unix

package wire

import "io"

// vectored is how a Writer writes a batch of pieces: here, where there is
// no writev, one Write per piece.
type vectored struct {
	dst  io.Writer
	left [][]byte // the loaded pieces; bounded by the batch they come from
}

// init sets v up to write to dst.
func (v *vectored) init(dst io.Writer) { v.dst = dst }

// load makes pieces the next write's.
func (v *vectored) load(pieces [][]byte) { v.left = pieces }

// write writes every loaded piece, in order, or returns the first error.
func (v *vectored) write() error {
	err := writeEach(v.dst, v.left)
	v.left = nil
	return err
}

// try is write: without a file descriptor of its own, a write cannot tell
// a full socket from a slow one, so it never stops part way.
func (v *vectored) try() (bool, error) { return true, v.write() }

// resume is never called: try leaves nothing.
func (v *vectored) resume() error { return nil }

// resumeKeep is never called: a write here cannot be interrupted.
func (v *vectored) resumeKeep() error { return nil }

// unload drops the loaded pieces.
func (v *vectored) unload() { v.left = nil }

// interruptible is false: a Write under way holds its piece to the end.
func (v *vectored) interruptible() bool { return false }

// detach cannot take an attachment over: the Write that holds it is under
// way.
func (v *vectored) detach([]byte) bool { return false }
