package cli

import (
	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/internal/demotools"
)

// ChildMode is the hidden first argument that makes skulk-host a provider
// child serving the demo tools of internal/demotools (without the test-only
// ones); demo starts its own binary with it. It is not listed in help.
const ChildMode = "demo-child"

// demoChildSDK is the sdk the demo child reports in its hello.
const demoChildSDK = "skulk-host-demo-child/1"

// RunChild runs the process as the demo's provider child and returns its
// exit status (child.Run's). A main function must call it before it
// installs signal handlers: the host stops its children with SIGTERM.
func RunChild() int {
	return child.Run(child.Options{SDK: demoChildSDK, Tools: demotools.Tools(demotools.Options{})})
}
