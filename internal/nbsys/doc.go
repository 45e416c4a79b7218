// Package nbsys reads a descriptor in non-blocking mode without the Go
// runtime's system-call bookkeeping (syscall.RawSyscall rather than
// syscall.Syscall), and peeks at one (Peek), as package writev writes one.
//
// Such a call cannot block, so the runtime need not know about it. What the
// bookkeeping would cost is a wake-up of the runtime's monitor thread
// (sysmon): once every processor of a process went idle, sysmon sleeps until
// the next timer, and the first system call made the ordinary way wakes it
// and sets it polling every 20 µs for the next millisecond. A process that
// goes idle between small calls, as a provider and its host do, would pay
// that wake-up and those polls on every call (docs/performance.md, "Calls
// both ways"). The saving holds only when every system call of a process's
// busy path is made so: one made the ordinary way wakes sysmon all
// the same.
//
// Every descriptor given to this package must be in non-blocking mode for
// as long as it is used: a raw call that blocked would hold its thread and
// processor from the runtime (and a collection waiting to stop the world).
// An *os.File's Fd puts its descriptor in blocking mode; the sockets read
// here are never asked for theirs.
//
// Under the race detector Read is syscall.Read, whose annotations order a
// write to a file before a read of it in the same process.
package nbsys
