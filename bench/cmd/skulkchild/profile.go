//go:build skulkprofile

package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startProfile starts the CPU profile when prefix is set, and returns what
// writes both profiles.
func startProfile(prefix string) (stop func()) {
	if prefix == "" {
		return func() {}
	}
	f, err := os.Create(prefix + ".cpu.pprof")
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "skulkchild: profile:", err)
		os.Exit(1)
	}
	return func() {
		pprof.StopCPUProfile()
		if f, err := os.Create(prefix + ".allocs.pprof"); err == nil {
			pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}
}
