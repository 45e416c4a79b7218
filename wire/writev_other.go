//go:build !unix

package wire

import "io"

// vectored is how a Writer writes a batch of pieces: here, where there is
// no writev, one Write per piece.
type vectored struct {
	dst io.Writer
}

// init sets v up to write to dst.
func (v *vectored) init(dst io.Writer) { v.dst = dst }

// write writes every piece of pieces, in order, or returns the first error.
func (v *vectored) write(pieces [][]byte) error {
	return writeEach(v.dst, pieces)
}

// try is write: without a file descriptor of its own, a write cannot tell
// a full socket from a slow one, so it never stops part way.
func (v *vectored) try(pieces [][]byte) (bool, error) {
	return true, writeEach(v.dst, pieces)
}

// resume is never called: try leaves nothing.
func (v *vectored) resume() error { return nil }
