//go:build linux

package host

import (
	"io"
	"log/slog"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func isSubreaper(t *testing.T) bool {
	t.Helper()
	var v int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	return v != 0
}

func setSubreaper(t *testing.T, on bool) {
	t.Helper()
	v := uintptr(0)
	if on {
		v = 1
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, v, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
}

// TestSubreaperBeforeAskedAnew: whether the process was a subreaper before
// the first Host is asked each time the count leaves zero, so a flag the
// program set for one Host's life and cleared afterwards does not keep the
// next Host's flag set for ever.
func TestSubreaperBeforeAskedAnew(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	was := isSubreaper(t)
	t.Cleanup(func() { setSubreaper(t, was) })

	setSubreaper(t, true) // the program's own
	if !holdSubreaper(log) {
		t.Fatal("holdSubreaper: no reference")
	}
	releaseSubreaper()
	if !isSubreaper(t) {
		t.Fatal("the program's own flag was cleared")
	}

	setSubreaper(t, false) // the program is done with it
	if !holdSubreaper(log) {
		t.Fatal("holdSubreaper: no reference")
	}
	if !isSubreaper(t) {
		t.Fatal("not a subreaper while a reference is held")
	}
	releaseSubreaper()
	if isSubreaper(t) {
		t.Fatal("still a subreaper after the last reference: the first cycle's 'before' stuck")
	}
}
