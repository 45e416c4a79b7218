// Package protocol holds the fixed parts of docs/protocol.md that the
// module's connection code above package wire shares (the host, the child
// SDK, their readers and writers, the test kits and the commands) and no
// user needs: a child's environment and exit statuses, the protocol's
// numbers (prefix length, default and hard limits, the ingress queue, the
// default cancel grace), the packet types as logs name them, the
// invalid-packet error wire returns, read through AsInvalid, and the
// checks of frame's values that frame keeps to itself (KnownCode,
// CheckCallID, CheckPayload, SanitizeMessage).
//
// It imports no package of the module but frame and frame/mpack
// (AsInvalid finds wire's error by its method), and wire imports nothing
// under the root internal/. The codec's own copy of the numbers is
// wire/internal/protocol, which wire alone imports; wire_test.go checks
// that the two agree, through wire's public API, and frame_test.go that
// the checks agree with frame.Frame.Validate.
package protocol
