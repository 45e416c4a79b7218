//go:build !linux

package host

import "net"

// unread reports whether bytes wait unread on c; off Linux it cannot
// tell and reports false, so the health timeout alone decides.
func unread(net.Conn) bool { return false }

// unreadKnown: unread cannot tell here, so a call whose output waits
// unread in its socket cannot be told from a lost one: the host does not
// look for lost calls.
const unreadKnown = false

func unsent(net.Conn) bool { return false }
