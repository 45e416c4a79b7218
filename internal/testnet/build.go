package testnet

import (
	"context"
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"time"
)

// buildTimeout bounds one go build: a failure rather than a hang, and
// generous for a cold build cache on a loaded 2-core machine, where the
// first non-race build of the module's dependencies (the pure-Go SQLite
// among them) beside a race-enabled test run took more than 5 minutes.
const buildTimeout = 15 * time.Minute

// Build compiles the main package pkg, an import path such as
// "github.com/skulkrt/skulk/cmd/skulk-child", into dir and returns the
// binary's path (dir joined with the package's last element). Tests build
// their child or CLI once in TestMain and run it as a real process.
func Build(dir, pkg string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	bin := filepath.Join(dir, path.Base(pkg))
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("testnet: go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}
