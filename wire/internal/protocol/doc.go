// Package protocol holds what package wire's codec needs and no user
// does: the fixed numbers of docs/protocol.md (prefix length, limits, the
// ingress queue), the packet type codes, the error kinds behind
// wire.ErrProtocol and wire.ErrTooLarge, the invalid-packet error, and the
// state a wire.Decoder keeps between packets.
//
// It sits under package wire, which alone imports it, and imports only
// frame. The module's code above wire reaches what it needs of it through
// wire's public API and internal/protocol (the child's environment, exit
// statuses, and the protocol's numbers as the host and the child use
// them).
package protocol
