// Package remote serves a host's tools on NATS and calls them from
// anywhere, with the guarantees of a local call.
//
// A host (package host) reaches only the children of its own process.
// Serve registers a host's pool as a NATS service (github.com/nats-io/nats.go/micro):
// every host serving the same name joins one queue group, so the NATS
// servers spread the calls across them, and $SRV.PING/INFO/STATS find
// them. A Client calls the tools of a name; its Call has the shape of
// host.Call: arguments checked against the tool's schema before anything
// is sent, input streamed with Send and CloseSend, output read frame by
// frame with Recv, Frames or Wait, a deadline that reaches the remote
// child, Cancel, exactly one terminal, synthetic failures marked.
//
// What travels is the stream protocol of docs/protocol.md (invoke, caller
// frames; provider frames, end), cut into numbered NATS messages with
// credit-based flow control in both directions and heartbeats
// (docs/protocol.md §10). So:
//
//   - media up to the protocol's 16 MiB travel whatever the servers'
//     max_payload (a frame spans as many messages as it needs);
//   - a caller that stops reading stops the remote child's writes, and
//     every hop holds at most a window (Options.Window, 1 MiB) of a call
//     beyond the host's own bounds;
//   - a serving host that dies or is cut off gives its callers a synthetic
//     failed unreachable within Options.UnreachableBound (3.5 s by
//     default), and the next call goes to a host that is alive;
//   - a peer's messages pass the checks a child's packets pass (lengths
//     bounded before allocation, fences, schemas): a malformed or forged
//     message fails its call only.
//
// Each host records the calls it runs (docs/events.md, "Trees across
// hosts"): a remote call is a tree of the serving host's call log whose
// start names its caller (calllog.Event.Caller). A call made with a
// context carrying a running call of a host (inside host.Program) is
// also that call's step in the caller's log, whose request names the
// remote tree (calllog.Event.Remote); WithCaller names the caller
// otherwise, and Call.Tree gives the remote tree's id.
//
// A short example, a serving host and a caller:
//
//	srv, err := remote.Serve(nc, "tools", h, remote.ServeOptions{})
//	...
//	defer srv.Close(ctx)
//
//	cl, err := remote.Dial(nc, "tools", remote.Options{})
//	...
//	defer cl.Close()
//	call, err := cl.Call(ctx, "echo", nil, remote.WithInput(frame.MustPayload(map[string]any{"text": "hi"})))
//	...
//	result, err := call.Wait()
//
// docs/operations.md ("A fleet") says how to run hosts on many machines,
// with the subject permissions that keep a caller from posing as a host.
package remote
