package recorder

import (
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
		t.Errorf("%d events take %d bytes with the header, past the 2,304-byte size class", histStart, n)
	}
	if n := unsafe.Sizeof(Record{}); n > 352 {
		t.Errorf("a Record is %d bytes, past the 352-byte size class", n)
	}
}
