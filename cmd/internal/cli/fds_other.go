//go:build !linux

package cli

// KeepInheritedFromChildren does nothing here: without /proc or
// close_range, the descriptors skulk-host inherited reach its children as
// they would any program it started (see fds_linux.go).
func KeepInheritedFromChildren() {}
