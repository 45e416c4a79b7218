package skulktest

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

// Environment of a test binary started as one of skulktest's children.
const (
	// envRole names the child to play: roleRelay or roleScript.
	envRole = "SKULKTEST_CHILD"
	// envRelay is the path of the socket a relay hands its fds to.
	envRelay = "SKULKTEST_RELAY"
	// envFaults is a scripted child's faults, encoded by encodeFaults.
	envFaults = "SKULKTEST_FAULTS"
	// envState is the directory where a scripted child's incarnations
	// claim their faults.
	envState = "SKULKTEST_STATE"
)

const (
	roleRelay  = "relay"
	roleScript = "script"
)

// mainCalled is set by ChildMain, so that StartProvider and Child can say
// what is missing instead of starting a test binary that would run the
// tests again.
var mainCalled atomic.Bool

// Main is the whole body of the TestMain of a package whose tests use
// StartProvider or Child:
//
//	func TestMain(m *testing.M) { skulktest.Main(m) }
//
// In a test binary started as one of skulktest's children it plays that
// child and exits (ChildMain); otherwise it runs the tests under
// goleak.VerifyTestMain, which fails the run if a goroutine outlives them.
// Main never returns.
func Main(m *testing.M) {
	ChildMain()
	goleak.VerifyTestMain(m)
}

// ChildMain plays the child this test binary was started as, and exits the
// process when it is done; in a binary started any other way it returns at
// once. A TestMain that does more than Main calls it first:
//
//	func TestMain(m *testing.M) {
//		skulktest.ChildMain()
//		// build binaries, set up fixtures ...
//		os.Exit(m.Run())
//	}
func ChildMain() {
	mainCalled.Store(true)
	switch role := os.Getenv(envRole); role {
	case "":
		return
	case roleRelay:
		os.Exit(relay(os.Getenv(envRelay)))
	case roleScript:
		os.Exit(scripted(os.Getenv(envFaults), os.Getenv(envState)))
	default:
		fmt.Fprintf(os.Stderr, "skulktest: %s names no child skulktest plays\n", envRole)
		os.Exit(2)
	}
}

// needMain fails t when ChildMain was not called: the test binary, started
// as a child, would run the tests instead.
func needMain(t testing.TB, what string) {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatalf("skulktest: %s runs the test binary as a child: the package's TestMain must call skulktest.Main(m) or skulktest.ChildMain()", what)
	}
}

// quickExit is the GORACE setting skulktest's children get when the test
// binary was built with -race (see withQuickExit).
const quickExit = "GORACE=atexit_sleep_ms=0"

// withQuickExit returns env with quickExit added when the test binary
// was built with -race, unless cfgEnv or env already say what GORACE is.
// A child of skulktest's is the test binary itself; under -race every
// exit of it would otherwise wait a second for the race detector's report
// (atexit_sleep_ms's default), a second per StartProvider test and per
// restart of a Child. The child's races are still reported: only the
// pause before the exit goes.
func withQuickExit(cfgEnv, env []string) []string {
	if !raceEnabled {
		return env
	}
	if slices.Contains(cfgEnv, "GORACE") || slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GORACE=") }) {
		return env
	}
	return append(env[:len(env):len(env)], quickExit)
}
