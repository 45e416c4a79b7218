package provider

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Options configure Run.
type Options struct {
	// TestToolsArgs are the arguments that make the provider offer, besides
	// the demo tools, crash and sleep's ignore_cancel (docs/demo-tools.md),
	// as the tests of stuck handlers and crashes need; nil means
	// []string{"--test-tools"}, which is what cmd/skulk-child takes. The
	// provider is started without arguments otherwise.
	TestToolsArgs []string
	// Tool is the id of one of the provider's tools (in its hello without
	// arguments) for the tests that need a tool, any tool: a call of Tool
	// with Arguments whose input the host closes at once (caller started,
	// then completed) must end with completed and end, after any chunks,
	// within a few seconds. Empty means count, with {"n": 1}, when the
	// provider offers the demo tools, and otherwise the first tool of its
	// hello.
	Tool string
	// Arguments are Tool's arguments; nil means {"n": 1} for count and {}
	// for any other tool.
	Arguments map[string]any
	// CallToolsArgs are the arguments that make the provider offer relay,
	// which calls a tool through its host (docs/demo-tools.md,
	// docs/protocol.md §8); nil skips the tests of calls through the host.
	// This package's own run uses []string{"--call-tools"}, which is what
	// cmd/skulk-child takes.
	CallToolsArgs []string
}

// The provider under test, its test-tools arguments, what it offers, and
// the call of the tests that need some tool: set by TestMain for this
// package's own run, and by Run (under running) for another's.
var (
	childBin string
	testArgs = []string{"--test-tools"}
	callArgs = []string{"--call-tools"} // Options.CallToolsArgs; nil: no relay
	// offered is the tools the provider's hello without arguments offers;
	// nil means every demo tool (this package's own run).
	offered map[string]bool
	probe   = probeCall{tool: "count", args: map[string]any{"n": 1}, want: "chunk,completed,end"}
	running sync.Mutex
)

func testToolsArgs() []string { return slices.Clone(testArgs) }

// probeCall is the call the tests that need some tool make (Options.Tool):
// its tool, its arguments, and its outcomes with its input closed at once;
// want "" means any chunks, then completed and end.
type probeCall struct {
	tool string
	args map[string]any
	want string
}

// some, in a test's list of tools, stands for the probe's tool: the test
// needs a tool, any tool, of the provider (Options.Tool).
const some = "(Options.Tool)"

// viaCalls, in a test's list of tools, stands for relay as the provider
// offers it with Options.CallToolsArgs: Run skips the test when they are
// not set, and the test skips itself when that hello has no relay.
const viaCalls = "relay (Options.CallToolsArgs)"

// probeArgs returns a copy of the probe's arguments.
func probeArgs() map[string]any { return maps.Clone(probe.args) }

// probeInvoke is an invoke of the probe's tool with its arguments.
func probeInvoke(id string) map[string]any { return invoke(id, probe.tool, probeArgs()) }

// runProbe runs the probe call as runCall does (input closed at once) and
// checks its outcomes.
func runProbe(t testing.TB, s *conn, id string) *callResult {
	t.Helper()
	s.send(probeInvoke(id))
	s.send(callerFrame(id, 0, "started"))
	s.send(callerFrame(id, 1, "completed"))
	return expectProbe(t, s, id)
}

// expectProbe reads the probe call id on s (invoked, its input closed) and
// checks its outcomes.
func expectProbe(t testing.TB, s *conn, id string) *callResult {
	t.Helper()
	r := expectCall(t, s, id, probe.want)
	if probe.want == "" && r.end != nil {
		got := r.outcomes()
		if rest := strings.TrimSuffix(got, "completed,end"); rest == got || strings.Trim(strings.ReplaceAll(rest, "chunk,", ""), ",") != "" {
			t.Errorf("call %s of %s: %q, want chunks, completed, end (Options.Tool, Options.Arguments)", id, probe.tool, got)
		}
	}
	return r
}

// needTools skips t, saying why, unless the provider offers every tool of
// ids: for the parts of a test that drive a demo tool where the rest does
// not.
func needTools(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if offered != nil && !offered[id] {
			t.Skipf("the provider offers no demo tool %q", id)
		}
	}
}

// test is one test of the suite: its name (the TestXxx of this package's
// own run, without Test), its function, the demo tools it needs (some:
// the probe's tool, any tool), and whether it starts the provider with
// Options.TestToolsArgs. A part of a test that needs a demo tool the rest
// does not is skipped by needTools.
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
	{"RememberedCancel", testRememberedCancel, []string{some}, false},
	{"RememberedCancel1024", testRememberedCancel1024, []string{some}, false},
	{"CancelAfterEnd", testCancelAfterEnd, []string{some}, false},
	{"ConnCloseCancels", testConnCloseCancels, []string{"echo", "sleep"}, false},
	{"PlainRequestControlCancel", testPlainRequestControlCancel, []string{"count", "sleep"}, false},
	{"ControlProtocolErrors", testControlProtocolErrors, nil, false},
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
	{"InvalidInvokes", testInvalidInvokes, []string{some}, false},
	{"ValidInvokeOptionals", testValidInvokeOptionals, []string{some}, false},
	{"CallIDCharacters", testCallIDCharacters, []string{some}, false},
	{"ArgumentsAgainstSchema", testArgumentsAgainstSchema, []string{"count"}, false},
	{"UnknownTool", testUnknownTool, []string{some}, false},
	{"CallIDRunningElsewhere", testCallIDRunningElsewhere, []string{"count", "sleep"}, false},
	{"DuplicateKeys", testDuplicateKeys, []string{"echo"}, false},
	{"DuplicateKeysNested", testDuplicateKeysNested, []string{"echo"}, false},
	{"EffectiveLimits", testEffectiveLimits, []string{"count", "echo", "fail"}, false},
	{"StartupLimitsAbsent", testStartupLimitsAbsent, []string{some}, false},
	{"StartupLimitsAboveHello", testStartupLimitsAboveHello, nil, false},
	{"StreamProtocolErrors", testStreamProtocolErrors, []string{some}, false},
	{"LengthsCheckedBeforeReading", testLengthsCheckedBeforeReading, []string{some}, false},
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
	{"StartupEncodings", testStartupEncodings, []string{some}, false},
	{"StuckHandler", testStuckHandler, []string{"count", "sleep"}, true},
	{"StuckAfterConnClose", testStuckAfterConnClose, []string{"sleep"}, true},
	{"TwoStuck", testTwoStuck, []string{"sleep"}, true},
	{"CallerFramesWhileStuck", testCallerFramesWhileStuck, []string{"count", "sleep"}, true},
	{"Timeout", testTimeout, []string{"count", "echo", "sleep"}, false},
	{"NoTimeout", testNoTimeout, []string{"sleep"}, false},
	{"TimeoutAfterOutput", testTimeoutAfterOutput, []string{"upper"}, false},
	{"PlainRequestTimeout", testPlainRequestTimeout, []string{"count", "sleep"}, false},
	{"CallsThroughHost", testCallsThroughHost, []string{viaCalls}, false},
}

// Run runs the suite against the provider binary bin, every test a
// subtest of t named as this package's tests are (TestDrainStuck is
// t.Run("DrainStuck", ...)), so that -run selects them as usual:
//
//	func TestConformance(t *testing.T) {
//		provider.Run(t, "/path/to/provider", provider.Options{})
//	}
//
// Any provider gets the tests of start-up (startup encodings and limits,
// an unknown version, an unreadable startup, a start without a host, the
// start deadline), ping, the control connection (protocol errors, unknown
// keys, a packet cut short, nothing unprompted), stream protocol errors
// and lengths, invalid invokes and their optional fields, call id
// characters, unknown tools, remembered cancels, and an idle drain: 24 of
// the suite's 69 tests. Those that make a call use Options.Tool. The other tests
// drive the demo tools (echo, upper, count, media, sleep, fail, and with
// TestToolsArgs crash and sleep's ignore_cancel; docs/demo-tools.md
// specifies them): a test, or a part of one, that needs a demo tool the
// provider does not offer is skipped, saying which. Run reads the
// provider's hello twice first, without arguments and with TestToolsArgs,
// to learn its tools.
//
// Every provider process a test starts is killed, with its process group,
// when the test ends, and its directory is removed. Run holds a lock until
// t's cleanup (its parallel subtests run after Run returns): one Run at a
// time in a process.
func Run(t *testing.T, bin string, opts Options) {
	t.Helper()
	running.Lock()
	oldBin, oldArgs, oldOffered, oldProbe, oldCall := childBin, testArgs, offered, probe, callArgs
	t.Cleanup(func() { // after every subtest, the parallel ones included
		childBin, testArgs, offered, probe, callArgs = oldBin, oldArgs, oldOffered, oldProbe, oldCall
		running.Unlock()
	})
	childBin = bin
	callArgs = slices.Clone(opts.CallToolsArgs)
	if opts.TestToolsArgs != nil {
		testArgs = slices.Clone(opts.TestToolsArgs)
	}
	var plain, extra []string
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
	offered = setOf(plain)
	extraSet := setOf(extra)
	probe = probeCall{}
	switch {
	case opts.Tool != "":
		probe.tool = opts.Tool
		if !offered[opts.Tool] {
			t.Fatal("Options.Tool names no tool of the provider's hello")
		}
	case offered["count"]:
		probe.tool = "count"
	case len(plain) > 0:
		probe.tool = plain[0]
	}
	switch {
	case opts.Arguments != nil:
		probe.args = maps.Clone(opts.Arguments)
	case probe.tool == "count":
		probe.args = map[string]any{"n": 1}
	default:
		probe.args = map[string]any{}
	}
	if probe.tool == "count" && opts.Arguments == nil {
		probe.want = "chunk,completed,end" // docs/demo-tools.md
	}
	for _, tc := range suite {
		t.Run(tc.name, func(t *testing.T) {
			have := offered
			if tc.testTools {
				have = extraSet
			}
			for _, id := range tc.tools {
				if id == viaCalls {
					if callArgs == nil {
						t.Skip("Options.CallToolsArgs is not set: calls through the host are not tested")
					}
					continue
				}
				if id == some {
					if probe.tool == "" {
						t.Skip("the provider offers no tool (Options.Tool)")
					}
					continue
				}
				if !have[id] {
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
// its hello offers, in its order; nil when it sent no hello.
func toolsOf(t *testing.T, args []string) []string {
	c := startProcess(t, processOptions{args: args})
	p, err := c.ctl.read(wait)
	if err != nil || p.typ != "hello" {
		return nil
	}
	ids := []string{}
	tools, _ := p.header["tools"].([]any)
	for _, x := range tools {
		if m, ok := x.(map[string]any); ok {
			if id, ok := m["id"].(string); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

func setOf(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}
