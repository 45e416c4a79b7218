//go:build !linux

package host

import "net"

// watchHangup watches nothing off Linux: a caller's cancel reaches its
// callee once the host reads the call connection again.
func watchHangup(net.Conn, func()) (stop func()) { return func() {} }
