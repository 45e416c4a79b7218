package host

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"go.uber.org/goleak"
)

// The pool start modes of the fake child (poolbarrier, poolfail,
// poolfailearly: internal/fakechild's package doc) coordinate the children
// of one pool through marker files in the directory named by poolDirEnv,
// so that the tests below need no timing.
const (
	poolDirEnv  = "FAKECHILD_POOL_DIR"
	poolSizeEnv = "FAKECHILD_POOL_SIZE"
)

func poolConfig(t *testing.T, mode string, n int) Config {
	cfg := fakeConfig(mode)
	cfg.PoolSize = n
	cfg.ExtraEnv = append(cfg.ExtraEnv, poolDirEnv+"="+t.TempDir(), poolSizeEnv+"="+strconv.Itoa(n))
	return cfg
}

// The children of a pool start at once: each of them waits for all the
// others to have started before it says hello, which a pool started one
// child after another would never get past.
func TestStartPoolInParallel(t *testing.T) {
	const n = 4
	h, _ := testHost(t, fastHealth(poolConfig(t, "poolbarrier", n)), time.Minute)
	pids := map[int]bool{}
	for _, info := range h.Children() {
		if info.State != "ready" || info.PID == 0 {
			require.FailNow(t, fmt.Sprintf("children %+v", h.Children()))
		}
		pids[info.PID] = true
	}
	require.Falsef(t, len(pids) != n, "%d distinct children, want %d", len(pids), n)
	ctx := callCtx(t, 30*time.Second)
	for range n {
		c, err := h.Call(ctx, "ok", nil)
		require.NoError(t, err)
		c.CloseSend()
		if _, err := c.Wait(); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
	}
}

// A child of a pool that fails to start fails Start with its own typed
// error, cancels the starts still under way and gets every child that did
// start stopped: no process, socket file, private directory, descriptor or
// goroutine is left.
func TestStartPoolFailure(t *testing.T) {
	for _, mode := range []string{"poolfailearly", "poolfail"} {
		t.Run(mode, func(t *testing.T) {
			base := t.TempDir()
			fds := countFDs(t)
			cfg := poolConfig(t, mode, 3)
			cfg.TempDir = base
			// The others' starts end with the failure, long before this.
			cfg.StartTimeout = time.Minute
			t0 := time.Now()
			_, err := Start(callCtx(t, 2*time.Minute), cfg)
			require.Falsef(t, !errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), "child c1.1:"), "Start: %v, want child c1.1's ErrHandshake", err)
			require.Falsef(t, errors.Is(err, context.Canceled), "Start: %v: the first failure is not the one returned", err)
			if d := time.Since(t0); d > cfg.StartTimeout/2 {
				require.FailNow(t, fmt.Sprintf("Start took %v: the other starts were not cancelled", d))
			}
			checkClean(t, base, fds)
			goleak.VerifyNone(t)
		})
	}
}
