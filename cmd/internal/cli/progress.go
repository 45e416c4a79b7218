package cli

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// clearLine returns the cursor to the start of the line and erases it.
const clearLine = "\r\x1b[K"

// Progress timing: the line appears only once a call has run for
// progressDelay (short calls never flicker) and is redrawn every
// progressEvery.
const (
	progressDelay = 250 * time.Millisecond
	progressEvery = 100 * time.Millisecond
)

// renderProgress is the text of the live progress line.
func renderProgress(frames, bytes int64, elapsed time.Duration) string {
	return "  " + formatCount(frames) + " frames  " + formatBytes(bytes) + "  " +
		formatRate(bytes, elapsed) + "  " + formatDuration(elapsed.Truncate(time.Millisecond)) + " elapsed"
}

// progress draws a live one-line status on a terminal while a call runs and
// keeps it out of the way of other output: every other write to the
// terminal goes through above, which erases the line first; the next tick
// redraws it. finish erases it for good.
//
// Counters (add) are safe from any goroutine; above and finish are called
// by the goroutine that reads the call.
type progress struct {
	term  io.Writer // the terminal the line is drawn on
	start time.Time

	frames atomic.Int64
	bytes  atomic.Int64

	mu    sync.Mutex // serialises writes to term and to output written through above
	shown bool       // the line is on screen; guarded by mu

	stop chan struct{} // closed by finish
	done chan struct{} // closed when the drawing goroutine has returned
}

// startProgress starts drawing on term. The caller must call finish.
func startProgress(term io.Writer) *progress {
	p := &progress{term: term, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go p.run() // stopped by finish (closes p.stop), which waits for p.done
	return p
}

func (p *progress) run() {
	defer close(p.done)
	delay := time.NewTimer(progressDelay)
	defer delay.Stop()
	select {
	case <-p.stop:
		return
	case <-delay.C:
	}
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for {
		p.draw()
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
	}
}

func (p *progress) draw() {
	line := renderProgress(p.frames.Load(), p.bytes.Load(), time.Since(p.start))
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.term, clearLine+line)
	p.shown = true
}

// add counts frames and bytes received. A nil *progress (no terminal)
// ignores it.
func (p *progress) add(frames, bytes int64) {
	if p == nil {
		return
	}
	p.frames.Add(frames)
	p.bytes.Add(bytes)
}

// above runs write (which prints other output) with the progress line
// erased. On a nil *progress it just runs write.
func (p *progress) above(write func()) {
	if p == nil {
		write()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		_, _ = io.WriteString(p.term, clearLine)
		p.shown = false
	}
	write()
}

// finish stops drawing and erases the line. It is idempotent, and does
// nothing on a nil *progress.
func (p *progress) finish() {
	if p == nil {
		return
	}
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	p.above(func() {})
}
