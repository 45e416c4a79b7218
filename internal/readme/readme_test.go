// Package readme keeps the README's Go examples honest: its test compiles
// every Go code block of README.md as a program of this module.
package readme

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

func TestREADMEExamplesCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllSubmatch(readme, -1)
	if len(blocks) < 2 {
		t.Fatalf("README has %d Go blocks, want the provider and the host examples", len(blocks))
	}
	// The programs live in testdata (which ./... ignores) inside this module,
	// so they build against the working tree without a go.mod of their own.
	root, err := os.MkdirTemp("testdata", "readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	for i, b := range blocks {
		dir := filepath.Join(root, "example"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), b[1], 0o644); err != nil {
			t.Fatal(err)
		}
		if n := len(regexp.MustCompile("\n").FindAll(b[1], -1)); n > 40 {
			t.Errorf("README example %d is %d lines; keep it short", i, n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		out, err := exec.CommandContext(ctx, "go", "build", "-o", os.DevNull, "./"+dir).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("README example %d does not build: %v\n%s", i, err, out)
		}
	}
}
