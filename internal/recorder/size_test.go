package recorder

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/skulkrt/skulk/calllog"
)

// A call's first histStart history entries are one allocation of the
// 1,024-byte size class, a compact entry is 120 bytes against a whole
// event's 280 and its Content's 64 (histEntry's comment), and a Record
// fills the 352-byte class: a field that grows any of them costs every
// call memory, tracing or not.
func TestEventAndRecordSizes(t *testing.T) {
	if n := unsafe.Sizeof(histEntry{}) * histStart; n > 1024 {
		assert.Fail(t, fmt.Sprintf("%d history entries take %d bytes, past the 1,024-byte size class", histStart, n))
	}
	if n := unsafe.Sizeof(histEntry{}); n > 120 {
		assert.Fail(t, fmt.Sprintf("a history entry is %d bytes, past the 120 histEntry's comment gives", n))
	}
	if n := unsafe.Sizeof(calllog.Event{}) + unsafe.Sizeof(calllog.Content{}); n < 2*unsafe.Sizeof(histEntry{}) {
		assert.Fail(t, fmt.Sprintf("a whole event with its Content is %d bytes, under two compact entries: compacting no longer pays", n))
	}
	if n := unsafe.Sizeof(Record{}); n > 352 {
		assert.Fail(t, fmt.Sprintf("a Record is %d bytes, past the 352-byte size class", n))
	}
}

// sink keeps the histories of TestHistoryStartsWithRoom on the heap, as a
// Record's are.
var sink []histEntry

// What histStart saves a small call, measured: its histStart entries go
// into the history made with room for them with no allocation past the
// make, and into an empty one with four, about 2 KiB in all (1, 2, 4 and
// 8 entries), which is the figure histStart's comment gives.
func TestHistoryStartsWithRoom(t *testing.T) {
	var e histEntry
	fill := func(h []histEntry) []histEntry {
		for range histStart {
			h = append(h, e)
		}
		return h
	}
	if n := testing.AllocsPerRun(100, func() { sink = fill(make([]histEntry, 0, histStart)) }); n != 1 {
		assert.Fail(t, fmt.Sprintf("a history made with room for %d entries took %v allocations for them; want 1 (the make)", histStart, n))
	}
	if n := testing.AllocsPerRun(100, func() { sink = fill(nil) }); n != 4 {
		assert.Fail(t, fmt.Sprintf("an empty history took %v allocations for %d entries; want the 4 histStart's comment gives", n, histStart))
	}
	var bytes uintptr
	var h []histEntry
	for range histStart {
		before := cap(h)
		h = append(h, e)
		if cap(h) != before {
			bytes += uintptr(cap(h)) * unsafe.Sizeof(e)
		}
	}
	assert.Falsef(t, bytes < 1536 || bytes > 2304, "an empty history grew by %d bytes for %d entries; histStart's comment says about 2 KiB", bytes, histStart)
}
