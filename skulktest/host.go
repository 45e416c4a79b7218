package skulktest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/testnet"
)

// Timeout bounds every wait of this package that the caller gives no
// deadline of its own: a host's start and close, a Peer's and a StreamConn's
// reads and writes (a build has 15 minutes: BuildIn). It is generous for a
// loaded 2-core machine under -race, and still a failure rather than a
// hang.
const Timeout = 10 * time.Second

// closeTimeout bounds host.Close in a cleanup: a drain's grace (5 s by
// default) plus the cancel grace plus the kill grace, with room.
const closeTimeout = 30 * time.Second

// StartHost starts a host with cfg for the test and closes it when the
// test ends. Then it fails the test for anything the test process has that
// it did not have before StartHost: a child process (zombies included), an
// entry in the directory of the children's private directories, a
// descriptor, a goroutine.
//
// Zero fields of cfg keep host.Config's meaning, except two: an empty
// TempDir is a fresh directory of the test's (removed at the end), and a nil
// Logger collects the host's log, which is printed if the test fails.
// StartHost fails the test at once if host.Start fails; a test of a start
// that must fail calls host.Start itself.
func StartHost(t testing.TB, cfg host.Config) *host.Host {
	t.Helper()
	logs := &buffer{}
	base := prepare(t, &cfg, logs)
	snap := takeSnapshot(t, base)
	return startHost(t, cfg, logs, snap, nil)
}

// StartProvider serves opts in the test's own process behind a real host,
// started with cfg, and returns the host: the handlers run on the test's
// goroutines (they may touch its variables), while the host supervises a
// real child process and talks to the handlers over real Unix sockets. Its
// child process is the test binary, started as a relay: it hands the
// descriptors the host gave it (its control connection and stream
// listener) to the test process, where child.Serve serves them, and exits
// when Serve returns, with child.Run's status. A restart of the child is a
// new relay and a new Serve with the same opts. Signals the host sends
// reach the relay, not the handlers: a killed relay ends its Serve.
//
// cfg.Command must be empty; everything else means what it does for
// StartHost, which also describes the clean-up and its checks. In a test
// binary built with -race, the relay gets GORACE=atexit_sleep_ms=0 unless
// cfg's Env or ExtraEnv names GORACE: the race detector's pause at exit
// (a second by default) would otherwise slow every start and restart. A nil
// opts.Logger collects the child's log with the host's. The package's
// TestMain must call Main or ChildMain.
func StartProvider(t testing.TB, opts child.Options, cfg host.Config) *host.Host {
	t.Helper()
	needMain(t, "StartProvider")
	if cfg.Command != "" {
		t.Fatal("skulktest: StartProvider: Config.Command must be empty (the test binary is the child)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("skulktest: StartProvider: %v", err)
	}
	logs := &buffer{}
	base := prepare(t, &cfg, logs)
	if opts.Logger == nil {
		opts.Logger = cfg.Logger.With("in_process", true)
	}
	snap := takeSnapshot(t, base)
	srv, err := startRelays(opts)
	if err != nil {
		t.Fatalf("skulktest: StartProvider: %v", err)
	}
	cfg.Command, cfg.Args = exe, []string{"-test.run=^$"}
	cfg.ExtraEnv = append(withQuickExit(cfg.Env, cfg.ExtraEnv), envRole+"="+roleRelay, envRelay+"="+srv.path)
	return startHost(t, cfg, logs, snap, srv.stop)
}

// prepare fills cfg's TempDir and Logger as StartHost documents and
// returns the TempDir.
func prepare(t testing.TB, cfg *host.Config, logs *buffer) string {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if cfg.TempDir != "" {
		return cfg.TempDir
	}
	// Not t.TempDir: a socket path under it would be too long.
	dir, err := os.MkdirTemp("", "sk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // runs after the checks, which look at it first
	cfg.TempDir = dir
	return dir
}

// startHost starts the host and registers its clean-up: Close, then stop
// (nil for none), then the checks against snap.
func startHost(t testing.TB, cfg host.Config, logs *buffer, snap *snapshot, stop func()) *host.Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout+cfg.StartTimeout)
	defer cancel()
	h, err := host.Start(ctx, cfg)
	if err != nil {
		if stop != nil {
			stop()
		}
		if logs.Len() > 0 {
			t.Logf("host log:\n%s", logs.String())
		}
		t.Fatalf("skulktest: host.Start: %v", err)
	}
	t.Cleanup(func() {
		// A helper: its failures point at the line of the test that
		// called StartHost or StartProvider (where Cleanup was called,
		// then up through the helpers).
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Logf("skulktest: host.Close: %v", err)
		}
		if stop != nil {
			stop()
		}
		snap.check(t)
		if t.Failed() && logs.Len() > 0 {
			t.Logf("host log:\n%s", logs.String())
		}
	})
	return h
}

// Build compiles the main package pkg (an import path, or a path relative
// to the test's directory such as "./cmd/provider") into a directory of the
// test's and returns the binary's path. Each call builds again (the go
// build cache makes that quick); a package whose tests all start the same
// binary builds it once in TestMain with BuildIn.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	bin, err := BuildIn(t.TempDir(), pkg)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// BuildIn compiles the main package pkg into dir and returns the binary's
// path: dir joined with the package's last path element ("provider" when
// that is "." or ".."). The build runs `go` from PATH in the current
// directory, for at most 15 minutes. Builds from the tests of several
// packages at once, as `go test ./...` runs them, take turns, so that what
// they share is compiled once into the go build cache.
func BuildIn(dir, pkg string) (string, error) {
	name := path.Base(filepath.ToSlash(pkg))
	if name == "." || name == ".." || name == "/" {
		name = "provider"
	}
	bin, err := testnet.BuildAs(filepath.Join(dir, name), pkg)
	if err != nil {
		return "", fmt.Errorf("skulktest: %w", err)
	}
	return bin, nil
}

// buffer is a bytes.Buffer safe for concurrent writers and readers: a
// logger, a process's output copier, and the test reading it.
type buffer = testnet.Buffer
