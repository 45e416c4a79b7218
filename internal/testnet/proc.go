package testnet

import (
	"os"
	"strconv"
	"strings"
)

// Children lists the processes, zombies included, whose parent is pid,
// from /proc (Linux); nil where /proc cannot be read.
func Children(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := strconv.Itoa(pid)
	var kids []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses,
		// so the fields start after the last ')'.
		s := string(stat)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) >= 2 && f[1] == parent {
			kids = append(kids, p)
		}
	}
	return kids
}
