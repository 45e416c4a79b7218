// Command pairchild compares builds of a Skulk child on the compare run's
// small and unary calls, under the same load: one host per build in this
// process, blocks of calls alternating between them. Build the child at
// each revision, then give the binaries, the baseline first:
//
//	cd bench && go build -o /tmp/old ./cmd/skulkchild    # at the old revision
//	cd bench && go build -o /tmp/new ./cmd/skulkchild    # at the new one
//	cd bench && go run ./cmd/pairchild /tmp/old /tmp/new
//
// It prints each build's quartiles and its median as a ratio to the
// first's. Only the child differs between the builds compared: the host
// is this program's.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/bench/internal/compare"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pairchild:", err)
		os.Exit(1)
	}
}

func run() error {
	rounds := flag.Int("rounds", 40, "blocks of each call shape per child")
	block := flag.Int("block", 300, "calls per block (the first tenth is not timed)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: pairchild [-rounds N] [-block N] BASELINE_CHILD OTHER_CHILD...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 2 {
		flag.Usage()
		return fmt.Errorf("want two or more child binaries, got %d", flag.NArg())
	}
	if *rounds <= 0 || *block <= 0 {
		return fmt.Errorf("-rounds and -block must be positive")
	}
	for i, bin := range flag.Args() {
		if st, err := os.Stat(bin); err != nil || st.IsDir() {
			return fmt.Errorf("child binary %d: not a file", i+1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "skulk-pair-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	res, err := compare.Pair(ctx, compare.PairOptions{Children: flag.Args(), Dir: dir, Rounds: *rounds, Block: *block})
	if err != nil {
		return err
	}
	base := map[string]time.Duration{}
	fmt.Printf("%-6s %-40s %9s %9s %9s %8s\n", "shape", "child", "p25 µs", "p50 µs", "p75 µs", "p50/base")
	for _, r := range res {
		if _, ok := base[r.Shape]; !ok {
			base[r.Shape] = r.P50
		}
		fmt.Printf("%-6s %-40s %9.1f %9.1f %9.1f %8.3f\n", r.Shape, r.Child, us(r.P25), us(r.P50), us(r.P75),
			float64(r.P50)/float64(base[r.Shape]))
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
