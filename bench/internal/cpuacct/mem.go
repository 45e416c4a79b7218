package cpuacct

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// RSS returns the resident set size of the live process pid in bytes
// (VmRSS of /proc/pid/status); pid 0 means this process.
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(procPath(pid) + "/status")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, ErrNoProcess
		}
		return 0, fmt.Errorf("cpuacct: status: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := bytes.Fields(v) // "1234 kB"
			if len(f) != 2 || string(f[1]) != "kB" {
				return 0, errors.New("cpuacct: status: VmRSS not in kB")
			}
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cpuacct: status: VmRSS: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("cpuacct: status: no VmRSS")
}

// FDs returns how many file descriptors the live process pid has open
// (the entries of /proc/pid/fd); pid 0 means this process, not counting
// the descriptor FDs itself opens to read the directory.
func FDs(pid int) (int, error) {
	d, err := os.Open(procPath(pid) + "/fd")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, ErrNoProcess
		}
		return 0, fmt.Errorf("cpuacct: fd: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("cpuacct: fd: %w", err)
	}
	n := len(names)
	if pid == 0 {
		n-- // the directory being read
	}
	return n, nil
}

func procPath(pid int) string {
	if pid == 0 {
		return "/proc/self"
	}
	return "/proc/" + strconv.Itoa(pid)
}
