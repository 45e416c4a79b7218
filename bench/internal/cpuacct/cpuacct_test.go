package cpuacct

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

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
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("burner: %v", err)
		}
	}()
	m, err := Start(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := burn(hostBurn); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "burnt\n" {
		t.Fatalf("burner said %q, %v", line, err)
	}
	u, err := m.Stop()
	if err != nil {
		t.Fatal(err)
	}
	// The child's reading at Start may already hold a few ticks of its
	// start-up; its burn comes after. A tick is 10 ms.
	if u.Children < childBurn-50*time.Millisecond || u.Children > childBurn+2*time.Second {
		t.Errorf("children's CPU = %v, want about %v", u.Children, childBurn)
	}
	if u.Host < hostBurn {
		t.Errorf("host CPU = %v, want at least %v", u.Host, hostBurn)
	}
	if u.Total() != u.Host+u.Children || u.Wall <= 0 {
		t.Errorf("Total %v, Wall %v", u.Total(), u.Wall)
	}
	if rss, err := RSS(cmd.Process.Pid); err != nil || rss <= 0 {
		t.Errorf("RSS(child) = %d, %v", rss, err)
	}
	if n, err := FDs(cmd.Process.Pid); err != nil || n < 3 {
		t.Errorf("FDs(child) = %d, %v; want stdin, stdout and stderr at least", n, err)
	}
}

func TestSelfProcesses(t *testing.T) {
	before, err := FDs(0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	after, err := FDs(0)
	f.Close()
	if err != nil || after != before+1 {
		t.Errorf("FDs(0) = %d after opening a file, %d before (%v)", after, before, err)
	}
	if rss, err := RSS(0); err != nil || rss <= 0 {
		t.Errorf("RSS(0) = %d, %v", rss, err)
	}
	if c, err := Proc(os.Getpid()); err != nil || c < 0 {
		t.Errorf("Proc(self) = %v, %v", c, err)
	}
}

func TestExitedProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true(1):", err)
	}
	pid := cmd.Process.Pid // waited for: /proc has no entry left
	if _, err := Proc(pid); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Proc(exited) = %v, want ErrNoProcess", err)
	}
	if _, err := RSS(pid); !errors.Is(err, ErrNoProcess) {
		t.Errorf("RSS(exited) = %v, want ErrNoProcess", err)
	}
	if _, err := Start(pid); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Start(exited) = %v, want ErrNoProcess", err)
	}
}
