package clitest_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/cmd/internal/clitest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// failures is a testing.TB that records failures instead of reporting
// them; Fatalf ends the goroutine, as testing's does.
type failures struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (f *failures) Helper() {}

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func (f *failures) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}

func (f *failures) Error(args ...any) { f.Errorf("%s", fmt.Sprint(args...)) }

func (f *failures) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

// parse runs ParseLines on stdout and returns what it reported.
func parse(t *testing.T, stdout string) []string {
	f := &failures{TB: t}
	done := make(chan struct{})
	go func() { // stopped by ParseLines returning or Fatalf
		defer close(done)
		clitest.ParseLines(f, stdout)
	}()
	<-done
	return f.msgs
}

// line is a call --json line of call "c-1", changed by each of change.
func line(seq int, kind string, change ...func(map[string]any)) string {
	m := map[string]any{"call_id": "c-1", "direction": "provider_to_caller", "sequence": seq,
		"kind": kind, "synthetic": false, "payload": nil, "media": nil, "error": nil}
	for _, c := range change {
		c(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b) + "\n"
}

// set returns a change that sets key to v.
func set(key string, v any) func(map[string]any) { return func(m map[string]any) { m[key] = v } }

// drop returns a change that removes key.
func drop(key string) func(map[string]any) { return func(m map[string]any) { delete(m, key) } }

// TestParseLinesFollowsTheContract: lines as docs/cli.md shows them pass;
// each break of the line contract fails the test.
func TestParseLinesFollowsTheContract(t *testing.T) {
	good := line(0, "started") + line(1, "chunk") + line(2, "completed")
	if msgs := parse(t, good); len(msgs) != 0 {
		require.FailNow(t, fmt.Sprintf("good lines: %q", msgs))
	}
	for _, tc := range []struct{ name, stdout string }{
		{"not JSON", line(0, "started") + "completed\n"},
		{"a key missing", line(0, "started") + line(1, "completed", drop("media"))},
		{"a key too many", line(0, "started") + line(1, "completed", set("extra", 1))},
		{"unknown kind", line(0, "started") + line(1, "chunky") + line(2, "completed")},
		{"first not started", line(0, "chunk") + line(1, "completed")},
		{"empty call id", line(0, "started", set("call_id", "")) + line(1, "completed", set("call_id", ""))},
		{"two call ids", line(0, "started") + line(1, "completed", set("call_id", "c-2"))},
		{"caller direction", line(0, "started") + line(1, "completed", set("direction", "caller_to_provider"))},
		{"sequence gap", line(0, "started") + line(2, "completed")},
		{"after the terminal", line(0, "started") + line(1, "failed") + line(2, "chunk")},
		{"no terminal", line(0, "started") + line(1, "chunk")},
		{"started alone", line(0, "started")},
		{"a null line", line(0, "started") + "null\n" + line(2, "completed")},
		{"nothing", ""},
	} {
		msgs := parse(t, tc.stdout)
		assert.NotEqualValuesf(t, 0, len(msgs), "%s: no failure for\n%s", tc.name, tc.stdout)
		t.Logf("%s: %q", tc.name, msgs)
	}
}
