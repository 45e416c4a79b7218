package provider

import (
	"slices"
	"sync"
	"testing"
)

// Options configure Run.
type Options struct {
	// TestToolsArgs are the arguments that make the provider offer, besides
	// the demo tools, crash and sleep's ignore_cancel (docs/provider.md), as
	// the tests of stuck handlers and crashes need; nil means
	// []string{"--test-tools"}, which is what cmd/skulk-child takes. The
	// provider is started without arguments otherwise.
	TestToolsArgs []string
}

// The provider under test and its test-tools arguments: set by TestMain
// for this package's own run, and by Run (under running) for another's.
var (
	childBin string
	testArgs = []string{"--test-tools"}
	running  sync.Mutex
)

func testToolsArgs() []string { return slices.Clone(testArgs) }

// test is one test of the suite: its name (the TestXxx of this package's
// own run, without Test), its function, the demo tools it drives, and
// whether it starts the provider with Options.TestToolsArgs.
type test struct {
	name      string
	fn        func(*testing.T)
	tools     []string
	testTools bool
}

// suite lists every test; TestSuiteListsEveryTest checks that none is
// missing.
var suite = []test{
	{"IngressQueueBound", testIngressQueueBound, []string{"sleep"}, false},
	{"PongWhileBackpressured", testPongWhileBackpressured, []string{"count", "sleep"}, false},
	{"CancelUnderBackpressure", testCancelUnderBackpressure, []string{"count", "sleep"}, false},
	{"TimeoutBackpressured", testTimeoutBackpressured, []string{"count"}, false},
	{"DrainBackpressured", testDrainBackpressured, []string{"count"}, false},
	{"CountLifecycle", testCountLifecycle, []string{"count"}, false},
	{"HalfCloseAndStreaming", testHalfCloseAndStreaming, []string{"echo", "upper"}, false},
	{"DemoTools", testDemoTools, []string{"echo", "fail", "media", "sleep"}, false},
	{"CrashTool", testCrashTool, []string{"crash"}, true},
	{"SequentialAndConcurrentCalls", testSequentialAndConcurrentCalls, []string{"count"}, false},
	{"PiledUpOutput", testPiledUpOutput, []string{"count", "media"}, false},
	{"ControlCancel", testControlCancel, []string{"count", "echo", "sleep", "upper"}, false},
	{"CallerCancel", testCallerCancel, []string{"count", "echo", "sleep"}, false},
	{"RememberedCancel", testRememberedCancel, []string{"count", "sleep"}, false},
	{"RememberedCancel1024", testRememberedCancel1024, []string{"count"}, false},
	{"CancelAfterEnd", testCancelAfterEnd, []string{"count"}, false},
	{"ConnCloseCancels", testConnCloseCancels, []string{"echo", "sleep"}, false},
	{"PlainRequestControlCancel", testPlainRequestControlCancel, []string{"count", "sleep"}, false},
	{"ControlProtocolErrors", testControlProtocolErrors, []string{"count"}, false},
	{"ControlCutShort", testControlCutShort, nil, false},
	{"ControlUnknownKeys", testControlUnknownKeys, nil, false},
	{"NoUnpromptedControlPackets", testNoUnpromptedControlPackets, nil, false},
	{"ControlEOF", testControlEOF, []string{"sleep"}, true},
	{"ControlEOFDuringDrain", testControlEOFDuringDrain, []string{"sleep"}, true},
	{"DrainIdle", testDrainIdle, nil, false},
	{"DrainLetsCallsFinish", testDrainLetsCallsFinish, []string{"count", "sleep"}, false},
	{"DrainFreshIdleConnection", testDrainFreshIdleConnection, []string{"count", "sleep"}, false},
	{"DrainPastGrace", testDrainPastGrace, []string{"echo", "sleep"}, false},
	{"DrainStuck", testDrainStuck, []string{"sleep"}, true},
	{"DrainSmallCancelGrace", testDrainSmallCancelGrace, []string{"sleep"}, false},
	{"DrainTwice", testDrainTwice, []string{"sleep"}, false},
	{"InvalidCallerFrames", testInvalidCallerFrames, []string{"echo"}, false},
	{"ValidEdgeFrames", testValidEdgeFrames, []string{"count", "echo"}, false},
	{"FramesCheckedBeforeQueued", testFramesCheckedBeforeQueued, []string{"sleep"}, false},
	{"InvalidInvokes", testInvalidInvokes, []string{"echo"}, false},
	{"ValidInvokeOptionals", testValidInvokeOptionals, []string{"count"}, false},
	{"CallIDCharacters", testCallIDCharacters, []string{"count", "echo"}, false},
	{"ArgumentsAgainstSchema", testArgumentsAgainstSchema, []string{"count"}, false},
	{"UnknownTool", testUnknownTool, []string{"count"}, false},
	{"CallIDRunningElsewhere", testCallIDRunningElsewhere, []string{"count", "sleep"}, false},
	{"DuplicateKeys", testDuplicateKeys, []string{"echo"}, false},
	{"DuplicateKeysNested", testDuplicateKeysNested, []string{"echo"}, false},
	{"EffectiveLimits", testEffectiveLimits, []string{"count", "echo", "fail"}, false},
	{"StartupLimitsAbsent", testStartupLimitsAbsent, []string{"count"}, false},
	{"StartupLimitsAboveHello", testStartupLimitsAboveHello, []string{"count"}, false},
	{"StreamProtocolErrors", testStreamProtocolErrors, []string{"count", "echo"}, false},
	{"LengthsCheckedBeforeReading", testLengthsCheckedBeforeReading, []string{"count", "echo"}, false},
	{"PingNonceEcho", testPingNonceEcho, nil, false},
	{"PingNonceEncodings", testPingNonceEncodings, nil, false},
	{"PingBurst", testPingBurst, nil, false},
	{"PongWhileRunning", testPongWhileRunning, []string{"sleep"}, false},
	{"ReuseDiscardUntilTerminal", testReuseDiscardUntilTerminal, []string{"count", "sleep"}, false},
	{"ReuseProtocolErrors", testReuseProtocolErrors, []string{"count", "echo", "sleep"}, false},
	{"Hello", testHello, []string{"count", "crash", "echo", "fail", "media", "sleep", "upper"}, true},
	{"ToolVersions", testToolVersions, []string{"sleep"}, true},
	{"StartupUnknownVersion", testStartupUnknownVersion, nil, false},
	{"StartupUnreadable", testStartupUnreadable, nil, false},
	{"StartupTimeout", testStartupTimeout, nil, false},
	{"StartWithoutHost", testStartWithoutHost, nil, false},
	{"StartupEncodings", testStartupEncodings, []string{"count"}, false},
	{"StuckHandler", testStuckHandler, []string{"count", "sleep"}, true},
	{"StuckAfterConnClose", testStuckAfterConnClose, []string{"sleep"}, true},
	{"TwoStuck", testTwoStuck, []string{"sleep"}, true},
	{"CallerFramesWhileStuck", testCallerFramesWhileStuck, []string{"count", "sleep"}, true},
	{"Timeout", testTimeout, []string{"count", "echo", "sleep"}, false},
	{"NoTimeout", testNoTimeout, []string{"sleep"}, false},
	{"TimeoutAfterOutput", testTimeoutAfterOutput, []string{"upper"}, false},
	{"PlainRequestTimeout", testPlainRequestTimeout, []string{"count", "sleep"}, false},
}

// Run runs the suite against the provider binary bin, every test a
// subtest of t named as this package's tests are (TestDrainStuck is
// t.Run("DrainStuck", ...)), so that -run selects them as usual:
//
//	func TestConformance(t *testing.T) {
//		provider.Run(t, "/path/to/provider", provider.Options{})
//	}
//
// A test that drives a demo tool (echo, upper, count, media, sleep, fail,
// and with TestToolsArgs crash and sleep's ignore_cancel: docs/provider.md)
// the provider does not offer is skipped, saying which; the others (the
// handshake, ping, control and stream protocol errors, unknown tools,
// remembered cancels, drain and the host going away) run against any
// provider. Run reads the provider's hello twice first, without arguments
// and with TestToolsArgs, to learn its tools.
//
// Every provider process a test starts is killed, with its process group,
// when the test ends, and its directory is removed. Run holds a lock until
// t's cleanup (its parallel subtests run after Run returns): one Run at a
// time in a process.
func Run(t *testing.T, bin string, opts Options) {
	t.Helper()
	running.Lock()
	oldBin, oldArgs := childBin, testArgs
	t.Cleanup(func() { // after every subtest, the parallel ones included
		childBin, testArgs = oldBin, oldArgs
		running.Unlock()
	})
	childBin = bin
	if opts.TestToolsArgs != nil {
		testArgs = slices.Clone(opts.TestToolsArgs)
	}
	var plain, extra map[string]bool
	t.Run("hello", func(t *testing.T) {
		plain = toolsOf(t, nil)
		if plain == nil {
			t.Fatal("the provider sent no hello without arguments")
		}
		extra = toolsOf(t, testToolsArgs())
	})
	if plain == nil {
		return
	}
	for _, tc := range suite {
		t.Run(tc.name, func(t *testing.T) {
			offered := plain
			if tc.testTools {
				offered = extra
			}
			for _, id := range tc.tools {
				if !offered[id] {
					t.Skipf("the provider offers no demo tool %q (started with %q)", id, argsOf(tc.testTools))
				}
			}
			tc.fn(t)
		})
	}
}

func argsOf(testTools bool) []string {
	if testTools {
		return testToolsArgs()
	}
	return nil
}

// toolsOf starts the provider with args and returns the ids of the tools
// its hello offers; nil when it sent no hello.
func toolsOf(t *testing.T, args []string) map[string]bool {
	c := startProcess(t, processOptions{args: args})
	p, err := c.ctl.read(wait)
	if err != nil || p.typ != "hello" {
		return nil
	}
	ids := map[string]bool{}
	tools, _ := p.header["tools"].([]any)
	for _, x := range tools {
		if m, ok := x.(map[string]any); ok {
			if id, ok := m["id"].(string); ok {
				ids[id] = true
			}
		}
	}
	return ids
}
