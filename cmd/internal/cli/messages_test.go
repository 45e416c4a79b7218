package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// TestUnknownCommandNamed: a typo names the word typed and the command
// meant; a first argument that is no command word is described, not
// echoed.
func TestUnknownCommandNamed(t *testing.T) {
	for _, args := range [][]string{{"calll"}, {"help", "calll"}} {
		code, stdout, stderr := runCLI(t, args...)
		assert.Equal(t, ExitUsage, code, args)
		assert.Empty(t, stdout, args)
		assert.Contains(t, stderr, `unknown command "calll" (did you mean "call"?`, args)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), args)
	}
	_, _, stderr := runCLI(t, "zzzzzzzz")
	assert.Contains(t, stderr, `unknown command "zzzzzzzz" (run 'skulk-host help' for the list)`)
	_, _, stderr = runCLI(t, "--token=abc")
	assert.Contains(t, stderr, "the first argument is not a command name")
	assert.NotContains(t, stderr, "abc")
}

// TestStatusWords: the status line says each of kind, code and message
// once.
func TestStatusWords(t *testing.T) {
	for _, tc := range []struct {
		f    frame.Frame
		want string
	}{
		{frame.Frame{Kind: frame.KindCompleted}, "completed"},
		{frame.Frame{Kind: frame.KindCancelled, Error: &frame.Error{Code: frame.CodeCancelled, Message: "cancelled by the host"}}, "cancelled by the host"},
		{frame.Frame{Kind: frame.KindCancelled, Error: &frame.Error{Code: frame.CodeCancelled, Message: "the user pressed Ctrl-C"}}, "cancelled: the user pressed Ctrl-C"},
		{frame.Frame{Kind: frame.KindCancelled, Error: &frame.Error{Code: frame.CodeCancelled}}, "cancelled"},
		{frame.Frame{Kind: frame.KindFailed, Error: &frame.Error{Code: frame.CodeTimeout, Message: "deadline passed"}}, "failed: timeout: deadline passed"},
		{frame.Frame{Kind: frame.KindFailed, Error: &frame.Error{Code: frame.CodeProviderError}}, "failed: provider_error"},
	} {
		assert.Equal(t, tc.want, statusWords(tc.f))
	}
}

// TestAsifCheckNotJSON: a file that is not JSON is refused without the
// line of rule families not checked, which would say nothing of it; a
// document that reached the rules keeps the line.
func TestAsifCheckNotJSON(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.txt")
	require.NoError(t, os.WriteFile(bad, []byte("not json\n"), 0o600))
	code, stdout, _ := runCLI(t, "asif", "check", bad)
	assert.Equal(t, ExitFailure, code)
	assert.Contains(t, stdout, "refused: asif: invalid JSON")
	assert.NotContains(t, stdout, "does not check")

	good, err := filepath.Glob("../../../asif/testdata/*.session.json")
	require.NoError(t, err)
	require.NotEmpty(t, good)
	code, stdout, _ = runCLI(t, "asif", "check", good[0])
	assert.Equal(t, ExitOK, code, stdout)
	assert.Contains(t, stdout, "rule families this checker does not check: ")
}

// TestSelfCommand: the demo's last line names a command the reader can
// run: go run's when go run built the binary.
func TestSelfCommand(t *testing.T) {
	assert.Equal(t, "go run ./cmd/skulk-host", selfCommand("/tmp/go-build123/b001/exe/skulk-host"))
	assert.Equal(t, "go run ./cmd/skulk-host", selfCommand(""))
	assert.Equal(t, "/usr/local/bin/skulk-host", selfCommand("/usr/local/bin/skulk-host"))
}

// TestCountKinds: asif export names each kind of loss once, with its
// count when there are more.
func TestCountKinds(t *testing.T) {
	assert.Equal(t, "a, b (2), c", countKinds([]string{"a", "b", "b", "c"}))
	assert.Equal(t, "a", countKinds([]string{"a"}))
}
