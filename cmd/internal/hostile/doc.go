// Package hostile holds the host's hostile-child suite: its tests run
// host.Host against internal/fakechild, the fake provider, in its hostile
// modes and tools (bad packets on each connection, floods of frames, of
// 16 MiB attachments and of log lines, silence, a 64 MiB stderr line,
// calls it loses (never finished, never read, never accepted),
// descendants that leave the process group, a closed or ignored control
// connection), and a hostile host against the Go SDK; each case checks
// that the host stays up with bounded memory, that the affected call ends
// with a typed synthetic error, that the next call works and that nothing
// is left behind. The package has no API; docs/operations.md ("Hostile
// children") says what is contained and how.
package hostile
