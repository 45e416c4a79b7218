package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/child/demotools"
)

// ChildMode is the hidden first argument that makes skulk-host a provider
// child serving the demo tools of child/demotools (without the test-only
// ones); demo starts its own binary with it. It is not listed in help.
const ChildMode = "demo-child"

// demoChildSDK is the sdk the demo child reports in its hello.
const demoChildSDK = "skulk-host-demo-child/1"

// RunChild runs the process as the demo's provider child and returns its
// exit status (child.Run's). A main function must call it before it
// installs signal handlers: the host stops its children with SIGTERM.
//
// The child exports its server spans as skulk-host does when its
// environment asks (OTEL_TRACES_EXPORTER and OTEL_EXPORTER_OTLP_*, which a
// host passes with --env NAME), and flushes them before it returns.
func RunChild() int {
	opts := child.Options{SDK: demoChildSDK, Tools: demotools.Tools(demotools.Options{})}
	tp, err := newTracerProvider(context.Background(), "skulk-host-demo-child", os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skulk-host %s: %v\n", ChildMode, err)
		return ExitUsage
	}
	if tp == nil {
		return child.Run(opts)
	}
	opts.TracerProvider = tp
	code := child.Run(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "skulk-host %s: spans not exported: %v\n", ChildMode, err)
	}
	return code
}
