package testnet

import (
	"os"

	"go.uber.org/goleak"
)

// CleanupAndExit is the goleak.Cleanup option for a TestMain that has
// clean-up to do: goleak.VerifyTestMain(m, testnet.CleanupAndExit(fn)).
// It runs cleanup (which may be nil) after goleak's check and exits the
// process with the status goleak settled on: the tests' own, made 1 when
// goleak found a goroutine left after they passed. goleak.Cleanup with a
// function that does not exit replaces goleak's os.Exit, and the test
// binary then exits with the tests' status, dropping the leak.
func CleanupAndExit(cleanup func()) goleak.Option {
	return goleak.Cleanup(func(code int) {
		if cleanup != nil {
			cleanup()
		}
		os.Exit(code)
	})
}
