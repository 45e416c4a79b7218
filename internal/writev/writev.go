//go:build unix

package writev

import (
	"bytes"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// maxIOV bounds the pieces of one writev call (the kernel's IOV_MAX). A
// batch with more pieces is written by several calls.
const maxIOV = 1024

// Vectored writes loaded pieces to one destination: with writev(2) when
// the destination has a syscall.RawConn, and one Write per piece
// otherwise. The zero value is ready after Init.
type Vectored struct {
	raw syscall.RawConn // dst's, when dst has one: pieces go out with writev
	dst io.Writer       // otherwise, one Write per piece
	// nonblock says raw's descriptor is non-blocking, so that writev
	// returns at once: only then may Detach wait for it (a blocking
	// descriptor, from os.NewFile of one, blocks writev in the kernel).
	nonblock bool

	// The write under way. They live here, not on write's stack, so that
	// the function given to raw.Write (made once, in init) needs no
	// closure per write. Both are bounded by the batch they come from.
	mu   sync.Mutex      // guards left and vec between writev and detach
	left [][]byte        // pieces not yet written; a piece may be partly written
	vec  []syscall.Iovec // the iovecs of one writev call, at most maxIOV
	err  error           // a writev error other than EAGAIN
	fn   func(uintptr) bool

	// noWait makes writev stop at a full socket (setting full) instead
	// of having raw.Write wait for it: see Try.
	noWait, full bool

	// OnFull, when set, is called on the writing goroutine just before a
	// write waits for a full socket, and OnWritable when it writes again
	// after such a wait (before it takes mu, so it may block). Set and
	// cleared by the one writer, between writes (coalesce's gated
	// flusher gives its Gate slot back and takes it again there).
	OnFull, OnWritable func()
	waited             bool // the last writev call stopped at a full socket and had raw.Write wait

	// fullAt is when the write under way (from Load to Unload) first found
	// the socket full, as 1 plus the nanoseconds since clockBase; 0 when
	// it has not. Read by FullSince from any goroutine.
	fullAt atomic.Int64
}

// clockBase is the origin of fullAt's readings, taken once: a time made
// from it keeps a monotonic clock reading, so a step of the wall clock
// neither ages a waiting write nor makes it new.
var clockBase = time.Now()

// FullSince returns when the write under way first found its socket full
// (a write that had to stop, or wait, for the peer to read), and the zero
// time when no write is under way or the one under way has not met a full
// socket. A write that makes progress after that keeps its time until it
// ends: a peer that reads a byte now and then does not make it new. Safe
// for concurrent use.
func (v *Vectored) FullSince() time.Time {
	if at := v.fullAt.Load(); at != 0 {
		return clockBase.Add(time.Duration(at - 1))
	}
	return time.Time{}
}

// Init sets v up to write to dst.
func (v *Vectored) Init(dst io.Writer) {
	v.dst = dst
	if sc, ok := dst.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			v.raw = raw
			raw.Control(func(fd uintptr) {
				flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
				v.nonblock = errno == 0 && flags&syscall.O_NONBLOCK != 0
			})
		}
	}
	v.fn = v.writev
}

// Interruptible reports whether a write under way returns when the
// destination's write deadline passes, leaving what it did not write
// loaded: a file descriptor in non-blocking mode, waited for by the
// runtime's poller.
func (v *Vectored) Interruptible() bool { return v.raw != nil && v.nonblock }

// Load makes pieces the next write's: Write, Try and Detach work on them.
// The Writer calls it with its lock held while no write is under way, so
// that a sender that gives up waiting (Detach) always finds its bytes
// here or still in the Writer's queue.
func (v *Vectored) Load(pieces [][]byte) {
	v.mu.Lock()
	v.left, v.err, v.waited = pieces, nil, false
	v.mu.Unlock()
	if v.fullAt.Load() != 0 { // a load costs less than a store on every write
		v.fullAt.Store(0)
	}
}

// Write writes every loaded piece, in order, or returns the first error.
func (v *Vectored) Write() error {
	if v.raw == nil {
		err := writeEach(v.dst, v.left)
		v.Unload()
		return err
	}
	return v.Resume()
}

// Try is Write for a goroutine that must not wait for the socket: it
// writes what the socket takes now and reports false when the socket is
// full, the rest kept in v for Resume. A destination without a file
// descriptor is written whole, as by write.
func (v *Vectored) Try() (done bool, err error) {
	if v.raw == nil {
		return true, v.Write()
	}
	v.noWait, v.full = true, false
	err = v.raw.Write(v.fn)
	v.noWait = false
	if err == nil {
		err = v.err
	}
	if err == nil && v.full {
		return false, nil
	}
	v.Unload()
	return true, err
}

// Resume writes what is loaded (what Try left, or all of it), waiting for
// the socket whenever it is full.
func (v *Vectored) Resume() error {
	err := v.ResumeKeep()
	v.Unload()
	return err
}

// ResumeKeep is Resume that keeps what is left loaded when the write
// fails (a deadline that interrupted it, say), so that the caller may
// detach it and resume later; the caller unloads.
func (v *Vectored) ResumeKeep() error {
	err := v.raw.Write(v.fn)
	if err == nil {
		err = v.err
	}
	return err
}

// Unload ends a write: it drops the references to its pieces.
func (v *Vectored) Unload() {
	v.mu.Lock()
	clear(v.vec)
	v.left, v.err = nil, nil
	v.mu.Unlock()
	if v.fullAt.Load() != 0 { // a load costs less than a store on every write
		v.fullAt.Store(0)
	}
}

// Detach replaces what is left to write of data (an attachment of the
// loaded pieces) with a copy, so that data's owner may reuse it while the
// write goes on, and reports whether it could: a destination without a
// file descriptor is written by Write calls that hold their piece, and a
// blocking descriptor's writev holds v.mu until the peer reads, so there
// it cannot.
func (v *Vectored) Detach(data []byte) bool {
	if v.raw == nil || !v.nonblock {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, p := range v.left {
		if aliases(p, data) {
			v.left[i] = bytes.Clone(p)
		}
	}
	return true
}

// aliases reports whether p is a non-empty suffix of data's memory: a
// piece of data's that a write has consumed the front of.
func aliases(p, data []byte) bool {
	k := len(data) - len(p)
	return len(p) > 0 && k >= 0 && &data[k] == &p[0]
}

// writev writes v.left to fd, as raw.Write calls it: it reports false
// when the socket is full (raw.Write then waits until it takes bytes, or
// its deadline passes) and true when everything is written or v.err is
// set.
func (v *Vectored) writev(fd uintptr) bool {
	if v.waited {
		v.waited = false
		if v.OnWritable != nil {
			v.OnWritable()
		}
	}
	// Held through the syscall, which on a non-blocking descriptor does
	// not block: Detach must not change a piece the kernel is copying
	// from. (On a blocking one Detach never takes it.)
	v.mu.Lock()
	defer v.mu.Unlock()
	for len(v.left) > 0 {
		v.vec = v.vec[:0]
		for _, p := range v.left {
			if len(v.vec) == maxIOV {
				break
			}
			if len(p) > 0 {
				iov := syscall.Iovec{Base: &p[0]}
				iov.SetLen(len(p))
				v.vec = append(v.vec, iov)
			}
		}
		if len(v.vec) == 0 {
			v.left = nil
			return true
		}
		var n uintptr
		var errno syscall.Errno
		if v.nonblock {
			// It never waits: made raw, it leaves the runtime's
			// monitor thread asleep (see package nbsys).
			n, _, errno = syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&v.vec[0])), uintptr(len(v.vec)))
		} else {
			n, _, errno = syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&v.vec[0])), uintptr(len(v.vec)))
		}
		switch errno {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if v.fullAt.Load() == 0 {
				v.fullAt.Store(int64(time.Since(clockBase)) + 1)
			}
			if v.noWait {
				v.full = true
				return true
			}
			if v.OnFull != nil {
				v.OnFull()
			}
			v.waited = true
			return false
		default:
			v.err = os.NewSyscallError("writev", errno)
			return true
		}
		if n == 0 {
			v.err = io.ErrShortWrite // a socket that takes nothing and says nothing: do not spin
			return true
		}
		v.consume(int(n))
	}
	return true
}

// consume drops the first n written bytes from v.left.
func (v *Vectored) consume(n int) {
	for len(v.left) > 0 && n >= len(v.left[0]) {
		n -= len(v.left[0])
		v.left = v.left[1:]
	}
	if len(v.left) > 0 {
		v.left[0] = v.left[0][n:]
	}
}
