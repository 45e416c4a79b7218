package hostile_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/recorder"
)

// memHostEnv makes this test binary, re-executed, a host process that
// runs media floods and reports its own peak RSS (runMemHost): the value
// is "CALLS FRAMES".
const memHostEnv = "HOSTILE_MEM_HOST"

// memReport is what runMemHost prints: its peak RSS (VmHWM) before the
// floods and after them, in KiB, and the media frames its callers read.
type memReport struct {
	BaseKiB, PeakKiB int
	Frames           int
	Err              string
}

// runMemHost starts a host of one fake child, makes one small call so
// that everything a call needs is allocated once, reads its VmHWM, then
// makes CALLS mediaflood calls at once, each of FRAMES frames of 16 MiB
// read by a caller that takes every frame, and prints a memReport.
func runMemHost(spec string) int {
	var calls, frames int
	fmt.Sscan(spec, &calls, &frames)
	rep := memReport{}
	defer func() {
		b, _ := json.Marshal(rep)
		fmt.Println(string(b))
	}()
	dir, err := os.MkdirTemp("", "skmem")
	if err != nil {
		rep.Err = err.Error()
		return 1
	}
	defer os.RemoveAll(dir)
	h, err := host.Start(context.Background(), host.Config{
		Command: os.Getenv("HOSTILE_BIN"), Args: []string{"serve"}, TempDir: dir,
		ExtraEnv: []string{"FAKECHILD_PIDS=" + dir},
	})
	if err != nil {
		rep.Err = err.Error()
		return 1
	}
	defer h.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if c, err := h.Call(ctx, "mediaflood", frame.MustPayload(map[string]any{"n": 1}), host.WithInput()); err == nil {
		c.Wait()
	}
	rep.BaseKiB = vmHWM()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range calls {
		wg.Add(1)
		go func() { // stopped by the call's end
			defer wg.Done()
			n, err := readFlood(ctx, h, frames)
			mu.Lock()
			defer mu.Unlock()
			rep.Frames += n
			if err != nil && rep.Err == "" {
				rep.Err = err.Error()
			}
		}()
	}
	wg.Wait()
	rep.PeakKiB = vmHWM()
	return 0
}

// readFlood makes one mediaflood call of n frames and reads every frame.
func readFlood(ctx context.Context, h *host.Host, n int) (int, error) {
	c, err := h.Call(ctx, "mediaflood", frame.MustPayload(map[string]any{"n": n}), host.WithInput())
	if err != nil {
		return 0, err
	}
	got := 0
	for f, err := range c.Frames() {
		if err != nil {
			return got, err
		}
		if m, ok := f.Media.(*frame.InlineMedia); ok {
			if len(m.Data) != protocol.DefaultMaxAttachment {
				return got, fmt.Errorf("frame %d: %d bytes of media", got, len(m.Data))
			}
			got++
		}
		if f.Kind.IsTerminal() && f.Kind != frame.KindCompleted {
			return got, fmt.Errorf("terminal %s", f.Kind)
		}
	}
	return got, nil
}

// vmHWM is this process's peak resident set size in KiB.
func vmHWM() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			return n
		}
	}
	return 0
}

// memCallBound is docs/operations.md's bound on the host memory one call
// holds ("Host memory"), for the default limits: the outbox's 16 MiB, two
// packets (the one being read and the one its caller holds), and the
// history's 1 MiB plus a header.
const memCallBound = 16<<20 + 2*(protocol.DefaultMaxAttachment+protocol.DefaultMaxHeader) + recorder.DefaultHistoryBytes + protocol.DefaultMaxHeader

// TestMediaFloodMemoryBounded: a child that sends 16 MiB attachments as
// fast as its caller reads them (each frame read, none recycled) cannot
// make the host hold more than docs/operations.md's bound: the peak RSS
// of a host process running one such call, and two at once, grows by at
// most the bound per call times the Go heap's growth factor (GOGC=100:
// 2), plus 32 MiB for the runtime, under the race detector times its
// shadow memory.
func TestMediaFloodMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("moves over a GiB through a socket")
	}
	for _, calls := range []int{1, 2} {
		t.Run(strconv.Itoa(calls)+" calls", func(t *testing.T) {
			// Each host is a process of its own that measures its own
			// peak: the two run at once.
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			// The bound assumes the default GC pacing, whatever the
			// environment of the test run sets.
			cmd.Env = append(os.Environ(), memHostEnv+"="+strconv.Itoa(calls)+" "+strconv.Itoa(floodFrames), "GOGC=100", "GOMEMLIMIT=off")
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			require.NoError(t, err, "the memory host failed")
			var rep memReport
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "{") {
					require.NoError(t, json.Unmarshal(sc.Bytes(), &rep))
				}
			}
			require.Empty(t, rep.Err)
			require.Equal(t, calls*floodFrames, rep.Frames, "media frames read")
			growth := (rep.PeakKiB - rep.BaseKiB) << 10
			bound := (2*calls*memCallBound + 32<<20) * raceFactor
			t.Logf("peak RSS %d MiB, %d MiB before the floods: grew %d MiB, bound %d MiB",
				rep.PeakKiB>>10, rep.BaseKiB>>10, growth>>20, bound>>20)
			require.LessOrEqual(t, growth, bound, "host RSS growth over the bound")
		})
	}
}
