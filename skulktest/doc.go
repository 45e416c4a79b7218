// Package skulktest runs Skulk providers and hosts inside go test, on real
// Unix sockets and real processes, as net/http/httptest does for HTTP. It
// has three parts:
//
//   - StartProvider serves a child.Options in the test's own process behind
//     a real host.Host, and StartHost starts any host.Config (a provider
//     binary made by Build, say). Both return the *host.Host, close it when
//     the test ends, and fail the test if a process, socket file,
//     descriptor or goroutine they made is left behind.
//   - Peer is a host scripted at the wire level, for provider authors who
//     need to send exactly the packets they want (a sequence gap, a second
//     terminal, a cancel at a chosen moment, a stream nobody reads) and see
//     exactly what the provider answers. Every wait has a deadline, its
//     writes' included: a write the child does not take fails at its
//     deadline (Timeout, or the one given to WriteRawBy).
//   - Child is a provider that misbehaves on purpose, one Fault per call or
//     start (crash after n frames, hang, stop answering pings, SIGSTOP
//     itself, garbage or oversize packets, a frame of another call, exit
//     during startup), for host authors who want to see what their code
//     does when a child goes wrong, without writing a provider.
//
// StartProvider and Child run the test binary itself as the child process,
// as os/exec's tests do: a package that uses them must hand its TestMain to
// Main (or call ChildMain first thing in its own TestMain):
//
//	func TestMain(m *testing.M) { skulktest.Main(m) }
//
// A few helpers save lines where a test would otherwise repeat them:
// Collect (a call's frames and its outcome), JSONEqual (payloads compared
// as JSON values) and WaitRestart (a child's restart).
//
// The leak checks look at the whole test process (its goroutines, its
// descriptors, its child processes), so a test that uses StartHost or
// StartProvider must not run in parallel with other tests that start
// goroutines or processes (do not call t.Parallel in it). docs/testing.md
// shows each part at work.
package skulktest
