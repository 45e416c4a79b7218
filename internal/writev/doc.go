// Package writev writes a list of byte slices to a connection as one
// vectored write (writev(2)) where the destination has a file descriptor,
// and with one Write per slice elsewhere. It does its own system call
// rather than use net.Buffers so that the packages built on it, and every
// provider built on those, do not link package net: a Go binary that links
// net is linked dynamically (net's resolver uses cgo) unless built with
// CGO_ENABLED=0, and a dynamically linked provider pays the dynamic loader
// on every start (docs/performance.md, "Recorded run", the start target).
//
// A Vectored is used by one write at a time; its owner serializes Load,
// Write, Try, Resume and Unload. Detach may be called by another goroutine
// while a write is under way.
package writev

import "io"

// Dest returns the destination v writes to.
func (v *Vectored) Dest() io.Writer { return v.dst }

// writeEach writes every piece of pieces to dst with one Write each, in
// order, or returns the first error: the vectored write of a destination
// that has no file descriptor. A Write that takes less than its piece
// without an error is io.ErrShortWrite, as io.Writer's contract makes it.
func writeEach(dst io.Writer, pieces [][]byte) error {
	for _, p := range pieces {
		n, err := dst.Write(p)
		if err != nil {
			return err
		}
		if n < len(p) {
			return io.ErrShortWrite
		}
	}
	return nil
}
