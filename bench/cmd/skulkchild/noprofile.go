//go:build !skulkprofile

package main

import (
	"fmt"
	"os"
)

// startProfile refuses a profile: this build has no profiler.
func startProfile(prefix string) (stop func()) {
	if prefix != "" {
		fmt.Fprintln(os.Stderr, "skulkchild: "+profileEnv+" is set, but this build has no profiler: build it with -tags skulkprofile")
		os.Exit(1)
	}
	return func() {}
}
