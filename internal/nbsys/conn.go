//go:build unix

package nbsys

import "syscall"

// Conn reads a descriptor in non-blocking mode through its
// syscall.RawConn: each read is Read's system call, made inside the
// RawConn's callback, so that the descriptor cannot be closed and its
// number reused while the call runs, and the runtime's poller waits when
// nothing is there yet. A Conn is used by one reader at a time; it
// allocates nothing per read.
type Conn struct {
	rc     syscall.RawConn
	onWait func()                // called each time a read finds nothing and the poller is to wait; may be nil
	fn     func(fd uintptr) bool // read, made once

	// Set by ReadRaw for fn.
	p   []byte
	n   int
	err error
}

// NewConn returns a Conn reading through rc. onWait, if not nil, is
// called on the reading goroutine each time a read finds the descriptor
// empty, before the poller waits for it.
func NewConn(rc syscall.RawConn, onWait func()) *Conn {
	c := &Conn{rc: rc, onWait: onWait}
	c.fn = c.read
	return c
}

// ReadRaw reads into p, which must not be empty. It returns the bytes
// read (n > 0); or n == 0 and no errors at the end of the stream; or
// sysErr, the read's own error (a syscall.Errno); or waitErr, the
// RawConn's, as its Read returns it: the descriptor's deadline passed
// (matching os.ErrDeadlineExceeded) or it was closed.
func (c *Conn) ReadRaw(p []byte) (n int, sysErr, waitErr error) {
	c.p, c.n, c.err = p, 0, nil
	waitErr = c.rc.Read(c.fn)
	c.p = nil
	if waitErr != nil {
		return 0, nil, waitErr
	}
	return c.n, c.err, nil
}

// read is one attempt: false, so that the poller waits for the
// descriptor to be readable and calls it again, when nothing is there.
func (c *Conn) read(fd uintptr) bool {
	for {
		n, err := Read(int(fd), c.p)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if c.onWait != nil {
				c.onWait()
			}
			return false
		}
		c.n, c.err = max(n, 0), err
		return true
	}
}
