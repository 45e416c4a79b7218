package compare

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// Skulk is the system whose advantage the report states: the host package
// driving the bench child (cmd/skulkchild).
const Skulk = "skulk"

// SkulkDemo is the host package driving the project's demo child,
// cmd/skulk-child, whose tools do more work of their own.
const SkulkDemo = "skulk-demo"

// Figure is one system's result for one metric.
type Figure struct {
	// System names the system.
	System string `json:"system"`
	// Median, Min and Max summarize Samples.
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// SpreadPct is (Max-Min)/Median in percent.
	SpreadPct float64 `json:"spread_pct"`
	// Samples are the rounds' values.
	Samples []float64 `json:"samples"`
	// Count is the calibrated frames, chunks or calls of one round (0 for
	// workloads that are not calibrated).
	Count int `json:"count,omitempty"`
	// SkulkAdvantage is how many times better Skulk's median is than this
	// system's: a rate divided by this rate, or this time divided by
	// Skulk's time. Above 1 Skulk is better. 0 when either is missing.
	SkulkAdvantage float64 `json:"skulk_advantage,omitempty"`
	// NA says why the system cannot run this workload.
	NA string `json:"na,omitempty"`
	// Err is the error that stopped the system's measurement.
	Err string `json:"error,omitempty"`
	// HostCPU and ChildCPU split a CPU row's figures: the medians over
	// the rounds of this process's and of the children's CPU time per
	// unit of work (Median is the median of their sums, so it need not
	// be their sum); their samples are the rounds' values. Zero on the
	// other rows.
	HostCPU         float64   `json:"host_cpu,omitempty"`
	ChildCPU        float64   `json:"child_cpu,omitempty"`
	HostCPUSamples  []float64 `json:"host_cpu_samples,omitempty"`
	ChildCPUSamples []float64 `json:"child_cpu_samples,omitempty"`
}

// Metric is one row of the report.
type Metric struct {
	// ID names the metric ("small-stream", "call-p50", ...).
	ID string `json:"id"`
	// Title describes it for people.
	Title string `json:"title"`
	// Unit is the unit of every figure of the row.
	Unit string `json:"unit"`
	// HigherBetter is true for rates, false for times.
	HigherBetter bool `json:"higher_is_better"`
	// CPUOf, on a row of CPU time per unit of work, is the ID of the row
	// whose work it measured ("small-stream" for "small-stream-cpu"); ""
	// on the other rows.
	CPUOf string `json:"cpu_of,omitempty"`
	// Figures are the systems' results, in column order.
	Figures []*Figure `json:"figures"`
}

// Target is one target of the issue, checked against the run.
type Target struct {
	// Text states the target.
	Text string `json:"text"`
	// Got is the measured ratio (or absolute Figure), Want the target's.
	// A ratio over a measured zero is infinite (a peer's idle child may
	// use no CPU in the window): JSON has no infinity, so it is written
	// as null, and Status says +Inf.
	Got  float64 `json:"got"`
	Want float64 `json:"want"`
	// Met says whether the target was met; Status says it in words,
	// with how much was missed.
	Met    bool   `json:"met"`
	Status string `json:"status"`
}

// MarshalJSON writes t with a Got that is not finite as null.
func (t Target) MarshalJSON() ([]byte, error) {
	type plain Target // without this method
	var got *float64
	if !math.IsInf(t.Got, 0) && !math.IsNaN(t.Got) {
		got = &t.Got
	}
	return json.Marshal(struct {
		plain
		Got *float64 `json:"got"`
	}{plain(t), got})
}

// setAtLeast sets t from got, a ratio whose target is t.Want or more:
// a row of Skulk's against a peer's, or of one system against another.
func (t *Target) setAtLeast(got float64) {
	t.Got, t.Met = got, got >= t.Want
	if t.Met {
		t.Status = fmt.Sprintf("met: %.3g× (target %.3g×)", got, t.Want)
	} else {
		t.Status = fmt.Sprintf("MISSED: %.3g× against %.3g×, %.2g%% short", got, t.Want, 100*(1-got/t.Want))
	}
}

// Machine describes where the run happened.
type Machine struct {
	// NumCPU is runtime.NumCPU.
	NumCPU int `json:"nproc"`
	// CPU is the first "model name" of /proc/cpuinfo.
	CPU string `json:"cpu"`
	// GoVersion is the toolchain that built the driver.
	GoVersion string `json:"go"`
	// OS is GOOS/GOARCH.
	OS string `json:"os"`
	// LoadStart and LoadEnd are /proc/loadavg's three averages at the
	// start and the end of the run: a busy machine makes noisy figures.
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end"`
	// Modules are the versions of the modules compared (the main module
	// with its git revision).
	Modules map[string]string `json:"modules"`
}

// Report is a run's result.
type Report struct {
	// Mode is "quick" or "full".
	Mode string `json:"mode"`
	// Started and Duration time the run.
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	// Machine says where it ran.
	Machine Machine `json:"machine"`
	// Metrics are the rows, in run order.
	Metrics []Metric `json:"metrics"`
	// Targets are the issues' targets this run measures (issues 6 and
	// 39), met or missed.
	Targets []Target `json:"targets"`
	// Notes say how each system was driven.
	Notes []string `json:"notes"`
}

func summarize(f *Figure) {
	if len(f.Samples) == 0 {
		return
	}
	s := slices.Clone(f.Samples)
	slices.Sort(s)
	f.Min, f.Max = s[0], s[len(s)-1]
	if len(s)%2 == 1 {
		f.Median = s[len(s)/2]
	} else {
		f.Median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	if f.Median != 0 {
		f.SpreadPct = 100 * (f.Max - f.Min) / f.Median
	}
	if len(f.HostCPUSamples) > 0 {
		f.HostCPU, f.ChildCPU = median(f.HostCPUSamples), median(f.ChildCPUSamples)
	}
}

func (r *runner) report(took time.Duration) *Report {
	rep := &Report{Mode: "full", Started: time.Now().Add(-took), Duration: took, Machine: machine(r.loadStart)}
	if r.o.Quick {
		rep.Mode = "quick"
	}
	for _, m := range r.order {
		row := Metric{ID: m.id, Title: m.title, Unit: m.unit, HigherBetter: m.higherBetter, CPUOf: r.cpuOf[m.id]}
		var sk *Figure
		for _, s := range r.systems {
			f := r.fig(m, s.name())
			summarize(f)
			row.Figures = append(row.Figures, f)
			if s.name() == Skulk {
				sk = f
			}
		}
		if sk != nil && sk.Median > 0 {
			for _, f := range row.Figures {
				if f.Median > 0 {
					if m.higherBetter {
						f.SkulkAdvantage = sk.Median / f.Median
					} else {
						f.SkulkAdvantage = f.Median / sk.Median
					}
				}
			}
		}
		rep.Metrics = append(rep.Metrics, row)
	}
	rep.Targets = targets(rep)
	rep.Notes = notes
	if r.o.Revision != "" {
		rep.Machine.Modules["github.com/skulkrt/skulk"] += " @ " + r.o.Revision
	}
	return rep
}

// notes explain how each system was driven; they go with every report.
var notes = []string{
	"Advantage columns: how many times better Skulk's median is (a rate over the other's rate, or the other's time over Skulk's time); above 1 Skulk is better.",
	"Medians over rounds, interleaved across systems; ± is (max-min)/median over the rounds.",
	"CPU rows (indented, under the workload they cost): user+system CPU time of the host (this process, getrusage RUSAGE_SELF) and of the system's live children (/proc/PID/stat utime+stime, to the 10 ms clock tick) over each measured round, per frame, MiB or call of that round; the JSON splits it into host_cpu and child_cpu. The host figure holds all of this process, so the other systems' idle sessions (health pings, keepalives) count in it too.",
	"go-plugin: hand-written grpc.ServiceDesc with a raw-bytes codec (no protoc); message-size limits raised to 16 MiB on both sides (no workload needs more than gRPC's 4 MiB default); gRPC's default window sizes; health ping is the grpc.health.v1 Check go-plugin's GRPCClient.Ping makes, on the same connection, with a deadline.",
	"mcp: go-sdk CommandTransport (stdio pipes); stream = progress notifications of a 64-character message; media = one tools/call per 1 MiB returning an embedded-resource blob (base64 in JSON); echo = 8 pipelined echo calls (MCP has no client→server stream); calls = tools/call echo of 64 characters.",
	"raw: length-prefixed 64-byte messages, one write syscall each; media = 1 MiB writes read into one reused 1 MiB buffer; echo = 64-byte messages written one write each while the echoes are read; calls = one 64-byte ping-pong; crash = SIGKILL to read EOF.",
	"skulk: the host package driving cmd/skulkchild (bench child on the child package: count builds a 64-byte payload by appending into one reused buffer (Send has encoded it when it returns; gRPC may keep a sent message, so gpchild makes a new one each time), media sends one zero buffer, no output schemas); skulk-demo: the same host driving the project's cmd/skulk-child, whose demo tools (child/demotools) do more work per chunk of media (hashed with SHA-256) and declare output schemas the host checks on every frame. stream = count, media = media (inline attachments, each handed back with Call.Recycle once counted, so the host reuses attachment buffers as the raw baseline reuses its buffer), echo = echo fed and drained at once, calls = echo of one 64-byte chunk sent with the invoke (host.WithInput: invoke, started, chunk and completed in one write) and sent back as a chunk before the completed: a chunk each way on top of the frames every call has, where the other systems' calls carry one value each way; unary calls = the reply tool: the 64-byte payload as the invoke's arguments, back as the completed frame's value (the other systems' unary row repeats their calls; skulk-demo has no such tool), crash = SIGKILL during an echo call until Recv gives the synthetic failed.",
	"skulk health: 8 count streams left unread until the child's writes block, then pings on the control connection timed at the wire level by the bench's own minimal host (bench/internal/compare/skulkwire.go), because the host package pings on its own schedule and exposes no on-demand ping.",
	"skulk-nats and go-plugin-tcp cross TCP loopback, as a call to another machine would: skulk-nats is the skulk session's host served by remote.Serve on an embedded nats-server (127.0.0.1, default max_payload, one server) and called through remote.Client on a second connection (calls = the same echo call, media = the same media tool, 1 MiB frames cut into 256 KiB messages with a 1 MiB credit window); go-plugin-tcp is gpchild's gRPC service on a plain gRPC server listening on 127.0.0.1 (GPCHILD_TCP), dialled with grpc.NewClient: go-plugin's stack without its Unix socket. Both take part in calls and media only; the skulk vs columns compare the local skulk against them.",
	"Ratio targets compare against the skulk column (the bench child); skulk-demo is shown so the cost of the demo tools and of per-frame schema checks stays visible.",
}

func figOf(rep *Report, id, sys string) *Figure {
	for _, m := range rep.Metrics {
		if m.ID == id {
			for _, f := range m.Figures {
				if f.System == sys {
					return f
				}
			}
		}
	}
	return nil
}

// targets checks the targets against rep.
func targets(rep *Report) []Target {
	var out []Target
	ratio := func(id, vs string, want float64, text string) {
		t := Target{Text: text, Want: want}
		f := figOf(rep, id, vs)
		switch {
		case f == nil:
			return
		case f.SkulkAdvantage == 0:
			t.Status = "not measured"
		default:
			t.setAtLeast(f.SkulkAdvantage)
		}
		out = append(out, t)
	}
	// absolute checks Skulk's median of row id against want: judge sets
	// t.Met and t.Status from the figure, once it was measured.
	absolute := func(id string, want float64, text string, judge func(t *Target, f *Figure)) {
		t := Target{Text: text, Want: want}
		f := figOf(rep, id, Skulk)
		switch {
		case f == nil:
			return
		case len(f.Samples) == 0:
			t.Status = "not measured"
		default:
			t.Got = f.Median
			judge(&t, f)
		}
		out = append(out, t)
	}
	// under: below want in every round.
	under := func(id string, want float64, unit, text string) {
		absolute(id, want, text, func(t *Target, f *Figure) {
			t.Met = f.Median < want && f.Max < want
			switch {
			case t.Met:
				t.Status = fmt.Sprintf("met: median %.3g %s, worst round %.3g %s (target < %g %s)", f.Median, unit, f.Max, unit, want, unit)
			case f.Median < want:
				t.Status = fmt.Sprintf("MISSED in some rounds: median %.3g %s, worst round %.3g %s (target < %g %s)", f.Median, unit, f.Max, unit, want, unit)
			default:
				t.Status = fmt.Sprintf("MISSED: median %.3g %s, %.2f× the %g %s target", f.Median, unit, f.Median/want, want, unit)
			}
		})
	}
	// within: Skulk's median of row id is at most want times its median
	// of row base, in the same run.
	within := func(id, base string, want float64, text string) {
		t := Target{Text: text, Want: want}
		f, b := figOf(rep, id, Skulk), figOf(rep, base, Skulk)
		switch {
		case f == nil || b == nil:
			return
		case f.Median <= 0 || b.Median <= 0:
			t.Status = "not measured"
		default:
			t.Got = f.Median / b.Median
			t.Met = t.Got <= want
			if t.Met {
				t.Status = fmt.Sprintf("met: %.3g× (target ≤ %.3g×)", t.Got, want)
			} else {
				t.Status = fmt.Sprintf("MISSED: %.3g× against ≤ %.3g×", t.Got, want)
			}
		}
		out = append(out, t)
	}
	// between checks system a's median over system b's against want
	// (at least want): a row of one system against another of the same
	// run, as skulk-demo's rate against skulk's.
	between := func(id, a, b string, want float64, text string) {
		t := Target{Text: text, Want: want}
		fa, fb := figOf(rep, id, a), figOf(rep, id, b)
		switch {
		case fa == nil || fb == nil:
			return
		case fa.Median <= 0 || fb.Median <= 0:
			t.Status = "not measured"
		default:
			t.setAtLeast(fa.Median / fb.Median)
		}
		out = append(out, t)
	}
	// atMost checks skulk's median of row id against want: at most want.
	atMost := func(id string, want float64, unit, text string) {
		absolute(id, want, text, func(t *Target, f *Figure) {
			t.Met = f.Median <= want
			if t.Met {
				t.Status = fmt.Sprintf("met: median %.3g %s (target ≤ %g %s)", f.Median, unit, want, unit)
			} else {
				t.Status = fmt.Sprintf("MISSED: median %.3g %s, %.2f× the %g %s target", f.Median, unit, f.Median/want, want, unit)
			}
		})
	}
	ratio(mSmall.id, "go-plugin", 2, "small-frame stream ≥ 2× go-plugin's gRPC stream rate")
	ratio(mSmall.id, "raw", 1, "small-frame stream ≥ the raw one-write-per-message rate")
	ratio(mMedia.id, "raw", 0.8, "1 MiB media ≥ 80% of raw socket bandwidth")
	ratio(mMedia.id, "go-plugin", 5, "1 MiB media ≥ 5× go-plugin")
	ratio(mMedia.id, "mcp", 10, "1 MiB media ≥ 10× MCP")
	ratio(mCall50.id, "raw", 0.5, "sequential call p50 within 2× the raw ping-pong round trip")
	ratio(mCall50.id, "go-plugin", 3, "sequential call p50 ≥ 3× faster than go-plugin's unary call")
	ratio(mUnary50.id, "raw", 0.5, "sequential unary call p50 within 2× the raw ping-pong round trip")
	ratio(mUnary50.id, "go-plugin", 3, "sequential unary call p50 ≥ 3× faster than go-plugin's unary call")
	ratio(mStart.id, "go-plugin", 3, "start to first call ≥ 3× faster than go-plugin")
	// A nested call's cost where its caller sees it, against the host's
	// own call of the same shape (issue 36's targets); and the host's
	// call that holds it, a host-made call plus the nested one, held to
	// the same targets plus one unary call (derived here, so that a cost
	// the nesting puts on the parent call shows too).
	within(mNestHostOwn50.id, mUnary50.id, 2, "nested call to a host-side function p50 (as its caller times it) within 2× the host's own unary call p50")
	within(mNestChildOwn50.id, mUnary50.id, 3, "nested call to another child's tool p50 (as its caller times it) within 3× the host's own unary call p50")
	within(mNestHost50.id, mUnary50.id, 3, "call holding a nested call to a host-side function p50 within 3× the host's own unary call p50")
	within(mNestChild50.id, mUnary50.id, 4, "call holding a nested call to another child's tool p50 within 4× the host's own unary call p50")
	under(mCrash.id, 20, "ms", "crash detection under 20 ms")
	under(mHealth.id, 5, "ms", "health-ping p99 under 5 ms while every stream is backpressured")
	// Issue 39's rows that this run measures; the others are the sweeps'
	// (sweepTargets).
	ratio(mSmall.id, "go-plugin", 3, "small-frame stream ≥ 3× go-plugin's gRPC stream rate")
	atMost(cSmall.id, 300, "ns", "small-frame stream CPU ≤ 300 ns per frame, host + child")
	between(mSmall.id, SkulkDemo, Skulk, 0.8, "small-frame stream with output schemas (skulk-demo) ≥ 0.8× the schema-less rate")
	ratio(mCrash.id, "go-plugin", 1, "crash detection at most go-plugin's")
	ratio(mStart.id, "raw", 1, "start to first call at most raw's (exec, one connection, one ping-pong)")
	return out
}

// WriteTable prints rep for people.
func WriteTable(w io.Writer, rep *Report) error {
	var systems []string
	for _, m := range rep.Metrics {
		for _, f := range m.Figures {
			if !slices.Contains(systems, f.System) {
				systems = append(systems, f.System)
			}
		}
	}
	fmt.Fprintf(w, "Skulk side-by-side benchmarks (%s run, %s, %d CPU: %s, %s)\n\n",
		rep.Mode, rep.Duration.Round(time.Second), rep.Machine.NumCPU, rep.Machine.CPU, rep.Machine.GoVersion)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	hdr := []string{"workload", "unit"}
	hdr = append(hdr, systems...)
	for _, s := range systems {
		if s != Skulk {
			hdr = append(hdr, "skulk vs "+s)
		}
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t"))
	var problems []string
	for _, m := range rep.Metrics {
		title := m.Title
		if m.CPUOf != "" {
			title = "  " + title // under the row whose work it costs
		}
		cells := []string{title, m.Unit}
		var adv []string
		for _, s := range systems {
			f := findFig(m, s)
			// A CPU row's failures are its workload's, listed once under it.
			listed := m.CPUOf != "" && f != nil && (f.NA != "" || f.Err != "")
			if listed {
				if of := figOf(rep, m.CPUOf, s); of == nil || (of.NA == "" && of.Err == "") {
					listed = false
				}
			}
			switch {
			case f == nil:
				cells = append(cells, "-")
			case listed && f.NA != "":
				cells = append(cells, "n/a")
			case listed && len(f.Samples) == 0:
				cells = append(cells, "error")
			case f.NA != "":
				cells = append(cells, "n/a")
				problems = append(problems, fmt.Sprintf("%s, %s: %s", m.ID, s, f.NA))
			case f.Err != "" && len(f.Samples) == 0:
				cells = append(cells, "error")
				problems = append(problems, fmt.Sprintf("%s, %s: %s", m.ID, s, f.Err))
			default:
				cells = append(cells, fmt.Sprintf("%s ±%.0f%%", num(f.Median), f.SpreadPct))
				if f.Err != "" {
					problems = append(problems, fmt.Sprintf("%s, %s (some rounds): %s", m.ID, s, f.Err))
				}
			}
			if s != Skulk {
				if f != nil && f.SkulkAdvantage > 0 {
					adv = append(adv, fmt.Sprintf("%.2f×", f.SkulkAdvantage))
				} else {
					adv = append(adv, "-")
				}
			}
		}
		fmt.Fprintln(tw, strings.Join(append(cells, adv...), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nTargets:")
	width := 0
	for _, t := range rep.Targets {
		width = max(width, utf8.RuneCountInString(t.Text))
	}
	for _, t := range rep.Targets {
		fmt.Fprintf(w, "  %s%s  %s\n", t.Text, strings.Repeat(" ", width-utf8.RuneCountInString(t.Text)), t.Status)
	}
	if len(problems) > 0 {
		fmt.Fprintln(w, "\nNot measured:")
		for _, p := range problems {
			fmt.Fprintln(w, "  "+p)
		}
	}
	fmt.Fprintln(w, "\nNotes:")
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "  - "+n)
	}
	fmt.Fprintf(w, "\nMachine: load average %s at start, %s at end; modules:", rep.Machine.LoadStart, rep.Machine.LoadEnd)
	keys := make([]string, 0, len(rep.Machine.Modules))
	for k := range rep.Machine.Modules {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, " %s %s;", k, rep.Machine.Modules[k])
	}
	_, err := fmt.Fprintln(w)
	return err
}

func findFig(m Metric, sys string) *Figure {
	for _, f := range m.Figures {
		if f.System == sys {
			return f
		}
	}
	return nil
}

// num formats a Figure with 3 significant digits and a k/M suffix.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e7:
		return fmt.Sprintf("%.3gM", v/1e6)
	case a >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func machine(loadStart string) Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		LoadStart: loadStart, LoadEnd: loadavg(), Modules: map[string]string{}}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/hashicorp/go-plugin", "google.golang.org/grpc", "github.com/modelcontextprotocol/go-sdk", "github.com/skulkrt/skulk":
				v := d.Version
				if d.Replace != nil {
					v = d.Replace.Path + " " + d.Replace.Version
				}
				m.Modules[d.Path] = strings.TrimSpace(v)
			}
		}
	}
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
