package calllog_test

import (
	"os"
	"testing"

	"github.com/skulkrt/skulk/internal/testnet"
	"go.uber.org/goleak"
)

// examplesDir is where the examples keep their files; TestMain removes it.
var examplesDir string

func tempDir() (string, error) {
	if examplesDir == "" {
		d, err := os.MkdirTemp("", "calllog-example")
		if err != nil {
			return "", err
		}
		examplesDir = d
	}
	return examplesDir, nil
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testnet.CleanupAndExit(func() {
		if examplesDir != "" {
			os.RemoveAll(examplesDir)
		}
	}))
}
