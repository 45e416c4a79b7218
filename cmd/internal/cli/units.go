package cli

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// formatBytes renders n bytes with a decimal unit (kB = 1,000 bytes, MB =
// 1,000,000 bytes), as rates are reported in MB/s.
func formatBytes(n int64) string {
	switch {
	case n < 1000:
		return strconv.FormatInt(n, 10) + " B"
	case n < 1000*1000:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	case n < 1000*1000*1000:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	default:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	}
}

// formatRate renders bytes per second in MB/s.
func formatRate(n int64, d time.Duration) string {
	if d <= 0 {
		return "- MB/s"
	}
	return fmt.Sprintf("%.1f MB/s", float64(n)/1e6/d.Seconds())
}

// formatCount renders n with thousands separators: 1234567 → "1,234,567".
func formatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3+1)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// formatDuration renders d for people: "850µs", "12.3ms", "1.24s".
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

// formatSize renders n bytes in MiB when it is a whole number of them
// (as sizes people ask for usually are), else as formatBytes does.
func formatSize(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return formatBytes(n)
}

// byteSize is a size on the command line: a whole number of bytes, or
// with a unit KiB, MiB, GiB (powers of 1,024) or kB, MB, GB (of 1,000).
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(v string) error {
	units := []struct {
		suffix string
		mul    int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"kB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mul := int64(1)
	for _, u := range units {
		if s, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mul = s, u.mul
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mul {
		return errors.New("want a positive size such as 512MiB")
	}
	*b = byteSize(n * mul)
	return nil
}
