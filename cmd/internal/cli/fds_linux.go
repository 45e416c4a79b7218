package cli

import (
	"os"
	"strconv"
	"syscall"
)

// sysCloseRange is close_range(2)'s number, the same on every Linux
// architecture (it came after the tables were unified); the syscall
// package does not name it.
const sysCloseRange = 436

// closeRangeCloexec is close_range's CLOSE_RANGE_CLOEXEC flag: mark the
// descriptors close-on-exec instead of closing them.
const closeRangeCloexec = 1 << 2

// KeepInheritedFromChildren marks every descriptor above stderr
// close-on-exec, so that what the skulk-host process inherited from
// whoever started it (a shell's or a test harness's open files) does not
// reach the children it starts: a child gets exactly fds 0 to 4
// (docs/protocol.md §1). The descriptors stay open in skulk-host itself. It
// uses one close_range(2) where the kernel has it (Linux 5.11), and
// otherwise looks through /proc/self/fd; it does what it can and reports
// nothing.
func KeepInheritedFromChildren() {
	if _, _, errno := syscall.Syscall(sysCloseRange, 3, uintptr(^uint32(0)), closeRangeCloexec); errno == 0 {
		return
	}
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close() // before the loop: its own descriptor is then gone (and was close-on-exec)
	for _, n := range names {
		if fd, err := strconv.Atoi(n); err == nil && fd > 2 {
			syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_SETFD, syscall.FD_CLOEXEC)
		}
	}
}
