package packetio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
)

// ReadBufSize is the Reader's initial buffer: large enough to take many small
// packets in one read. It grows, once, only when a header longer than it
// arrives (bounded by max_header). A Reader takes it from readBufs at its
// first read and, once ReleaseBuffer gives it back, at the next one, so
// that connections that wait (a host's idle connections) hold none.
const ReadBufSize = 16 << 10

// readBufs holds read buffers of ReadBufSize that no Reader is using:
// every Reader's, so that a buffer one connection gave back serves the
// next that reads. Only buffers of ReadBufSize go in (a grown one is
// left to the garbage collector), and sync.Pool keeps no more than the
// garbage collector allows it to.
var readBufs = sync.Pool{New: func() any {
	b := make([]byte, ReadBufSize)
	return &b
}}

// maxRecycled bounds the attachment buffers a Reader keeps for reuse (see
// Recycle); buffers handed back beyond it are dropped for the garbage
// collector.
const maxRecycled = 4

// Reader reads packets from one connection. It is owned by one goroutine:
// not safe for concurrent use, except Recycle.
//
// Each packet ReadPacket returns is new and shares nothing with the Reader
// (but see ReuseFrames); the caller may keep it and its slices. Small
// payloads (up to 128 bytes) are copied side by side into 2 KiB blocks,
// each with no room to grow into its neighbour: a small payload kept long
// after the frames read with it keeps its block alive. A caller
// that knows when it is done with an inline frame's data may hand it back
// with Recycle.
type Reader struct {
	src        io.Reader
	limits     wire.Limits
	buf        []byte       // nil until the first read, and after ReleaseBuffer
	bufp       *[]byte      // buf's entry of readBufs; nil once buf grew
	start, end int          // buffered bytes are buf[start:end]
	dec        wire.Decoder // what decoding keeps between packets
	expect     string       // ExpectCallID's hint, given to the next decode
	reuse      bool         // ReuseFrames: the decoder's frame is returned, not a copy
	err        error        // sticky: a protocol error or a read error (not a deadline's)

	// A packet whose attachment a read deadline interrupted: the next
	// ReadPacket reads the rest of its data (pendN bytes are in).
	pendPkt  wire.Packet
	pendData []byte
	pendN    int

	freeMu sync.Mutex
	free   [][]byte // recycled attachment buffers, at most maxRecycled
}

// Recycle hands back the Data of an inline-media frame this Reader
// returned, once the caller and everyone it gave the frame to are done with
// it: a later packet's attachment may be read into the same memory.
// Recycling is optional; without it every attachment gets a new buffer. For
// large media it saves what dominates the cost of reading: allocating and
// faulting in a fresh buffer per frame. Recycle is safe for concurrent use
// with ReadPacket. At most 4 buffers are kept: past that, a buffer larger
// than the smallest kept one takes its place, and any other is dropped, so
// that buffers left from small attachments never keep a connection from
// reusing the large ones that come after them.
func (r *Reader) Recycle(data []byte) {
	if cap(data) == 0 {
		return
	}
	r.freeMu.Lock()
	if len(r.free) < maxRecycled {
		r.free = append(r.free, data[:0])
	} else {
		small := 0
		for i, b := range r.free {
			if cap(b) < cap(r.free[small]) {
				small = i
			}
		}
		if cap(data) > cap(r.free[small]) {
			r.free[small] = data[:0]
		}
	}
	r.freeMu.Unlock()
}

// attachmentBuf returns a buffer of n bytes: the smallest recycled one that
// fits, or a new one.
func (r *Reader) attachmentBuf(n int) []byte {
	r.freeMu.Lock()
	best := -1
	for i, b := range r.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(r.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := r.free[best]
		last := len(r.free) - 1
		r.free[best], r.free[last] = r.free[last], nil
		r.free = r.free[:last]
		r.freeMu.Unlock()
		return b[:n]
	}
	r.freeMu.Unlock()
	return make([]byte, n)
}

// NewReader returns a Reader of src bounded by l (made Effective).
func NewReader(src io.Reader, l wire.Limits) *Reader {
	return &Reader{src: src, limits: Effective(l)}
}

// ReleaseBuffer gives the Reader's read buffer back for other Readers to
// use when nothing is buffered in it (Buffered is 0), and reports whether
// it did; the next ReadPacket takes a buffer again. A connection that
// waits, such as one kept idle for reuse, then holds no read buffer. The
// packets ReadPacket returned share nothing with the buffer (ReuseFrames
// included), so they stay valid. Not safe concurrently with ReadPacket.
func (r *Reader) ReleaseBuffer() bool {
	if r.buf == nil || r.end != r.start {
		return false
	}
	if r.bufp != nil {
		readBufs.Put(r.bufp)
	}
	r.buf, r.bufp, r.start, r.end = nil, nil, 0, 0
	return true
}

// ReuseFrames makes the Reader decode every frame packet into one *wire.Frame of
// its own, overwritten by the next ReadPacket, instead of a new one each
// time. The frame's slices (call id, payload, media) are still new or
// shared with nothing the Reader writes again, so a caller that copies the
// frame.Frame out before the next read may keep that copy whole; it saves
// an allocation per frame. Call it before the first ReadPacket.
func (r *Reader) ReuseFrames() { r.reuse = true }

// ExpectCallID tells the Reader that the frames it reads next will likely
// carry call id id, as a host knows when it has just sent a call's invoke:
// a frame whose call id is id then shares the string instead of
// allocating its own. Frames of the same call share one string without it;
// the hint saves the one allocation of a call's first frame.
func (r *Reader) ExpectCallID(id string) { r.expect = id }

// SetLimits replaces the Reader's limits, as after a handshake.
func (r *Reader) SetLimits(l wire.Limits) { r.limits = Effective(l) }

// Buffered reports how many bytes have been read from the connection but
// not yet returned as packets.
func (r *Reader) Buffered() int { return r.end - r.start }

// PacketBuffered reports whether the next ReadPacket returns without
// reading the connection: the next packet, attachment included, is already
// whole in the Reader's buffer (or the Reader holds a sticky error). A
// consumer that batches its hand-offs uses it to tell the last packet of a
// burst from one with more behind it.
func (r *Reader) PacketBuffered() bool {
	if r.err != nil {
		return true
	}
	n := r.end - r.start
	if n < protocol.PrefixLen {
		return false
	}
	h := binary.BigEndian.Uint32(r.buf[r.start:])
	a := binary.BigEndian.Uint32(r.buf[r.start+4:])
	return uint64(n) >= protocol.PrefixLen+uint64(h)+uint64(a)
}

// fill makes at least n bytes available at buf[start:], reading as much as
// the connection gives at once.
func (r *Reader) fill(n int) error {
	if r.end-r.start >= n {
		return nil
	}
	if r.buf == nil {
		r.bufp = readBufs.Get().(*[]byte)
		r.buf, r.start, r.end = *r.bufp, 0, 0
	}
	if n > len(r.buf) {
		nb := make([]byte, n)
		r.end = copy(nb, r.buf[r.start:r.end])
		r.buf, r.bufp, r.start = nb, nil, 0
	} else if r.start+n > len(r.buf) {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	for r.end-r.start < n {
		m, err := r.src.Read(r.buf[r.end:])
		r.end += m
		if err != nil {
			if r.end-r.start >= n {
				return nil
			}
			if errors.Is(err, io.EOF) && r.end-r.start > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// ReadPacket reads the next packet.
//
// Errors: io.EOF at a clean end between packets; io.ErrUnexpectedEOF inside a
// packet; an error matching wire.ErrProtocol when the packet breaks §2 or §3 (the
// connection is then unusable and every later call returns the same error);
// an invalid-packet error (matching frame.ErrInvalid; protocol.AsInvalid names
// the packet) when a frame, invoke or end
// parsed but broke the rules: the packet was consumed whole, so the
// connection is still in step; or the connection's own read error. A read
// deadline that passes (an error matching os.ErrDeadlineExceeded) leaves
// the Reader in step, even in the middle of a packet: the next ReadPacket,
// after the deadline is moved, goes on with the same packet.
func (r *Reader) ReadPacket() (wire.Packet, error) {
	if r.err != nil {
		return nil, r.err
	}
	var p wire.Packet
	var err error
	if r.pendData != nil {
		p, err = r.resume()
	} else {
		p, err = r.readPacket()
	}
	if err != nil {
		// An invalid packet leaves the connection in step. AsInvalid is
		// called on this path only: its errors.As target goes to the
		// heap, and the path without an error allocates only the packet.
		if _, inv := protocol.AsInvalid(err); !inv && !errors.Is(err, os.ErrDeadlineExceeded) {
			r.err = err
		}
	}
	return p, err
}

// resume goes on reading the attachment a deadline interrupted.
func (r *Reader) resume() (wire.Packet, error) {
	n, err := r.readSrc(r.pendData, r.pendN)
	if err != nil {
		r.pendN = n
		return nil, err
	}
	p, data := r.pendPkt, r.pendData
	r.pendPkt, r.pendData, r.pendN = nil, nil, 0
	p.(*wire.Frame).Media.(*frame.InlineMedia).Data = data
	return p, nil
}

func (r *Reader) readPacket() (wire.Packet, error) {
	if err := r.fill(protocol.PrefixLen); err != nil {
		return nil, err
	}
	h := binary.BigEndian.Uint32(r.buf[r.start:])
	a := binary.BigEndian.Uint32(r.buf[r.start+4:])
	if err := CheckLengths(h, a, r.limits); err != nil {
		return nil, err
	}
	// A packet whose attachment fits the buffer is read whole into it,
	// with the packets around it, in reads as large as the buffer: read
	// straight into its own buffer, each small attachment cost reads of
	// its own, of a few bytes each. A larger one is read from the
	// connection into its buffer without that copy.
	need := protocol.PrefixLen + int(h)
	if whole := need + int(a); a > 0 && whole <= max(len(r.buf), ReadBufSize) {
		need = whole
	}
	if err := r.fill(need); err != nil {
		return nil, err
	}
	hdr := r.buf[r.start+protocol.PrefixLen : r.start+protocol.PrefixLen+int(h)]
	p, err := r.dec.DecodeHeader(hdr, a, r.expect)
	r.expect = ""
	if f, ok := p.(*wire.Frame); ok && !r.reuse {
		// The decoder overwrites its frame with the next one: a copy is
		// the caller's to keep (its slices are shared with nothing the
		// decoder writes again).
		cp := *f
		p = &cp
	}
	r.start += protocol.PrefixLen + int(h)
	if err != nil {
		if _, inv := protocol.AsInvalid(err); inv && a > 0 {
			// Keep the connection in step: skip the attachment.
			if serr := r.skip(int(a)); serr != nil {
				return nil, serr
			}
		}
		return nil, err
	}
	if a > 0 {
		data := r.attachmentBuf(int(a))
		// From the buffer, then straight from the connection.
		n := copy(data, r.buf[r.start:r.end])
		r.start += n
		if n, err = r.readSrc(data, n); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				r.pendPkt, r.pendData, r.pendN = p, data, n
			}
			return nil, err
		}
		p.(*wire.Frame).Media.(*frame.InlineMedia).Data = data
	}
	return p, nil
}

// readSrc fills dst[n:] from the connection and returns how much of dst is
// filled; EOF before the end is io.ErrUnexpectedEOF.
func (r *Reader) readSrc(dst []byte, n int) (int, error) {
	for n < len(dst) {
		m, err := r.src.Read(dst[n:])
		n += m
		if err != nil && n < len(dst) {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
	}
	return n, nil
}

// skip discards n bytes through the buffer, allocating nothing.
func (r *Reader) skip(n int) error {
	for n > 0 {
		if r.start == r.end {
			r.start, r.end = 0, 0
			if err := r.fill(1); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					// Where the skip stopped is not kept: out of step.
					return fmt.Errorf("%w: read deadline inside an attachment being skipped", wire.ErrProtocol)
				}
				return err
			}
		}
		k := min(n, r.end-r.start)
		r.start += k
		n -= k
	}
	return nil
}
