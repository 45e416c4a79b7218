package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Environment variables that configure the suite.
const (
	// binEnv names a provider binary to test instead of building one.
	binEnv = "SKULK_CHILD_BIN"
	// mainEnv names the directory of the main module whose
	// ./cmd/skulk-child TestMain builds when binEnv is not set; the
	// default is "../..", where the suite lives in the repository
	// (conformance/provider).
	mainEnv = "SKULK_CONFORMANCE_MAIN"
)

// buildTimeout bounds the go build in TestMain, so a wedged toolchain fails
// the run instead of hanging it.
const buildTimeout = 5 * time.Minute

func TestMain(m *testing.M) {
	bin, dir, err := findChild()
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
	childBin = bin
	// goleak.Cleanup replaces goleak's exit: the status (1 when goleak
	// found a leak after the tests passed) is this function's to give.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if dir != "" {
			os.RemoveAll(dir)
		}
		os.Exit(code)
	}))
}

// findChild returns the binary to test and, when it built one, the
// temporary directory holding it, which the caller removes.
func findChild() (bin, dir string, err error) {
	if p := os.Getenv(binEnv); p != "" {
		fi, err := os.Stat(p)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", binEnv, err)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", "", fmt.Errorf("%s=%s is not an executable file", binEnv, p)
		}
		return p, "", nil
	}
	mainDir := os.Getenv(mainEnv)
	if mainDir == "" {
		mainDir = filepath.Join("..", "..")
	}
	mainDir, err = filepath.Abs(mainDir)
	if err != nil {
		return "", "", err
	}
	if _, err := os.Stat(filepath.Join(mainDir, "cmd", "skulk-child")); err != nil {
		return "", "", fmt.Errorf("no cmd/skulk-child under %s (set %s or %s): %w", mainDir, binEnv, mainEnv, err)
	}
	dir, err = os.MkdirTemp("", "skulk-conformance-")
	if err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, "skulk-child")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/skulk-child")
	cmd.Dir = mainDir
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w after %v", err, buildTimeout)
		}
		return "", "", fmt.Errorf("go build ./cmd/skulk-child in %s: %w\n%s", mainDir, err, out)
	}
	return bin, dir, nil
}
