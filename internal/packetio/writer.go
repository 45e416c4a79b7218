package packetio

import (
	"io"
	"sync"

	"github.com/skulkrt/skulk/internal/writev"
	"github.com/skulkrt/skulk/wire"
)

// Writer writes packets to one connection, each with one vectored write of
// its header and its attachment (the attachment is never copied). It has no
// goroutine and no buffer beyond one packet's header, and is safe for
// concurrent use: packets go out whole, one at a time, in the order their
// WritePacket calls took the Writer's lock.
type Writer struct {
	mu     sync.Mutex
	limits wire.Limits
	dst    writev.Vectored
	hdr    []byte   // the header being written; reused, at most max_header
	iov    [][]byte // header and attachment of the packet being written
	err    error    // sticky: the first write error
}

// NewWriter returns a Writer to dst that refuses packets over l (made
// Effective). It needs no Close.
func NewWriter(dst io.Writer, l wire.Limits) *Writer {
	w := &Writer{limits: Effective(l)}
	w.dst.Init(dst)
	return w
}

// WritePacket validates p and writes it, returning once the connection has
// taken it whole (a full socket blocks it: backpressure).
//
// Errors: an *InvalidError for a packet that breaks the rules and
// ErrHeaderLength or ErrAttachmentLength for one over the limits (nothing
// is written and the connection is unaffected); the connection's write
// error, which every later call returns too, since a packet may have been
// written in part.
func (w *Writer) WritePacket(p wire.Packet) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	hdr, att, err := wire.AppendPacket(w.hdr[:0], p, w.limits)
	if err != nil {
		return err
	}
	w.hdr = hdr
	w.iov = append(w.iov[:0], hdr)
	if len(att) > 0 {
		w.iov = append(w.iov, att)
	}
	w.dst.Load(w.iov)
	w.err = w.dst.Write()
	clear(w.iov) // keeps no reference to the attachment
	return w.err
}

// WritePackets writes ps in order with one vectored write, as WritePacket
// writes one: for packets that go out together (an invoke and its first
// frame, a terminal and its end). A packet refused by the rules or the
// limits refuses them all, with nothing written.
func (w *Writer) WritePackets(ps ...wire.Packet) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	type piece struct {
		end int
		att []byte
	}
	var buf [4]piece
	pieces := buf[:0]
	b := w.hdr[:0]
	for _, p := range ps {
		var att []byte
		var err error
		if b, att, err = wire.AppendPacket(b, p, w.limits); err != nil {
			return err
		}
		pieces = append(pieces, piece{len(b), att})
	}
	w.hdr = b
	w.iov = w.iov[:0]
	start := 0
	for _, pc := range pieces {
		w.iov = append(w.iov, b[start:pc.end])
		if len(pc.att) > 0 {
			w.iov = append(w.iov, pc.att)
		}
		start = pc.end
	}
	w.dst.Load(w.iov)
	w.err = w.dst.Write()
	clear(w.iov)
	return w.err
}
