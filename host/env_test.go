package host

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A nil Config.Env gives the child the default variables from the host's
// environment (the same default skulk-host uses) and nothing else of it;
// an empty Env gives it none; ExtraEnv adds to either.
func TestChildEnvironment(t *testing.T) {
	t.Setenv("HOME", "/home/skulk-test")
	t.Setenv("TZ", "UTC")
	t.Setenv("SKULK_TEST_NOT_PASSED", "secret")
	for _, tc := range []struct {
		name    string
		env     []string
		want    []string
		notWant []string
	}{
		{"nil means the default", nil,
			[]string{"PATH=" + os.Getenv("PATH"), "HOME=/home/skulk-test", "TZ=UTC", "EXTRA=1"},
			[]string{"SKULK_TEST_NOT_PASSED="}},
		{"empty means nothing", []string{},
			[]string{"EXTRA=1"},
			[]string{"PATH=", "HOME=", "TZ=", "SKULK_TEST_NOT_PASSED="}},
		{"the default and one more", append(slices.Clone(defaultEnv), "SKULK_TEST_NOT_PASSED"),
			[]string{"PATH=" + os.Getenv("PATH"), "HOME=/home/skulk-test", "SKULK_TEST_NOT_PASSED=secret"},
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "env")
			cfg := fakeConfig("serve")
			cfg.Env = tc.env
			cfg.ExtraEnv = append(cfg.ExtraEnv, fakeEnvOutEnv+"="+out, "EXTRA=1")
			testHost(t, cfg, 30*time.Second) // Start returns once the child said hello
			b, err := os.ReadFile(out)
			require.NoError(t, err)
			lines := strings.Split(string(b), "\n")
			for _, w := range tc.want {
				require.Contains(t, lines, w)
			}
			for _, nw := range tc.notWant {
				for _, l := range lines {
					require.False(t, strings.HasPrefix(l, nw), "the child was given %s", nw)
				}
			}
		})
	}
}
