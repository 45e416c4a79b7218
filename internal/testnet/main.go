package testnet

import (
	"os"
	"slices"

	"go.uber.org/goleak"
)

// VerifyMain runs the package's tests (m.Run), then goleak's check for
// goroutines left running, then cleanup (which may be nil), and exits the
// process with the tests' status, made 1 when goleak found a leak. It is
// goleak.VerifyTestMain with a clean-up: goleak.Cleanup alone replaces
// goleak's os.Exit, so a TestMain that passes it a function that does not
// exit returns, and the test binary then exits with m.Run's status,
// dropping a leak found after the tests passed.
func VerifyMain(m goleak.TestingM, cleanup func(), opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(slices.Clip(opts), goleak.Cleanup(func(code int) {
		if cleanup != nil {
			cleanup()
		}
		os.Exit(code)
	}))...)
}
