//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package host

import "net"

// watchHangup watches nothing on systems without a way to see a peer's
// hang-up behind unread data (Linux has POLLRDHUP, the BSDs and macOS a
// kqueue's EV_EOF): there, a caller's hang-up reaches its callee once the
// host reads the call connection again, that is once the callee takes
// the chunks it holds, or the call's start or the callee's own end comes.
// Its cancelled frame, its parent's cancel and deadline, and its death
// still reach the callee as everywhere.
func watchHangup(net.Conn, func()) (stop func()) { return func() {} }
