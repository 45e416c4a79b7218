// Package sockpair makes a connected pair of Unix stream sockets whose
// descriptors are close-on-exec from the start, so that a process started
// meanwhile by another goroutine cannot inherit them.
package sockpair

import (
	"fmt"
	"os"
)

// Files returns the two ends of a new AF_UNIX SOCK_STREAM socketpair as
// files named a and b, both close-on-exec (exec.Cmd.ExtraFiles clears the
// flag for the files it passes). The caller closes them.
func Files(a, b string) (*os.File, *os.File, error) {
	fds, err := pair()
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), a), os.NewFile(uintptr(fds[1]), b), nil
}
