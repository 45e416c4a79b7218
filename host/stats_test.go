package host

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A round trip goes in the bucket whose lower bound it reaches and whose
// upper bound it does not; Stats gives the buckets with +Inf last.
func TestPingHistBuckets(t *testing.T) {
	var p pingHist
	for _, d := range []time.Duration{0, 99 * time.Microsecond, 100 * time.Microsecond, 3 * time.Millisecond, 5 * time.Second, time.Minute} {
		p.add(d)
	}
	want := map[int]uint64{0: 2, 1: 1, 5: 1, len(pingBounds) - 1: 2} // [0,100µs), [100µs,250µs), [2.5ms,5ms), [5s,+Inf)
	for i, n := range p.counts {
		if n != want[i] {
			assert.Fail(t, fmt.Sprintf("bucket %d [%v, ...) counts %d, want %d", i, pingBounds[i], n, want[i]))
		}
	}
	assert.Falsef(t, p.sum != 5*time.Second+time.Minute+3*time.Millisecond+199*time.Microsecond, "sum = %v", p.sum)
	h := &Host{}
	h.pings = p
	st := h.pingStats()
	assert.Falsef(t, len(st.Buckets) != len(st.Counts)+1 || !math.IsInf(st.Buckets[len(st.Buckets)-1], 1) || st.Buckets[0] != 0, "PingRTT buckets %v for %d counts", st.Buckets, len(st.Counts))
}
