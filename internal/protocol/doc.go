// Package protocol holds the fixed parts of docs/protocol.md that the
// module's connection code above package wire shares (the host, the child
// SDK, their readers and writers, the test kits and the commands) and no
// user needs: a child's environment and exit statuses, Millis, the
// protocol's numbers (prefix length, default and hard limits, the ingress
// queue, the default cancel grace) under the names that code uses, the
// packet types as logs name them, and the invalid-packet error wire
// returns, read through AsInvalid.
//
// It sits above package wire and takes the protocol's numbers from wire's
// public API, so the codec (wire/internal/protocol, which wire alone
// imports) holds the one copy of them. AsInvalid finds wire's error by
// its method, since the error's type is internal to wire.
package protocol
