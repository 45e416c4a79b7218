// Package protocol holds what package wire's codec shares with the
// module's own connection code and no user needs: the fixed numbers of
// docs/protocol.md (prefix length, limits, the ingress queue), the packet
// type codes, the error kinds behind wire.ErrProtocol and wire.ErrTooLarge,
// the invalid-packet error the host and the child answer with a failed
// invalid_frame, and the state a connection's reader keeps between packets.
//
// It sits below package wire, which imports it, and imports only frame:
// internal/packetio, above wire, reads packets from a connection with it.
package protocol
