package skulktest_test

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// exampleT is the testing.TB the Examples hand the test bodies they show:
// in a package of your own, each body is a TestXxx(t *testing.T). It has
// what skulktest and the bodies use; an error is printed, so that the
// Example's output check fails.
type exampleT struct {
	testing.TB // nil; only the methods below are called
	mu         sync.Mutex
	cleanups   []func()
	failed     bool
}

func (t *exampleT) Helper()                           {}
func (t *exampleT) Name() string                      { return "Example" }
func (t *exampleT) Cleanup(f func())                  { t.mu.Lock(); t.cleanups = append(t.cleanups, f); t.mu.Unlock() }
func (t *exampleT) Log(args ...any)                   {}
func (t *exampleT) Logf(format string, args ...any)   {}
func (t *exampleT) Error(args ...any)                 { t.fail(fmt.Sprint(args...)) }
func (t *exampleT) Errorf(format string, args ...any) { t.fail(fmt.Sprintf(format, args...)) }
func (t *exampleT) Fatal(args ...any)                 { t.fail(fmt.Sprint(args...)); runtime.Goexit() }
func (t *exampleT) Fatalf(format string, args ...any) {
	t.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (t *exampleT) Failed() bool { t.mu.Lock(); defer t.mu.Unlock(); return t.failed }
func (t *exampleT) TempDir() string {
	dir, err := os.MkdirTemp("", "ske")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (t *exampleT) fail(msg string) {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
	fmt.Println("FAIL:", msg)
}

// runExample runs body as go test runs a test: on a goroutine of its own,
// then its cleanups, last registered first.
func runExample(body func(t testing.TB)) {
	t := &exampleT{}
	run := func(f func()) {
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		<-done
	}
	run(func() { body(t) })
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		run(t.cleanups[i])
	}
}
