// Command skulkchild is the Skulk benchmark child: the skulkbench tools
// served by the child package. The compare driver starts it through the
// host package.
//
// With SKULK_BENCH_PROFILE=prefix in its environment it writes a CPU
// profile to prefix.cpu.pprof and an allocation profile to
// prefix.allocs.pprof when it exits.
package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/skulkrt/skulk/bench/internal/skulkbench"
	"github.com/skulkrt/skulk/child"
)

func main() {
	prefix := os.Getenv("SKULK_BENCH_PROFILE")
	if prefix != "" {
		f, err := os.Create(prefix + ".cpu.pprof")
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "skulkchild: profile:", err)
			os.Exit(1)
		}
	}
	status := child.Run(child.Options{SDK: "skulk-bench/1", Tools: skulkbench.Tools()})
	if prefix != "" {
		pprof.StopCPUProfile()
		if f, err := os.Create(prefix + ".allocs.pprof"); err == nil {
			pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}
	os.Exit(status)
}
