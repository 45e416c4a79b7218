// Package protocol holds what package wire's codec needs and no user
// does: the fixed numbers of docs/protocol.md (prefix length, limits, the
// ingress queue), the packet type codes, the error kinds behind
// wire.ErrProtocol and wire.ErrTooLarge, and the invalid-packet error.
//
// It sits under package wire, which alone imports it, and imports only
// frame. The module's code above wire reaches what it needs of it through
// wire's public API (the protocol's numbers among it), which
// internal/protocol names for the host and the child.
package protocol
