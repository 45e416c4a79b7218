package clitest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skulkrt/skulk/internal/testnet"
)

const (
	// deadline bounds one run of a command: generous for a loaded 2-core
	// machine under -race, and still a failed test rather than a hang.
	deadline = 90 * time.Second
	// waitDelay bounds Wait once the command has exited, even when
	// something (a grandchild) kept its pipes open.
	waitDelay = 5 * time.Second
)

// Builds builds main packages into one temporary directory, each the
// first time a test asks for it, so that a test binary whose tests all
// skip builds nothing. A failed build fails every test that asks for that
// package. The zero value is ready to use; its methods are safe for
// concurrent use. TestMain calls Remove after the tests.
type Builds struct {
	mu   sync.Mutex
	dir  string           // made by the first build
	bins map[string]built // by import path
}

type built struct {
	path string
	err  error
}

// Path returns the path of the binary of the main package pkg, an import
// path such as "github.com/skulkrt/skulk/internal/fakechild", building it
// without -race (testnet.Build) first if no test has; it fails t when the
// build failed.
func (b *Builds) Path(t testing.TB, pkg string) string {
	t.Helper()
	return b.path(t, pkg, testnet.Build)
}

// Command is Path for a command the tests run as a user would, such as
// "github.com/skulkrt/skulk/cmd/skulk-host": it is built as the test binary
// was, -race or not (testnet.BuildCommand), and the package's TestMain
// calls testnet.QuickRaceExit. A package is built one way only: the first
// of Path and Command to ask for it decides.
func (b *Builds) Command(t testing.TB, pkg string) string {
	t.Helper()
	return b.path(t, pkg, testnet.BuildCommand)
}

func (b *Builds) path(t testing.TB, pkg string, build func(dir, pkg string) (string, error)) string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.bins[pkg]
	if !ok {
		if b.dir == "" {
			b.dir, r.err = os.MkdirTemp("", "clitest-")
		}
		if r.err == nil {
			r.path, r.err = build(b.dir, pkg)
		}
		if b.bins == nil {
			b.bins = map[string]built{}
		}
		b.bins[pkg] = r
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

// Remove removes the binaries built so far.
func (b *Builds) Remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// Result is what one run of a command left behind.
type Result struct {
	// Status is the exit status.
	Status int
	// Stdout and Stderr are everything the command wrote to them.
	Stdout, Stderr string
	// Elapsed is the time from the start to the end of Wait.
	Elapsed time.Duration
}

// Run runs bin with args, stdin as its standard input, bounded by a
// generous deadline. It fails t unless the command exited by itself in
// time (a non-zero exit status is a Result, not a failure).
func Run(t testing.TB, bin, stdin string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = waitDelay
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &errb, strings.NewReader(stdin)
	start := time.Now()
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String(), Elapsed: time.Since(start)}
	r.Status = exitStatus(t, ctx, bin, args, err, r.Stderr)
	return r
}

// exitStatus returns the status of a command that exited by itself in
// time with err from Wait, and fails t for any other end.
func exitStatus(t testing.TB, ctx context.Context, bin string, args []string, err error, stderr string) int {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("%s %q did not finish in time", bin, args)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode()
	default:
		t.Fatalf("%s %q: %v (stderr %q)", bin, args, err, stderr)
		return 0
	}
}

// Proc is a command started by Start: the test reads its standard output
// through Stdout while it runs and gets its standard error from Wait.
type Proc struct {
	// Cmd is the started command: signal its Process, read its pid.
	Cmd *exec.Cmd
	// Stdout is the read end of the command's standard output.
	Stdout io.ReadCloser

	ctx    context.Context
	args   []string
	stderr bytes.Buffer // written by exec's copying goroutine until Wait returns
	waited bool
}

// Start starts bin with args, bounded by the same deadline as Run. When t
// ends, a Proc that Wait was not called on is killed and waited for.
func Start(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	p := &Proc{ctx: ctx, args: args}
	p.Cmd = exec.CommandContext(ctx, bin, args...)
	p.Cmd.WaitDelay = waitDelay
	p.Cmd.Stderr = &p.stderr
	stdout, err := p.Cmd.StdoutPipe()
	if err == nil {
		err = p.Cmd.Start()
	}
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	p.Stdout = stdout
	t.Cleanup(func() {
		if !p.waited {
			p.Cmd.Process.Kill()
			p.Cmd.Wait()
		}
		cancel()
	})
	return p
}

// Wait reads what is left of Stdout, waits for the command and returns its
// exit status and standard error. It fails t unless the command exited by
// itself in time. Call it once, from the test's goroutine.
func (p *Proc) Wait(t testing.TB) (status int, stderr string) {
	t.Helper()
	// Stdout's pipe closes only in Cmd.Wait: a descendant that holds it
	// open would keep this read going past the deadline, so the deadline
	// closes it.
	stop := context.AfterFunc(p.ctx, func() { p.Stdout.Close() })
	io.Copy(io.Discard, p.Stdout)
	stop()
	err := p.Cmd.Wait()
	p.waited = true
	return exitStatus(t, p.ctx, p.Cmd.Path, p.args, err, p.stderr.String()), p.stderr.String()
}
