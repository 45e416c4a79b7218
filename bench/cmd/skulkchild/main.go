// Command skulkchild is the Skulk benchmark child: the skulkbench tools
// served by the child package. The compare driver starts it through the
// host package.
//
// Built with -tags skulkprofile (the compare driver does so for
// -childprofile), it writes a CPU profile to prefix.cpu.pprof and an
// allocation profile to prefix.allocs.pprof when it exits, given
// SKULK_BENCH_PROFILE=prefix in its environment. Without the tag it links
// no profiler, as the other systems' children do not: runtime/pprof's
// packages would add to every start of it (bench/README.md).
package main

import (
	"os"

	"github.com/skulkrt/skulk/bench/internal/skulkbench"
	"github.com/skulkrt/skulk/child"
)

// profileEnv names the environment variable that asks for profiles.
const profileEnv = "SKULK_BENCH_PROFILE"

func main() {
	stop := startProfile(os.Getenv(profileEnv))
	status := child.Run(child.Options{SDK: "skulk-bench/1", Tools: skulkbench.Tools(), MaxStreams: skulkbench.MaxStreams})
	stop()
	os.Exit(status)
}
