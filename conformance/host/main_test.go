// Package hostconf is a black-box conformance suite for skulk-host, the
// Skulk supervisor's command line. It drives `skulk-host call`, `bench` and
// `tools` against ../fakechild, a scripted child that breaks the wire
// contract (docs/protocol.md) one way per mode, and checks what the contract and
// the user docs (docs/cli.md, docs/operations.md) require
// of the host: exit statuses, the synthetic terminal frame, frame order,
// signals, and that nothing is left behind.
//
// It is written from the contract and the docs alone: it imports nothing of
// github.com/skulkrt/skulk and never reads the host's code. See README.md.
package hostconf

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// suite holds what TestMain prepared; it is written once before any test
// runs and only read afterwards.
var suite struct {
	hostBin string // the skulk-host binary under test
	fakeBin string // the built fakechild
	root    string // a short temp dir: event sockets, per-run TMPDIRs, builds
}

// TestMain checks for leaked goroutines after all tests (goleak), around a
// setup that builds fakechild and finds or builds skulk-host.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(suiteMain{m})
}

// suiteMain wraps testing.M so that the suite's setup and clean-up run
// inside goleak.VerifyTestMain.
type suiteMain struct{ m *testing.M }

// Run sets the suite up, runs the tests and removes the temp dirs.
func (s suiteMain) Run() int {
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "hostconf setup:", err)
		if suite.root != "" {
			os.RemoveAll(suite.root)
		}
		return 1
	}
	code := s.m.Run()
	if err := os.RemoveAll(suite.root); err != nil {
		fmt.Fprintln(os.Stderr, "hostconf cleanup:", err)
	}
	return code
}

// setup creates the suite's temp dir, builds fakechild into it, and takes
// skulk-host from SKULK_HOST_BIN or builds ./cmd/skulk-host of the main
// module (SKULK_CONFORMANCE_MAIN, else two directories up from here).
func setup() error {
	root, err := os.MkdirTemp("", "skconf-") // short: Unix socket paths live here
	if err != nil {
		return err
	}
	suite.root = root
	suite.fakeBin = filepath.Join(root, "fakechild")
	if err := goBuild(".", suite.fakeBin, "github.com/skulkrt/skulk/conformance/fakechild"); err != nil {
		return fmt.Errorf("building fakechild: %w", err)
	}
	if bin := os.Getenv("SKULK_HOST_BIN"); bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			return err
		}
		if st, err := os.Stat(abs); err != nil || st.Mode()&0o111 == 0 {
			return fmt.Errorf("SKULK_HOST_BIN=%s is not an executable file", bin)
		}
		suite.hostBin = abs
		return nil
	}
	mainDir := os.Getenv("SKULK_CONFORMANCE_MAIN")
	if mainDir == "" {
		mainDir = filepath.Join("..", "..")
	}
	mainDir, err = filepath.Abs(mainDir)
	if err != nil {
		return err
	}
	suite.hostBin = filepath.Join(root, "skulk-host")
	if err := goBuild(mainDir, suite.hostBin, "./cmd/skulk-host"); err != nil {
		return fmt.Errorf("building skulk-host in %s (set SKULK_HOST_BIN or SKULK_CONFORMANCE_MAIN): %w", mainDir, err)
	}
	return nil
}

// goBuild runs `go build -o out pkg` in dir.
func goBuild(dir, out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	return cmd.Run()
}
