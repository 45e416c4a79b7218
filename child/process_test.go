package child_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestBinaryOutsideHost(t *testing.T) {
	cmd := exec.Command(childBin)
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 2, ee.ExitCode())
	require.Contains(t, lastLine(string(out)), "SKULK_PROTOCOL")
}

func TestBinaryControlEOFExitsPromptly(t *testing.T) {
	p := testnet.StartProcess(t, childBin, []string{"--test-tools"})
	_, err := p.Host.Handshake(ctxT(t), nil)
	require.NoError(t, err)
	s := dial(t, p.Host)
	begin(t, s, "e1", "sleep", map[string]any{"ms": 30_000, "ignore_cancel": true})
	pingUntil(t, p.Host, func(p *wire.Pong) bool { return p.Streams == 1 })
	start := time.Now()
	p.Host.Close()
	code, err := p.Wait(wait)
	require.NoError(t, err)
	require.Equal(t, 0, code, p.Output())
	require.Less(t, time.Since(start), time.Second)
}

func TestBinaryVersionNotOffered(t *testing.T) {
	p := testnet.StartProcess(t, childBin, nil)
	st := testnet.DefaultStartup()
	st.Protocol = 9
	_, err := p.Host.Handshake(ctxT(t), st)
	require.NoError(t, err)
	code, err := p.Wait(wait)
	require.NoError(t, err)
	require.Equal(t, 2, code)
	require.Contains(t, lastLine(p.Output()), "protocol version")
}

func TestBinaryNoStartup(t *testing.T) {
	t.Parallel() // waits the full 10 s of PROTOCOL.md §7
	p := testnet.StartProcess(t, childBin, nil)
	_, err := p.Host.Hello(ctxT(t))
	require.NoError(t, err)
	start := time.Now()
	code, err := p.Wait(20 * time.Second)
	require.NoError(t, err)
	require.Equal(t, 2, code)
	require.Contains(t, lastLine(p.Output()), "no startup")
	require.Greater(t, time.Since(start), 8*time.Second)
}

func TestBinaryDrainExitsZero(t *testing.T) {
	p := testnet.StartProcess(t, childBin, nil)
	_, err := p.Host.Handshake(ctxT(t), nil)
	require.NoError(t, err)
	require.NoError(t, p.Host.Drain(time.Second))
	_, err = p.Host.WaitBye(ctxT(t))
	require.NoError(t, err)
	code, err := p.Wait(wait)
	require.NoError(t, err)
	require.Equal(t, 0, code)
}

func TestBinaryCrash(t *testing.T) {
	p := testnet.StartProcess(t, childBin, []string{"--test-tools"})
	_, err := p.Host.Handshake(ctxT(t), nil)
	require.NoError(t, err)
	s := dial(t, p.Host)
	require.NoError(t, s.Invoke("cr1", "crash", map[string]any{"after": 3}, 0))
	s.Started("cr1") // the child may be gone already: crash needs no input
	res, err := s.ReadCall("cr1", deadline())
	require.Error(t, err) // EOF before any terminal
	require.Nil(t, res.Terminal)
	require.Len(t, res.Chunks(), 3)
	for i, f := range res.Chunks() {
		require.Equal(t, int64(i), num(t, decode(t, f.Payload)["i"]))
	}
	code, err := p.Wait(wait)
	require.NoError(t, err)
	require.Equal(t, 3, code)
}

func TestBinaryWithoutTestTools(t *testing.T) {
	p := testnet.StartProcess(t, childBin, nil)
	hello, err := p.Host.Handshake(ctxT(t), nil)
	require.NoError(t, err)
	for _, tool := range hello.Tools {
		require.NotEqual(t, "crash", tool.ID)
		if tool.ID == "sleep" {
			require.NotContains(t, tool.ArgumentsSchema["properties"], "ignore_cancel")
		}
	}
	s := dial(t, p.Host)
	begin(t, s, "w1", "sleep", map[string]any{"ms": 1, "ignore_cancel": true})
	requireTerminal(t, readCall(t, s, "w1"), frame.KindFailed, frame.CodeProviderError)
}
