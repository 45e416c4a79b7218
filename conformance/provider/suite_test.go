package provider

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This package's own run: one TestXxx per test of the suite, against the
// binary TestMain found, every test run (cmd/skulk-child offers every demo
// tool).

func run(t *testing.T, name string) {
	for _, tc := range suite {
		if tc.name == name {
			tc.fn(t)
			return
		}
	}
	require.FailNow(t, fmt.Sprintf("no test %s in the suite", name))
}

// TestSuiteListsEveryTest: every func testXxx(t *testing.T) of the package
// is in suite, so Run runs it.
func TestSuiteListsEveryTest(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	listed := map[string]bool{}
	for _, tc := range suite {
		listed["test"+tc.name] = true
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !strings.HasPrefix(fd.Name.Name, "test") || len(fd.Name.Name) == 4 {
				continue
			}
			assert.Falsef(t, fd.Type.Params.NumFields() == 1 && !listed[fd.Name.Name], "%s: %s is not in suite", f, fd.Name.Name)
		}
	}
}

// TestAnyProviderCount: Run's doc comment, the README and docs/testing.md
// say how many tests run on a provider without the demo tools.
func TestAnyProviderCount(t *testing.T) {
	n := 0
	for _, tc := range suite {
		if len(tc.tools) == 0 || slices.Equal(tc.tools, []string{some}) {
			n++
		}
	}
	assert.Falsef(t, n != 24 || len(suite) != 69, "%d of %d tests need no demo tool: update the 24 of 69 in Run's doc, README.md and docs/testing.md", n, len(suite))
}

// TestProbeOtherTool runs the tests that need some tool as Run runs them
// on a provider without count: with echo, arguments {}, and its input
// closed at once (completed and end, no chunk).
func TestProbeOtherTool(t *testing.T) {
	oldProbe, oldOffered := probe, offered
	t.Cleanup(func() { probe, offered = oldProbe, oldOffered })
	probe = probeCall{tool: "echo", args: map[string]any{}}
	offered = map[string]bool{"echo": true}
	for _, tc := range suite {
		if slices.Contains(tc.tools, some) {
			t.Run(tc.name, tc.fn)
		}
	}
}

func TestIngressQueueBound(t *testing.T)            { run(t, "IngressQueueBound") }
func TestPongWhileBackpressured(t *testing.T)       { run(t, "PongWhileBackpressured") }
func TestCancelUnderBackpressure(t *testing.T)      { run(t, "CancelUnderBackpressure") }
func TestTimeoutBackpressured(t *testing.T)         { run(t, "TimeoutBackpressured") }
func TestDrainBackpressured(t *testing.T)           { run(t, "DrainBackpressured") }
func TestCountLifecycle(t *testing.T)               { run(t, "CountLifecycle") }
func TestHalfCloseAndStreaming(t *testing.T)        { run(t, "HalfCloseAndStreaming") }
func TestDemoTools(t *testing.T)                    { run(t, "DemoTools") }
func TestCrashTool(t *testing.T)                    { run(t, "CrashTool") }
func TestSequentialAndConcurrentCalls(t *testing.T) { run(t, "SequentialAndConcurrentCalls") }
func TestControlCancel(t *testing.T)                { run(t, "ControlCancel") }
func TestCallerCancel(t *testing.T)                 { run(t, "CallerCancel") }
func TestRememberedCancel(t *testing.T)             { run(t, "RememberedCancel") }
func TestRememberedCancel1024(t *testing.T)         { run(t, "RememberedCancel1024") }
func TestPiledUpOutput(t *testing.T)                { run(t, "PiledUpOutput") }
func TestCancelAfterEnd(t *testing.T)               { run(t, "CancelAfterEnd") }
func TestConnCloseCancels(t *testing.T)             { run(t, "ConnCloseCancels") }
func TestPlainRequestControlCancel(t *testing.T)    { run(t, "PlainRequestControlCancel") }
func TestControlProtocolErrors(t *testing.T)        { run(t, "ControlProtocolErrors") }
func TestControlCutShort(t *testing.T)              { run(t, "ControlCutShort") }
func TestControlUnknownKeys(t *testing.T)           { run(t, "ControlUnknownKeys") }
func TestNoUnpromptedControlPackets(t *testing.T)   { run(t, "NoUnpromptedControlPackets") }
func TestControlEOF(t *testing.T)                   { run(t, "ControlEOF") }
func TestControlEOFDuringDrain(t *testing.T)        { run(t, "ControlEOFDuringDrain") }
func TestDrainIdle(t *testing.T)                    { run(t, "DrainIdle") }
func TestDrainLetsCallsFinish(t *testing.T)         { run(t, "DrainLetsCallsFinish") }
func TestDrainFreshIdleConnection(t *testing.T)     { run(t, "DrainFreshIdleConnection") }
func TestDrainPastGrace(t *testing.T)               { run(t, "DrainPastGrace") }
func TestDrainStuck(t *testing.T)                   { run(t, "DrainStuck") }
func TestDrainSmallCancelGrace(t *testing.T)        { run(t, "DrainSmallCancelGrace") }
func TestDrainTwice(t *testing.T)                   { run(t, "DrainTwice") }
func TestInvalidCallerFrames(t *testing.T)          { run(t, "InvalidCallerFrames") }
func TestValidEdgeFrames(t *testing.T)              { run(t, "ValidEdgeFrames") }
func TestFramesCheckedBeforeQueued(t *testing.T)    { run(t, "FramesCheckedBeforeQueued") }
func TestInvalidInvokes(t *testing.T)               { run(t, "InvalidInvokes") }
func TestValidInvokeOptionals(t *testing.T)         { run(t, "ValidInvokeOptionals") }
func TestCallIDCharacters(t *testing.T)             { run(t, "CallIDCharacters") }
func TestArgumentsAgainstSchema(t *testing.T)       { run(t, "ArgumentsAgainstSchema") }
func TestUnknownTool(t *testing.T)                  { run(t, "UnknownTool") }
func TestCallIDRunningElsewhere(t *testing.T)       { run(t, "CallIDRunningElsewhere") }
func TestDuplicateKeys(t *testing.T)                { run(t, "DuplicateKeys") }
func TestDuplicateKeysNested(t *testing.T)          { run(t, "DuplicateKeysNested") }
func TestEffectiveLimits(t *testing.T)              { run(t, "EffectiveLimits") }
func TestStartupLimitsAbsent(t *testing.T)          { run(t, "StartupLimitsAbsent") }
func TestStartupLimitsAboveHello(t *testing.T)      { run(t, "StartupLimitsAboveHello") }
func TestStreamProtocolErrors(t *testing.T)         { run(t, "StreamProtocolErrors") }
func TestLengthsCheckedBeforeReading(t *testing.T)  { run(t, "LengthsCheckedBeforeReading") }
func TestPingNonceEcho(t *testing.T)                { run(t, "PingNonceEcho") }
func TestPingNonceEncodings(t *testing.T)           { run(t, "PingNonceEncodings") }
func TestPingBurst(t *testing.T)                    { run(t, "PingBurst") }
func TestPongWhileRunning(t *testing.T)             { run(t, "PongWhileRunning") }
func TestReuseDiscardUntilTerminal(t *testing.T)    { run(t, "ReuseDiscardUntilTerminal") }
func TestReuseProtocolErrors(t *testing.T)          { run(t, "ReuseProtocolErrors") }
func TestHello(t *testing.T)                        { run(t, "Hello") }
func TestToolVersions(t *testing.T)                 { run(t, "ToolVersions") }
func TestStartupUnknownVersion(t *testing.T)        { run(t, "StartupUnknownVersion") }
func TestStartupUnreadable(t *testing.T)            { run(t, "StartupUnreadable") }
func TestStartupTimeout(t *testing.T)               { run(t, "StartupTimeout") }
func TestStartWithoutHost(t *testing.T)             { run(t, "StartWithoutHost") }
func TestStartupEncodings(t *testing.T)             { run(t, "StartupEncodings") }
func TestStuckHandler(t *testing.T)                 { run(t, "StuckHandler") }
func TestStuckAfterConnClose(t *testing.T)          { run(t, "StuckAfterConnClose") }
func TestTwoStuck(t *testing.T)                     { run(t, "TwoStuck") }
func TestCallerFramesWhileStuck(t *testing.T)       { run(t, "CallerFramesWhileStuck") }
func TestTimeout(t *testing.T)                      { run(t, "Timeout") }
func TestNoTimeout(t *testing.T)                    { run(t, "NoTimeout") }
func TestTimeoutAfterOutput(t *testing.T)           { run(t, "TimeoutAfterOutput") }
func TestPlainRequestTimeout(t *testing.T)          { run(t, "PlainRequestTimeout") }
func TestCallsThroughHost(t *testing.T)             { run(t, "CallsThroughHost") }
