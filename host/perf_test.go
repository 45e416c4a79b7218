package host

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func writePerf(t *testing.T, path string, h0, h1, h2 uint64, r0, r1, r2, c0, c1, c2 int) {
	t.Helper()
	s := fmt.Sprintf("| point | host heap in use | host RSS | child RSS |\n| --- | --- | --- | --- |\n"+
		"| after 1,000 frames read | %d KiB | %d KiB | %d KiB |\n"+
		"| after a 2 s stall (caller not reading) | %d KiB | %d KiB | %d KiB |\n"+
		"| after 101,000 frames read | %d KiB | %d KiB | %d KiB |\n",
		h0>>10, r0, c0, h1>>10, r1, c1, h2>>10, r2, c2)
	require.NoError(t, os.WriteFile(path, []byte(s), 0o644))
}
