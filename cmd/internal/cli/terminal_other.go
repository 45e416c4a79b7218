//go:build !linux

package cli

import "os"

// IsTerminal reports whether f is a terminal. Off Linux it always reports
// false: the progress line is simply not drawn.
func IsTerminal(f *os.File) bool { return false }
