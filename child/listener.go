package child

import (
	"io"
	"time"
)

// Conn is a connection a child serves: its control connection, or a
// stream connection its Listener accepted. A net.Conn has these methods,
// and so does an *os.File of a socket in non-blocking mode, which is what
// Run serves. The package does not link package net (see Run), so it
// names only the methods it uses.
type Conn interface {
	io.ReadWriteCloser
	// SetReadDeadline and SetWriteDeadline are net.Conn's.
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
}

// Listener gives a child its stream connections. Accept waits for the
// next one; Close makes a waiting Accept and every later one return an
// error.
type Listener interface {
	Accept() (Conn, error)
	Close() error
}

// NewListener makes a Listener of an accept function and a close function,
// as a net.Listener's methods are:
//
//	child.Serve(ctx, control, child.NewListener(ln.Accept, ln.Close), opts)
//
// It is how a test or an embedding program serves over a listener of its
// own, or wraps one.
func NewListener[C Conn](accept func() (C, error), close func() error) Listener {
	return funcListener[C]{accept, close}
}

type funcListener[C Conn] struct {
	accept func() (C, error)
	close  func() error
}

func (l funcListener[C]) Accept() (Conn, error) {
	c, err := l.accept()
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (l funcListener[C]) Close() error { return l.close() }
