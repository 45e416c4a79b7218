package cpuacct

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// burnVar makes the test binary a child that burns the CPU time it names
// (a time.Duration), says "burnt" on stdout and waits for stdin to close.
const burnVar = "CPUACCT_TEST_BURN"

func TestMain(m *testing.M) {
	if d := os.Getenv(burnVar); d != "" {
		os.Exit(burnChild(d))
	}
	goleak.VerifyTestMain(m)
}

func burnChild(arg string) int {
	d, err := time.ParseDuration(arg)
	if err == nil {
		err = burn(d)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("burnt")
	_, _ = bufio.NewReader(os.Stdin).ReadByte() // EOF when the test closes stdin
	return 0
}

// burn spins until this process has used d more CPU time than when it
// started spinning.
func burn(d time.Duration) error {
	t0, err := Self()
	if err != nil {
		return err
	}
	x := 0
	for i := 0; ; i++ {
		x += i * i
		if i%(1<<16) == 0 {
			t, err := Self()
			if err != nil {
				return err
			}
			if t-t0 >= d {
				_ = x
				return nil
			}
		}
	}
}

// TestMeterCountsHostAndChild runs a child that burns a known CPU time
// while this process burns another, and checks the Meter shows each
// where it belongs, read while the child is still running.
func TestMeterCountsHostAndChild(t *testing.T) {
	const hostBurn, childBurn = 300 * time.Millisecond, 500 * time.Millisecond
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), burnVar+"="+childBurn.String())
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	defer func() {
		stdin.Close()
		assert.NoError(t, cmd.Wait(), "burner")
	}()
	m, err := Start(cmd.Process.Pid)
	require.NoError(t, err)
	require.NoError(t, burn(hostBurn))
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.Falsef(t, err != nil || line != "burnt\n", "burner said %q, %v", line, err)
	u, err := m.Stop()
	require.NoError(t, err)
	// The child's reading at Start may already hold a few ticks of its
	// start-up; its burn comes after. A tick is 10 ms.
	assert.Falsef(t, u.Children < childBurn-50*time.Millisecond || u.Children > childBurn+2*time.Second, "children's CPU = %v, want about %v", u.Children, childBurn)
	assert.Falsef(t, u.Host < hostBurn, "host CPU = %v, want at least %v", u.Host, hostBurn)
	if u.Total() != u.Host+u.Children || u.Wall <= 0 {
		assert.Fail(t, fmt.Sprintf("Total %v, Wall %v", u.Total(), u.Wall))
	}
	// OnCPU counts the same burn in nanoseconds: at least the burn, and
	// within a few ticks of what the ticks counted.
	oc, err := OnCPU(cmd.Process.Pid)
	require.NoError(t, err)
	pc, err := Proc(cmd.Process.Pid)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, oc, childBurn, "the child's on-CPU time")
	assert.InDelta(t, float64(pc), float64(oc), float64(100*time.Millisecond), "the child's on-CPU time against its ticks")
	if rss, err := RSS(cmd.Process.Pid); err != nil || rss <= 0 {
		assert.Fail(t, fmt.Sprintf("RSS(child) = %d, %v", rss, err))
	}
	if n, err := FDs(cmd.Process.Pid); err != nil || n < 3 {
		assert.Fail(t, fmt.Sprintf("FDs(child) = %d, %v; want stdin, stdout and stderr at least", n, err))
	}
}

func TestSelfProcesses(t *testing.T) {
	before, err := FDs(0)
	require.NoError(t, err)
	f, err := os.Open(os.Args[0])
	require.NoError(t, err)
	after, err := FDs(0)
	f.Close()
	assert.Falsef(t, err != nil || after != before+1, "FDs(0) = %d after opening a file, %d before (%v)", after, before, err)
	if rss, err := RSS(0); err != nil || rss <= 0 {
		assert.Fail(t, fmt.Sprintf("RSS(0) = %d, %v", rss, err))
	}
	if c, err := Proc(os.Getpid()); err != nil || c < 0 {
		assert.Fail(t, fmt.Sprintf("Proc(self) = %v, %v", c, err))
	}
}

func TestExitedProcess(t *testing.T) {
	if _, err := OnCPU(1 << 30); !errors.Is(err, ErrNoProcess) {
		assert.Fail(t, fmt.Sprintf("OnCPU of no process: %v, want ErrNoProcess", err))
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true(1):", err)
	}
	pid := cmd.Process.Pid // waited for: /proc has no entry left
	if _, err := Proc(pid); !errors.Is(err, ErrNoProcess) {
		assert.Fail(t, fmt.Sprintf("Proc(exited) = %v, want ErrNoProcess", err))
	}
	if _, err := RSS(pid); !errors.Is(err, ErrNoProcess) {
		assert.Fail(t, fmt.Sprintf("RSS(exited) = %v, want ErrNoProcess", err))
	}
	if _, err := Start(pid); !errors.Is(err, ErrNoProcess) {
		assert.Fail(t, fmt.Sprintf("Start(exited) = %v, want ErrNoProcess", err))
	}
}
