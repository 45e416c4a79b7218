package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/cmd/internal/termsafe"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// Demo tour parameters.
const (
	demoMediaBytes   = 64 << 20
	demoMediaChunk   = 1 << 20
	demoDeadline     = 300 * time.Millisecond
	demoCancelAfter  = 200 * time.Millisecond
	demoSleep        = 5 * time.Second  // the sleep the deadline and the cancel cut short
	demoKillSleep    = 30 * time.Second // the sleep the kill interrupts
	demoPieceGap     = 80 * time.Millisecond
	demoStepTimeout  = 20 * time.Second // bounds every step, so a broken host cannot hang the demo
	demoRestartBound = 15 * time.Second
)

// demoPieces is the text the stream step sends, one caller chunk each.
var demoPieces = []string{"skulk", "streams", "text", "piece", "by", "piece"}

func runDemo(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var cf childFlags
	fs.BoolVar(&cf.verbose, "v", false, "")
	pos, child, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || len(child) > 0 {
		return usageErr("demo takes no arguments")
	}
	if env.Executable == "" {
		return statusErr(ExitStart, "cannot find this program's own path to start the demo child")
	}
	d := &demo{out: env.Stdout}
	fmt.Fprintln(d.out, "skulk-host demo: a short tour of Skulk with a real child process")

	cfg := cf.config([]string{env.Executable, ChildMode}, env)
	cfg.Env = nil // the demo child needs nothing from the environment
	start := time.Now()
	h, err := startHost(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeHost(h)
	info := h.Children()[0]
	d.step("child", "pid %d started in %s: this binary re-executed as a provider (tools: %s)",
		info.PID, formatDuration(time.Since(start)), toolIDs(h))

	steps := []func(context.Context, *host.Host) error{d.stream, d.media, d.deadline, d.cancel, d.kill}
	for _, s := range steps {
		sctx, cancel := context.WithTimeout(ctx, demoStepTimeout)
		err := s(sctx, h)
		cancel()
		if err != nil {
			return statusErr(ExitFailure, "the tour stopped: %v", err)
		}
	}
	closeStart := time.Now()
	closeHost(h)
	d.step("close", "child drained and stopped in %s: drain, bye, exit; nothing left behind", formatDuration(time.Since(closeStart)))
	fmt.Fprintf(d.out, "done: every step behaved as described. Next: %s help call (a call to your own provider)\n", selfCommand(env.Executable))
	return nil
}

// demo prints the tour.
type demo struct {
	out io.Writer
}

// step prints one line of the tour.
func (d *demo) step(name, format string, args ...any) {
	fmt.Fprintf(d.out, "  %-9s %s\n", name, fmt.Sprintf(format, args...))
}

func toolIDs(h *host.Host) string {
	var ids []string
	for _, t := range h.Tools() {
		ids = append(ids, t.ID)
	}
	slices.Sort(ids)
	return termsafe.Escape(strings.Join(ids, ", "))
}

// stream sends pieces of text to upper one at a time and prints each
// answer as it arrives, on one line.
func (d *demo) stream(ctx context.Context, h *host.Host) error {
	c, err := h.Call(ctx, "upper", nil)
	if err != nil {
		return fmt.Errorf("upper: %w", err)
	}
	fmt.Fprintf(d.out, "  %-9s upper:", "stream")
	got := 0
	for _, p := range demoPieces {
		if err := c.Send(ctx, frame.MustPayload(map[string]any{"text": p}), nil); err != nil {
			c.Cancel()
			_, _ = c.Wait()
			return fmt.Errorf("upper: send: %w", err)
		}
		// Read until this piece's answer: the output arrives while the
		// input is still being written.
		for got < len(demoPieces) {
			f, err := c.Recv(ctx)
			if err != nil {
				c.Cancel()
				_, _ = c.Wait()
				return fmt.Errorf("upper: %w", err)
			}
			if f.Kind.IsTerminal() {
				return fmt.Errorf("upper ended early: %s", describeTerminal(f))
			}
			if text, ok := f.Payload.Text(); ok && f.Kind == frame.KindChunk {
				fmt.Fprintf(d.out, " %s", termsafe.Escape(text))
				got++
				break
			}
		}
		time.Sleep(demoPieceGap) // only to make the pieces visible to a person
	}
	if err := c.CloseSend(); err != nil {
		return fmt.Errorf("upper: half-close: %w", err)
	}
	if _, err := c.Wait(); err != nil {
		return fmt.Errorf("upper: %w", err)
	}
	fmt.Fprintf(d.out, " — each of %d chunks came back as soon as the child read it\n", got)
	return nil
}

// media transfers demoMediaBytes of inline media and checks its digest.
// The digest is computed on another goroutine, so the rate shown is the
// transfer's, not SHA-256's.
func (d *demo) media(ctx context.Context, h *host.Host) error {
	start := time.Now()
	c, err := h.Call(ctx, "media", frame.MustPayload(map[string]any{"bytes": demoMediaBytes, "chunk": demoMediaChunk}))
	if err != nil {
		return fmt.Errorf("media: %w", err)
	}
	if err := c.CloseSend(); err != nil {
		c.Cancel()
	}
	// chunks feeds the hasher; 4 chunks of slack let the transfer run
	// ahead of the digest, then Recv waits (backpressure to the child).
	chunks := make(chan []byte, 4)
	digest := make(chan string, 1)
	go func() { // stopped by closing chunks, below
		sum := sha256.New()
		for b := range chunks {
			sum.Write(b)
		}
		digest <- hex.EncodeToString(sum.Sum(nil))
	}()
	var n, count int64
	var last frame.Frame
	var recvErr error
	for f, err := range c.Frames() {
		if err != nil {
			recvErr = err
			break
		}
		if m, ok := f.Media.(*frame.InlineMedia); ok {
			chunks <- m.Data // Recv's frames may be kept
			n += int64(len(m.Data))
			count++
		}
		last = f
	}
	elapsed := time.Since(start)
	close(chunks)
	sum := <-digest
	if recvErr != nil {
		return fmt.Errorf("media: %w", recvErr)
	}
	if last.Kind != frame.KindCompleted {
		return fmt.Errorf("media: %s", describeTerminal(last))
	}
	var res struct {
		SHA256 string `json:"sha256"`
	}
	if err := last.Payload.Decode(&res); err != nil || res.SHA256 != sum || n != demoMediaBytes {
		return errors.New("media: the bytes received do not match the child's sha256")
	}
	d.step("media", "%d MiB inline in %d chunks of %d MiB: %s in %s, sha256 verified (raw bytes beside the header, no base64)",
		n>>20, count, demoMediaChunk>>20, formatRate(n, elapsed), formatDuration(elapsed))
	return nil
}

// deadline runs sleep past a context deadline: the child ends it with
// failed/timeout.
func (d *demo) deadline(ctx context.Context, h *host.Host) error {
	cctx, cancel := context.WithTimeout(ctx, demoDeadline)
	defer cancel()
	start := time.Now()
	last, err := callTerminal(cctx, h, "sleep", map[string]any{"ms": demoSleep.Milliseconds()})
	if err != nil {
		return fmt.Errorf("deadline: %w", err)
	}
	if last.Kind != frame.KindFailed || last.Error.Code != frame.CodeTimeout {
		return fmt.Errorf("deadline: want failed/timeout, got %s", describeTerminal(last))
	}
	d.step("deadline", "sleep %v, deadline %v → %s after %s: the deadline travelled as timeout_ms",
		demoSleep, demoDeadline, describeTerminal(last), formatDuration(time.Since(start)))
	return nil
}

// cancel cancels a running sleep through its context.
func (d *demo) cancel(ctx context.Context, h *host.Host) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := h.Call(cctx, "sleep", frame.MustPayload(map[string]any{"ms": demoSleep.Milliseconds()}))
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	if err := c.CloseSend(); err != nil {
		c.Cancel()
	}
	start := time.Now()
	timer := time.AfterFunc(demoCancelAfter, cancel)
	defer timer.Stop()
	last, err := lastFrame(c)
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	if last.Kind != frame.KindCancelled {
		return fmt.Errorf("cancel: want cancelled, got %s", describeTerminal(last))
	}
	d.step("cancel", "sleep %v, cancelled at %v → %s after %s: a control cancel plus the caller's cancelled frame",
		demoSleep, demoCancelAfter, describeTerminal(last), formatDuration(time.Since(start)))
	return nil
}

// kill sends SIGKILL to the child in the middle of a call, shows the
// synthetic unreachable, then makes a call on the restarted child.
func (d *demo) kill(ctx context.Context, h *host.Host) error {
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": demoKillSleep.Milliseconds()}))
	if err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	if err := c.CloseSend(); err != nil {
		c.Cancel()
	}
	if f, err := c.Recv(ctx); err != nil || f.Kind != frame.KindStarted {
		c.Cancel()
		_, _ = c.Wait()
		return fmt.Errorf("kill: the call did not start")
	}
	old := h.Children()[0]
	killed := time.Now()
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		c.Cancel()
		_, _ = c.Wait()
		return fmt.Errorf("kill: cannot signal the child: %w", err)
	}
	last, err := lastFrame(c)
	if err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	if last.Kind != frame.KindFailed || last.Error.Code != frame.CodeUnreachable || !last.Synthetic {
		return fmt.Errorf("kill: want a synthetic failed/unreachable, got %s", describeTerminal(last))
	}
	d.step("kill -9", "SIGKILL to pid %d in the middle of a call → %s after %s: the host made up the terminal",
		old.PID, describeTerminal(last), formatDuration(time.Since(killed)))

	rctx, cancel := context.WithTimeout(ctx, demoRestartBound)
	defer cancel()
	now, err := awaitRestart(rctx, h, old.PID)
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	ready := time.Since(killed)
	last, err = callTerminal(rctx, h, "count", map[string]any{"n": 3})
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	if last.Kind != frame.KindCompleted {
		return fmt.Errorf("restart: want completed, got %s", describeTerminal(last))
	}
	d.step("restart", "new pid %d (restarts: %d) ready %s after the kill; the next call completed %s",
		now.PID, now.Restarts, formatDuration(ready), compactJSON(last.Payload))
	return nil
}

// restartPoll is how often awaitRestart looks at the pool: Host offers no
// notification of a restart, and a few milliseconds of delay do not show
// in the demo.
const restartPoll = 5 * time.Millisecond

// awaitRestart waits until the pool's child is ready with a pid other than
// old.
func awaitRestart(ctx context.Context, h *host.Host, old int) (host.ChildInfo, error) {
	tick := time.NewTicker(restartPoll)
	defer tick.Stop()
	for {
		c := h.Children()[0]
		if c.State == "ready" && c.PID != 0 && c.PID != old {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return c, fmt.Errorf("no new child ready (state %s): %w", c.State, ctx.Err())
		case <-tick.C:
		}
	}
}

// callTerminal makes a call with no input and returns its terminal frame.
func callTerminal(ctx context.Context, h *host.Host, tool string, args map[string]any) (frame.Frame, error) {
	c, err := h.Call(ctx, tool, frame.MustPayload(args))
	if err != nil {
		return frame.Frame{}, err
	}
	if err := c.CloseSend(); err != nil {
		c.Cancel()
	}
	return lastFrame(c)
}

// lastFrame reads a call to its end and returns the terminal.
func lastFrame(c *host.Call) (frame.Frame, error) {
	var last frame.Frame
	for f, err := range c.Frames() {
		if err != nil {
			return last, err
		}
		last = f
	}
	if !last.Kind.IsTerminal() {
		return last, errors.New("the call ended without a terminal")
	}
	return last, nil
}

// describeTerminal says how a call ended: "completed", "failed/timeout
// (synthetic)".
func describeTerminal(f frame.Frame) string {
	s := f.Kind.String()
	if f.Error != nil && f.Kind == frame.KindFailed {
		s += "/" + f.Error.Code.String()
	}
	if f.Synthetic {
		s += " (synthetic)"
	}
	return s
}

// selfCommand is how the reader runs skulk-host again: the README's
// "go run ./cmd/skulk-host" when go run built this binary (in a temporary
// directory of go's), and the binary's own path otherwise.
func selfCommand(exe string) string {
	if exe == "" || strings.Contains(exe, "go-build") {
		return "go run ./cmd/skulk-host"
	}
	return exe
}
