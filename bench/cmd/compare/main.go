// Command compare runs Skulk's side-by-side benchmarks against
// hashicorp/go-plugin (gRPC), MCP over stdio and raw Unix sockets, and
// prints a table with each system's figures and Skulk's advantage over
// each. Run it from the bench directory:
//
//	cd bench && go run ./cmd/compare -quick
//	cd bench && go run ./cmd/compare --json > result.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/skulkrt/skulk/bench/internal/compare"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func run() error {
	quick := flag.Bool("quick", false, "short run: under a minute on 2 cores")
	asJSON := flag.Bool("json", false, "print the report as JSON instead of a table")
	systems := flag.String("systems", "", "comma-separated systems to run (default all: "+strings.Join(compare.SystemNames, ",")+")")
	workloads := flag.String("workloads", "", "comma-separated workloads to run (default all: "+strings.Join(compare.WorkloadIDs, ",")+")")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of this process (the host side) to `file`")
	allocProfile := flag.String("allocprofile", "", "write an allocation profile of this process (the host side) to `file`")
	childProfile := flag.String("childprofile", "", "make the skulk system's children write CPU and allocation profiles to `prefix`.cpu.pprof and prefix.allocs.pprof (use with -systems skulk and one workload)")
	quiet := flag.Bool("q", false, "no progress lines on stderr")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only; see -h)", flag.Arg(0))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	benchDir, err := compare.ModuleDir(ctx)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "skulk-bench-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	o := compare.Options{Quick: *quick, Dir: tmp, Systems: split(*systems), Workloads: split(*workloads),
		Revision: compare.Revision(ctx, filepath.Dir(benchDir))}
	var tags []string
	if *childProfile != "" {
		abs, err := filepath.Abs(*childProfile)
		if err != nil {
			return err
		}
		o.SkulkEnv = append(o.SkulkEnv, "SKULK_BENCH_PROFILE="+abs)
		tags = append(tags, compare.ProfileTag) // the bench child links its profiler only then
	}
	if !*quiet {
		o.Log = os.Stderr
	}
	if !*quiet {
		fmt.Fprintln(os.Stderr, "compare: building the children…")
	}
	o.Bin, err = compare.Build(ctx, benchDir, filepath.Join(tmp, "bin"), o.Systems, tags...)
	if err != nil {
		return err
	}

	if *allocProfile != "" {
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	rep, err := compare.Run(ctx, o)
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return err
	}
	if *allocProfile != "" {
		f, err := os.Create(*allocProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return compare.WriteTable(os.Stdout, rep)
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
