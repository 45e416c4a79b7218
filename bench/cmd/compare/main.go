// Command compare runs Skulk's side-by-side benchmarks against
// hashicorp/go-plugin (gRPC), MCP over stdio and raw Unix sockets, and
// prints a table with each system's figures and Skulk's advantage over
// each. With -sweeps it runs the cost curves instead (concurrency, frame
// size, pool size, a long call, the call log) and writes their JSON
// record; -charts draws a record as SVG charts. Run it from the bench
// directory:
//
//	cd bench && go run ./cmd/compare -quick
//	cd bench && go run ./cmd/compare --json > result.json
//	cd bench && go run ./cmd/compare -sweeps -o sweeps.json
//	cd bench && go run ./cmd/compare -charts sweeps.json -chartdir ../docs/perf
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/bench/internal/charts"
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
	sweeps := flag.Bool("sweeps", false, "run the sweeps (cost curves) instead of the side-by-side table; with -quick, the short sweeps")
	sweepIDs := flag.String("sweep", "", "with -sweeps: comma-separated sweeps to run (default all: "+strings.Join(compare.SweepIDs, ",")+")")
	streams := flag.String("streams", "", "with -sweeps: comma-separated numbers of concurrent streams, instead of the concurrency sweep's own points")
	out := flag.String("o", "", "with -sweeps: write the JSON record to `file` (default stdout)")
	charts := flag.String("charts", "", "draw the sweeps record in `file` as SVG charts into -chartdir, with an index of them ("+charts.IndexName+"), and run nothing")
	chartDir := flag.String("chartdir", "../docs/perf", "with -charts: the `directory` the charts go to")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only; see -h)", flag.Arg(0))
	}
	if *charts != "" {
		files, err := drawCharts(*charts, *chartDir)
		if err != nil {
			return err
		}
		if !*quiet {
			for _, f := range files {
				fmt.Fprintln(os.Stderr, "compare: wrote", f)
			}
		}
		return nil
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

	if *sweeps {
		so := compare.SweepOptions{Quick: *quick, Bin: o.Bin, Dir: tmp, Systems: o.Systems, Sweeps: split(*sweepIDs),
			Revision: o.Revision, Log: o.Log}
		for _, s := range split(*streams) {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return errors.New("-streams: every entry must be a positive number of streams")
			}
			so.Streams = append(so.Streams, n)
		}
		return runSweeps(ctx, so, *out)
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

// runSweeps runs the sweeps and writes their record to out ("" means
// stdout).
func runSweeps(ctx context.Context, so compare.SweepOptions, out string) error {
	rep, err := compare.RunSweeps(ctx, so)
	if err != nil {
		return err
	}
	if so.Log != nil {
		fmt.Fprintf(so.Log, "compare: sweeps took %v\n", rep.Duration.Round(time.Second))
		for _, t := range rep.Targets {
			fmt.Fprintf(so.Log, "  %s: %s\n", t.Text, t.Status)
		}
	}
	w := os.Stdout
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	if out == "" {
		return nil
	}
	return w.Close()
}

// drawCharts reads the sweeps record in file and writes its charts and
// their index into dir.
func drawCharts(file, dir string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var rep compare.SweepReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	files, err := charts.Write(&rep, dir)
	if err != nil && !errors.Is(err, charts.ErrEmpty) { // a record of single points is an index of tables
		return files, err
	}
	f, err := charts.WriteIndex(&rep, dir, file)
	if err != nil {
		return files, err
	}
	return append(files, f), nil
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
