package testnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// buildTimeout bounds one go build, the wait for another process's build
// of the same package included: a failure rather than a hang, and generous
// for a cold build cache on a loaded 2-core machine, where the first
// non-race build of the module's dependencies (the pure-Go SQLite among
// them) beside a race-enabled test run took more than 5 minutes.
const buildTimeout = 15 * time.Minute

// Build compiles the main package pkg, an import path such as
// "github.com/skulkrt/skulk/cmd/skulk-child", into dir and returns the
// binary's path (dir joined with the package's last element). Tests build
// their child or CLI once in TestMain and run it as a real process.
func Build(dir, pkg string) (string, error) {
	bin, err := BuildAs(filepath.Join(dir, path.Base(pkg)), pkg)
	if err != nil {
		return "", fmt.Errorf("testnet: %w", err)
	}
	return bin, nil
}

// BuildAs compiles the main package pkg (an import path, or a path
// relative to the current directory) to the file bin.
//
// `go test ./...` runs several packages' tests at once, and each builds
// the binaries it runs in TestMain. Two builds at the same moment would
// each compile the dependencies they share, since the go build cache is
// shared but not coordinated between processes. So every build holds one
// lock file (buildLock, in os.TempDir) while it runs: the next waits for it
// and then finds what they share compiled in the cache. On 2 cores that
// costs no parallelism worth having: a build uses every core it gets.
//
// The binary is built without -race whatever the test's own flags: a child
// whose timing and memory the tests measure must not carry the race
// detector's costs. Commands the tests run as a user would, and need not
// measure, are built by BuildCommandAs instead.
func BuildAs(bin, pkg string) (string, error) {
	return build(bin, pkg, false)
}

// BuildCommand is Build for a command the tests run as a user would
// (skulk-host, skulk-mcp): see BuildCommandAs.
func BuildCommand(dir, pkg string) (string, error) {
	bin, err := BuildCommandAs(filepath.Join(dir, path.Base(pkg)), pkg)
	if err != nil {
		return "", fmt.Errorf("testnet: %w", err)
	}
	return bin, nil
}

// BuildCommandAs is BuildAs for a command the tests run as a user would,
// whose speed and memory they do not measure: it is built with -race when
// the test binary was (Race), so that it is linked from the packages the
// test's own compile already put in the build cache instead of compiling
// the whole dependency tree (SQLite, NATS, gRPC, the MCP SDK) a second
// time without -race, which on a cold cache is most of a minute of CPU.
// The command then reports its data races too. Its children (skulk-child
// and the like, built by BuildAs) stay without -race. A race-built command
// pauses a second at every exit for the race report unless GORACE says
// atexit_sleep_ms=0: see QuickRaceExit.
func BuildCommandAs(bin, pkg string) (string, error) {
	return build(bin, pkg, Race)
}

// QuickRaceExit adds atexit_sleep_ms=0 to the GORACE variable of this
// process's environment, which the processes it starts inherit, unless
// GORACE already sets atexit_sleep_ms. Call it in TestMain of a package
// that runs commands built by BuildCommandAs: without it every exit of a
// race-built process waits a second (the race detector's default pause
// before its report). Races are still reported. It does nothing in a
// binary built without -race.
func QuickRaceExit() {
	if !Race {
		return
	}
	v := os.Getenv("GORACE")
	if strings.Contains(v, "atexit_sleep_ms=") {
		return
	}
	os.Setenv("GORACE", strings.TrimSpace(v+" atexit_sleep_ms=0"))
}

func build(bin, pkg string, race bool) (string, error) {
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	err := goInTurn(func(ctx context.Context) error {
		if out, err := exec.CommandContext(ctx, "go", append(args, pkg)...).CombinedOutput(); err != nil {
			return fmt.Errorf("%w\n%s", err, out)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("go build %s: %w", pkg, err)
	}
	return bin, nil
}

// goInTurn runs run, a go command, holding the build lock (lockBuilds),
// both the wait for the lock and run bounded by buildTimeout.
func goInTurn(run func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	unlock, err := lockBuilds(ctx)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer unlock()
	return run(ctx)
}

// ExportData returns the export data file of each of the packages paths
// and of every package they import, keyed by import path, as `go list
// -export -deps` builds them (with -race when the test binary was: Race,
// so that they come from the build cache the module's test compiles
// filled). It takes its turn with the builds (BuildAs), and is bounded as
// they are.
func ExportData(paths []string) (map[string]string, error) {
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}"}
	if Race {
		args = append(args, "-race")
	}
	var out []byte
	err := goInTurn(func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, "go", append(args, paths...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		var err error
		if out, err = cmd.Output(); err != nil {
			return fmt.Errorf("%w\n%s", err, stderr.String())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("testnet: go list: %w", err)
	}
	files := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if path, file, ok := strings.Cut(line, " "); ok && file != "" {
			files[path] = file
		}
	}
	return files, nil
}

// buildLock is the lock file's name in os.TempDir, one per user: where
// the kernel protects files in sticky directories (fs.protected_regular),
// a user cannot open another's file there with O_CREATE. It stays there,
// empty: removing it could let one process lock a new file while another
// holds the old one.
var buildLock = fmt.Sprintf("skulk-test-build-%d.lock", os.Getuid())

// lockPoll is how often lockBuilds tries a lock another process holds.
const lockPoll = 50 * time.Millisecond

// lockBuilds takes the build lock, waiting until ctx is done for another
// process to release it, and returns its release.
func lockBuilds(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), buildLock), os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the file releases the lock
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}
