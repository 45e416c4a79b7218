package compare

import (
	"fmt"
	"math"
)

// at names one value of a sweeps record: a curve's value for a system at
// a point.
type at struct {
	sweep, curve, system string
	x                    float64
}

// negativeReading is why a ratio with a negative value in it is not
// judged: a cost read as the difference of two readings (the host's
// memory with a session's streams open, less its memory with the session
// idle, in a process every system's session shares) that came out below
// zero measured the process's other work, not the system.
const negativeReading = "a negative reading (the difference of two readings of a shared process)"

func (rep *SweepReport) value(a at) (Value, bool) {
	for _, sw := range rep.Sweeps {
		if sw.ID != a.sweep {
			continue
		}
		for _, cv := range sw.Curves {
			if cv.ID != a.curve {
				continue
			}
			for _, se := range cv.Series {
				if se.System != a.system {
					continue
				}
				for _, v := range se.Values {
					if v.X == a.x {
						return v, true
					}
				}
			}
		}
	}
	return Value{}, false
}

// lastPoint is the last point of a sweep; 0 when the record has none.
func (rep *SweepReport) lastPoint(sweep string) float64 {
	for _, sw := range rep.Sweeps {
		if sw.ID == sweep && len(sw.Points) > 0 {
			return sw.Points[len(sw.Points)-1]
		}
	}
	return 0
}

// sweepTargets checks the targets of issues 28 and 39 that the sweeps
// measure, each a ratio of two values of the same run, against rep. A
// target whose values the run did not make (a sweep left out, a point not
// in the plan) is left out; one whose values failed is reported as not
// measured, with the reason.
func sweepTargets(rep *SweepReport) []Target {
	var out []Target
	// ratio checks num/den against want: at least want, or at most want
	// when atMost.
	ratio := func(text string, num, den at, want float64, atMost bool) {
		n, ok1 := rep.value(num)
		d, ok2 := rep.value(den)
		if !ok1 || !ok2 {
			return
		}
		t := Target{Text: text, Want: want}
		switch {
		case !n.Measured() || !d.Measured():
			t.Status = "not measured: " + firstNonEmpty(n.Err, n.NA, d.Err, d.NA, "no value")
		case n.Y < 0 || d.Y < 0:
			t.Status = "not measured: " + negativeReading
		default:
			t.Got = quotient(n.Y, d.Y)
			if atMost {
				t.Met = t.Got <= want
			} else {
				t.Met = t.Got >= want
			}
			switch {
			case t.Met:
				t.Status = fmt.Sprintf("met: %.3g (target %s %.3g)", t.Got, map[bool]string{true: "≤", false: "≥"}[atMost], want)
			case atMost:
				t.Status = fmt.Sprintf("MISSED: %.3g against ≤ %.3g, %.3g× over", t.Got, want, t.Got/want)
			default:
				t.Status = fmt.Sprintf("MISSED: %.3g against ≥ %.3g, %.2g%% short", t.Got, want, 100*(1-t.Got/want))
			}
		}
		out = append(out, t)
	}
	// everyPoint checks num/den at every point of sweep from the point
	// from on (the curve's values of two systems) and reports the worst
	// ratio, with its point: at least want, or at most want when atMost.
	// Points where either value is missing are skipped; a failed value
	// or a negative reading makes the target not measured, unless a point
	// before it missed already.
	everyPoint := func(text, sweep, curve, num, den string, from, want float64, atMost bool) {
		var pts []float64
		for _, sw := range rep.Sweeps {
			if sw.ID == sweep {
				pts = sw.Points
			}
		}
		t := Target{Text: text, Want: want}
		seen, worstX := false, 0.0
		for _, x := range pts {
			if x < from {
				continue
			}
			n, ok1 := rep.value(at{sweep, curve, num, x})
			d, ok2 := rep.value(at{sweep, curve, den, x})
			if !ok1 || !ok2 {
				continue
			}
			if !n.Measured() || !d.Measured() {
				t.Status = fmt.Sprintf("not measured at %g: %s", x, firstNonEmpty(n.Err, n.NA, d.Err, d.NA, "no value"))
				break
			}
			if n.Y < 0 || d.Y < 0 {
				t.Status = fmt.Sprintf("not measured at %g: %s", x, negativeReading)
				break
			}
			r := quotient(n.Y, d.Y)
			if !seen || atMost && r > t.Got || !atMost && r < t.Got {
				t.Got, worstX = r, x
			}
			seen = true
		}
		sym := map[bool]string{true: "≤", false: "≥"}[atMost]
		switch {
		case t.Status != "" && seen && (atMost && t.Got > want || !atMost && t.Got < want):
			// A point missed before one that could not be measured: the
			// target is missed whatever that point would say.
			t.Status = fmt.Sprintf("MISSED: worst %.3g at %g against %s %.3g; then %s", t.Got, worstX, sym, want, t.Status)
		case t.Status != "":
			t.Got = 0
		case !seen:
			return
		case atMost && t.Got <= want, !atMost && t.Got >= want:
			t.Met = true
			t.Status = fmt.Sprintf("met: worst %.3g at %g (target %s %.3g)", t.Got, worstX, sym, want)
		case atMost:
			t.Status = fmt.Sprintf("MISSED: worst %.3g at %g against ≤ %.3g, %.3g× over", t.Got, worstX, want, t.Got/want)
		default:
			t.Status = fmt.Sprintf("MISSED: worst %.3g at %g against ≥ %.3g, %.2g%% short", t.Got, worstX, want, 100*(1-t.Got/want))
		}
		out = append(out, t)
	}
	const mib = 1 << 20
	ratio("sequential small call p50 within 1.5× the raw ping-pong round trip",
		at{"calls", mCall50.id, Skulk, payloadSize}, at{"calls", mCall50.id, "raw", payloadSize}, 1.5, true)
	ratio("sequential unary call p50 within 1.5× the raw ping-pong round trip",
		at{"calls", mUnary50.id, Skulk, payloadSize}, at{"calls", mUnary50.id, "raw", payloadSize}, 1.5, true)
	ratio("1 MiB media ≥ 90% of raw socket bandwidth",
		at{"frame-size", "throughput", Skulk, mib}, at{"frame-size", "throughput", "raw", mib}, 0.9, false)
	ratio("1 MiB media CPU per MiB within 1.2× raw's",
		at{"frame-size", "cpu-per-mib", Skulk, mib}, at{"frame-size", "cpu-per-mib", "raw", mib}, 1.2, true)
	ratio("small-frame stream ≥ 3× go-plugin's gRPC stream (one stream of 64-byte frames)",
		at{"concurrency", "frames", Skulk, 1}, at{"concurrency", "frames", "go-plugin", 1}, 3, false)
	ratio("4,096 concurrent streams: aggregate frames/s ≥ 90% of the 64-stream figure",
		at{"concurrency", "frames", Skulk, 4096}, at{"concurrency", "frames", Skulk, 64}, 0.9, false)
	ratio("4,096 concurrent streams: host memory per open stream ≤ half of go-plugin's per gRPC stream",
		at{"concurrency", "host-mem-per-stream", Skulk, 4096}, at{"concurrency", "host-mem-per-stream", "go-plugin", 4096}, 0.5, true)
	// Issue 39's rows that the sweeps measure; the others are the compare
	// run's (targets).
	everyPoint("host memory per open stream at most go-plugin's, at every point from 64 streams",
		"concurrency", "host-mem-per-stream", Skulk, "go-plugin", 64, 1, true)
	ratio("4,096 concurrent streams: a small call's p50 alongside at most go-plugin's",
		at{"concurrency", "probe-p50", Skulk, 4096}, at{"concurrency", "probe-p50", "go-plugin", 4096}, 1, true)
	ratio("small attachments, 64 B chunks: throughput at least go-plugin's",
		at{"frame-size", "throughput", Skulk, 64}, at{"frame-size", "throughput", "go-plugin", 64}, 1, false)
	ratio("small attachments, 1 KiB chunks: throughput at least go-plugin's",
		at{"frame-size", "throughput", Skulk, 1 << 10}, at{"frame-size", "throughput", "go-plugin", 1 << 10}, 1, false)
	for _, peer := range []string{"go-plugin", "mcp"} {
		everyPoint("idle CPU per child at most "+peer+"'s, at every pool size",
			"pool", "idle-cpu", Skulk, peer, 0, 1, true)
	}
	if last := rep.lastPoint("long-call"); last > 0 {
		first := 0.0
		for _, sw := range rep.Sweeps {
			if sw.ID == "long-call" {
				first = sw.Points[0]
			}
		}
		for _, sys := range []string{Skulk, "go-plugin", "mcp"} {
			ratio(sys+": long call, rate at the end ≥ 90% of the rate at the first checkpoint (no slowdown)",
				at{"long-call", "frames", sys, last}, at{"long-call", "frames", sys, first}, 0.9, false)
			ratio(sys+": long call, host heap at the end ≤ 1.5× the first checkpoint's (flat memory)",
				at{"long-call", "host-heap", sys, last}, at{"long-call", "host-heap", sys, first}, 1.5, true)
			ratio(sys+": long call, child RSS at the end ≤ 1.5× the first checkpoint's (flat memory)",
				at{"long-call", "child-rss", sys, last}, at{"long-call", "child-rss", sys, first}, 1.5, true)
		}
	}
	return out
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// quotient is n/d for a target's ratio, where a measured zero is a value
// like any other (a peer's idle child, read to the nanosecond, may use no
// CPU in the window): 0/0 is 1, and n/0 for any other n is +Inf.
func quotient(n, d float64) float64 {
	if d == 0 {
		if n == 0 {
			return 1
		}
		return math.Inf(1)
	}
	return n / d
}
