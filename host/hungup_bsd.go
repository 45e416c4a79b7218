//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package host

import "golang.org/x/sys/unix"

// hungUp reports, without waiting, whether fd's peer hung up. These
// systems have no POLLRDHUP; a kqueue's read filter on a socket sets
// EV_EOF once the peer's writing ended, whatever data waits ahead of it.
// The kqueue lives for one look: hungUp runs only when the runtime's
// poller reports the socket readable while the host does not read it.
func hungUp(fd int) bool {
	kq, err := unix.Kqueue()
	if err != nil {
		return false
	}
	defer unix.Close(kq)
	changes := make([]unix.Kevent_t, 1)
	unix.SetKevent(&changes[0], fd, unix.EVFILT_READ, unix.EV_ADD)
	events := make([]unix.Kevent_t, 1)
	for {
		n, err := unix.Kevent(kq, changes, events, &unix.Timespec{})
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0 && events[0].Flags&(unix.EV_EOF|unix.EV_ERROR) != 0
	}
}
