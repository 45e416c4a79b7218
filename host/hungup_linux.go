package host

import "golang.org/x/sys/unix"

// hungUp reports, without waiting, whether fd's peer hung up. Poll
// reports POLLRDHUP once the peer's writing ended, whatever data waits
// ahead of it, and is not asked for POLLIN, which unread data would set.
func hungUp(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
	}
}
