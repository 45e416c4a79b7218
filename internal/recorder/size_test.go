package recorder

import (
	"fmt"
	"github.com/stretchr/testify/assert"
	"testing"
	"unsafe"

	"github.com/skulkrt/skulk/calllog"
)

// A call's first histStart events are one allocation of the 2,304-byte
// size class (with the allocator's 8-byte header), and a Record fills the
// 352-byte class: a field that grows either costs every call memory,
// tracing or not.
func TestEventAndRecordSizes(t *testing.T) {
	if n := unsafe.Sizeof(calllog.Event{})*histStart + 8; n > 2304 {
		assert.Fail(t, fmt.Sprintf("%d events take %d bytes with the header, past the 2,304-byte size class", histStart, n))
	}
	if n := unsafe.Sizeof(Record{}); n > 352 {
		assert.Fail(t, fmt.Sprintf("a Record is %d bytes, past the 352-byte size class", n))
	}
}

// sink keeps the histories of TestHistoryStartsWithRoom on the heap, as a
// Record's are.
var sink []calllog.Event

// What histStart saves a small call, measured: its histStart events go into
// the history made with room for them with no allocation past the make,
// and into an empty one with four, about 4 KiB in all (1, 2, 4 and 8
// events), which is the figure histStart's comment gives.
func TestHistoryStartsWithRoom(t *testing.T) {
	var ev calllog.Event
	fill := func(h []calllog.Event) []calllog.Event {
		for range histStart {
			h = append(h, ev)
		}
		return h
	}
	if n := testing.AllocsPerRun(100, func() { sink = fill(make([]calllog.Event, 0, histStart)) }); n != 1 {
		assert.Fail(t, fmt.Sprintf("a history made with room for %d events took %v allocations for them; want 1 (the make)", histStart, n))
	}
	if n := testing.AllocsPerRun(100, func() { sink = fill(nil) }); n != 4 {
		assert.Fail(t, fmt.Sprintf("an empty history took %v allocations for %d events; want the 4 histStart's comment gives", n, histStart))
	}
	var bytes uintptr
	var h []calllog.Event
	for range histStart {
		before := cap(h)
		h = append(h, ev)
		if cap(h) != before {
			bytes += uintptr(cap(h)) * unsafe.Sizeof(ev)
		}
	}
	assert.Falsef(t, bytes < 3584 || bytes > 4608, "an empty history grew by %d bytes for %d events; histStart's comment says about 4 KiB", bytes, histStart)
}
