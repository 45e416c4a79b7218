package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// Bench defaults; see benchHelp.
const (
	defaultBenchFrames  = 200_000
	defaultBenchMedia   = 256 << 20
	defaultBenchCalls   = 1000
	defaultBenchStreams = 32
	benchMediaChunk     = 1 << 20
)

// benchResult is the output of bench --json. Rates use MB = 10^6 bytes.
type benchResult struct {
	SmallFrames struct {
		Frames          int64   `json:"frames"`
		Seconds         float64 `json:"seconds"`
		FramesPerSecond float64 `json:"frames_per_second"`
	} `json:"small_frames"`
	InlineMedia struct {
		Bytes       int64   `json:"bytes"`
		ChunkBytes  int64   `json:"chunk_bytes"`
		Seconds     float64 `json:"seconds"`
		MBPerSecond float64 `json:"mb_per_second"`
	} `json:"inline_media"`
	Latency struct {
		Calls     int     `json:"calls"`
		P50Micros float64 `json:"p50_us"`
		P99Micros float64 `json:"p99_us"`
	} `json:"latency"`
	Concurrent struct {
		Streams         int     `json:"streams"`
		Frames          int64   `json:"frames"`
		Seconds         float64 `json:"seconds"`
		FramesPerSecond float64 `json:"frames_per_second"`
	} `json:"concurrent"`
}

type benchOptions struct {
	json    bool
	frames  int64
	media   int64
	calls   int
	streams int
	metrics string // --metrics-addr
	child   []string
	childFlags
}

func parseBench(args []string) (*benchOptions, error) {
	o := &benchOptions{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.BoolVar(&o.json, "json", false, "")
	fs.Int64Var(&o.frames, "frames", defaultBenchFrames, "")
	fs.Int64Var(&o.media, "media", defaultBenchMedia, "")
	fs.IntVar(&o.calls, "calls", defaultBenchCalls, "")
	fs.IntVar(&o.streams, "streams", defaultBenchStreams, "")
	fs.StringVar(&o.metrics, "metrics-addr", "", "")
	o.register(fs)
	pos, child, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	switch {
	case len(pos) > 0:
		return nil, usageErr("unexpected argument: the child's command line goes after --")
	case o.frames < 1, o.media < 1, o.calls < 1, o.streams < 1:
		return nil, usageErr("--frames, --media, --calls and --streams must be at least 1")
	case int64(o.streams) > o.frames:
		return nil, usageErr("--streams must not exceed --frames (each stream gets a share of the frames)")
	case o.metrics != "":
		if err := checkMetricsAddr(o.metrics); err != nil {
			return nil, err
		}
	}
	if err := needChild(child); err != nil {
		return nil, err
	}
	o.child = child
	return o, nil
}

func runBench(ctx context.Context, args []string, env Env) error {
	o, err := parseBench(args)
	if err != nil {
		return err
	}
	cfg := o.config(o.child, env)
	ms, err := serveMetrics(o.metrics, &cfg, env)
	if err != nil {
		return err
	}
	defer ms.close() // after closeHost
	h, err := startHost(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeHost(h)
	ms.watch(h)
	for _, tool := range []string{"count", "media"} {
		if !hasTool(h, tool) {
			return statusErr(ExitRefused, "the child has no %q tool: bench needs the demo tools of cmd/skulk-child", tool)
		}
	}
	res, err := bench(ctx, h, o)
	if err != nil {
		return statusErr(ExitFailure, "%v", err)
	}
	if o.json {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printBench(env.Stdout, res)
	return nil
}

func hasTool(h *host.Host, id string) bool {
	for _, t := range h.Tools() {
		if t.ID == id {
			return true
		}
	}
	return false
}

func bench(ctx context.Context, h *host.Host, o *benchOptions) (*benchResult, error) {
	res := &benchResult{}
	// Warm up: the first call dials the stream connection.
	if _, err := runDrained(ctx, h, "count", map[string]any{"n": 10}); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}

	start := time.Now()
	st, err := runDrained(ctx, h, "count", map[string]any{"n": o.frames})
	if err != nil {
		return nil, fmt.Errorf("small frames: %w", err)
	}
	d := time.Since(start)
	res.SmallFrames.Frames, res.SmallFrames.Seconds = st.chunks, d.Seconds()
	res.SmallFrames.FramesPerSecond = float64(st.chunks) / d.Seconds()

	start = time.Now()
	st, err = runDrained(ctx, h, "media", map[string]any{"bytes": o.media, "chunk": benchMediaChunk})
	if err != nil {
		return nil, fmt.Errorf("inline media: %w", err)
	}
	d = time.Since(start)
	if st.media != o.media {
		return nil, fmt.Errorf("inline media: received %d bytes, asked for %d", st.media, o.media)
	}
	res.InlineMedia.Bytes, res.InlineMedia.ChunkBytes, res.InlineMedia.Seconds = st.media, benchMediaChunk, d.Seconds()
	res.InlineMedia.MBPerSecond = float64(st.media) / 1e6 / d.Seconds()

	lat := make([]time.Duration, 0, o.calls)
	for i := range o.calls {
		start := time.Now()
		if _, err := runDrained(ctx, h, "count", map[string]any{"n": 1}); err != nil {
			return nil, fmt.Errorf("latency call %d: %w", i+1, err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	res.Latency.Calls = o.calls
	res.Latency.P50Micros = micros(percentile(lat, 50))
	res.Latency.P99Micros = micros(percentile(lat, 99))

	frames, err := benchConcurrent(ctx, h, o)
	if err != nil {
		return nil, err
	}
	res.Concurrent.Streams, res.Concurrent.Frames = o.streams, frames.chunks
	res.Concurrent.Seconds = frames.elapsed.Seconds()
	res.Concurrent.FramesPerSecond = float64(frames.chunks) / frames.elapsed.Seconds()
	return res, nil
}

type concurrentStats struct {
	chunks  int64
	elapsed time.Duration
}

// benchConcurrent runs o.streams count calls at once, sharing o.frames
// exactly (the first o.frames % o.streams calls send one more).
func benchConcurrent(ctx context.Context, h *host.Host, o *benchOptions) (concurrentStats, error) {
	per, rest := o.frames/int64(o.streams), int(o.frames%int64(o.streams))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // guards total and first
		total int64
		first error
	)
	start := time.Now()
	for i := range o.streams {
		wg.Add(1)
		go func() { // stopped by the end of its call; waited for below
			defer wg.Done()
			n := per
			if i < rest {
				n++
			}
			st, err := runDrained(ctx, h, "count", map[string]any{"n": n})
			mu.Lock()
			defer mu.Unlock()
			total += st.chunks
			if err != nil && first == nil {
				first = fmt.Errorf("concurrent stream %d: %w", i+1, err)
			}
		}()
	}
	wg.Wait()
	return concurrentStats{chunks: total, elapsed: time.Since(start)}, first
}

type drainStats struct {
	chunks int64
	media  int64
}

// runDrained makes one call with no input, reads all of its output and
// checks that it completed.
func runDrained(ctx context.Context, h *host.Host, tool string, args map[string]any) (drainStats, error) {
	var st drainStats
	p, err := frame.PayloadOf(args)
	if err != nil {
		return st, err
	}
	c, err := h.Call(ctx, tool, p, host.WithInput()) // no input: a plain request
	if err != nil {
		return st, err
	}
	var last frame.Frame
	for {
		f, err := c.Recv(context.Background()) // bounded by the call: cancelling ctx ends it
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, err
		}
		if f.Kind == frame.KindChunk {
			st.chunks++
			if m, ok := f.Media.(*frame.InlineMedia); ok {
				st.media += int64(len(m.Data))
				c.Recycle(f) // counted, never read: the connection may reuse the buffer
			}
		}
		last = f
	}
	if last.Kind != frame.KindCompleted {
		if last.Error != nil {
			return st, fmt.Errorf("%s: %s", last.Kind, last.Error)
		}
		return st, fmt.Errorf("call ended with %s", last.Kind)
	}
	return st, nil
}

// percentile returns the p-th percentile of sorted (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i-1, 0)]
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func printBench(w io.Writer, r *benchResult) {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "measure\tresult\tdetail")
	fmt.Fprintf(tw, "small frames\t%s frames/s\t%s chunks of count in %.2fs\n",
		formatCount(int64(r.SmallFrames.FramesPerSecond)), formatCount(r.SmallFrames.Frames), r.SmallFrames.Seconds)
	fmt.Fprintf(tw, "inline media\t%.1f MB/s\t%s in %s chunks of media in %.2fs\n",
		r.InlineMedia.MBPerSecond, formatSize(r.InlineMedia.Bytes), formatSize(r.InlineMedia.ChunkBytes), r.InlineMedia.Seconds)
	fmt.Fprintf(tw, "call latency\tp50 %s  p99 %s\t%s sequential count calls of 1 chunk\n",
		formatDuration(time.Duration(r.Latency.P50Micros*1e3)), formatDuration(time.Duration(r.Latency.P99Micros*1e3)), formatCount(int64(r.Latency.Calls)))
	fmt.Fprintf(tw, "concurrent streams\t%s frames/s\t%d count calls at once, %s chunks in %.2fs\n",
		formatCount(int64(r.Concurrent.FramesPerSecond)), r.Concurrent.Streams, formatCount(r.Concurrent.Frames), r.Concurrent.Seconds)
	_ = tw.Flush()
}
