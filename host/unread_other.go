//go:build !linux

package host

import "net"

// unread returns how many bytes wait unread on c; off Linux it cannot
// tell and returns 0, so the health timeout alone decides.
func unread(net.Conn) int { return 0 }

// unreadKnown: unread cannot tell here, so a call whose output waits
// unread in its socket cannot be told from a lost one: the host does not
// look for lost calls.
const unreadKnown = false

func unsent(net.Conn) bool { return false }
