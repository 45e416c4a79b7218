// Command skulk-child is a demonstration provider: a Skulk child offering
// the tools of child/demotools (echo, upper, count, media, sleep, fail).
// With --test-tools it also offers sleep's ignore_cancel argument and the
// crash tool, for tests of the host; with --call-tools, relay, which calls
// another tool through the host (docs/protocol.md §8).
//
// It is started by a host with the control connection on fd 3 and the
// stream listener on fd 4 (docs/protocol.md §1); started by hand it says so and
// exits with status 2.
package main

import (
	"flag"
	"os"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/child/demotools"
)

func main() {
	testTools := flag.Bool("test-tools", false, "also offer sleep's ignore_cancel and the crash tool")
	callTools := flag.Bool("call-tools", false, "also offer relay, which calls another tool through the host")
	flag.Parse()
	os.Exit(child.Run(child.Options{
		SDK:   "skulk-child/1",
		Tools: demotools.Tools(demotools.Options{TestTools: *testTools, Exit: os.Exit, CallTools: *callTools}),
	}))
}
