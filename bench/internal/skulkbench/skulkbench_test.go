package skulkbench

import (
	"fmt"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"

	"github.com/skulkrt/skulk/frame/mpack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCountPayload(t *testing.T) {
	for _, size := range []int{0, 10, 50, 300} {
		p := countPayload(nil, 1<<31, string(make([]byte, size)))
		require.NoErrorf(t, mpack.CheckObject(p), "size %d", size)
		var v struct {
			I   uint32 `json:"i"`
			Pad string `json:"pad"`
		}
		if err := p.Decode(&v); err != nil || v.I != 1<<31 || len(v.Pad) != size {
			assert.Fail(t, fmt.Sprintf("size %d: decoded %+v, %v", size, v, err))
		}
	}
	if n := len(countPayload(nil, 7, string(make([]byte, 50)))); n != 64 {
		assert.Fail(t, fmt.Sprintf("count chunk with 50 bytes of padding is %d bytes, want 64", n))
	}
}

// TestNestReply: nest's value is a MessagePack object that ParseNestReply
// reads back, with or without a value, and anything else is refused.
func TestNestReply(t *testing.T) {
	v := frame.MustPayload(map[string]any{"text": "hi"})
	for _, in := range []frame.Payload{v, nil} {
		p := NestReply(1234567*time.Nanosecond, in)
		require.NoError(t, mpack.CheckObject(p))
		took, out, err := ParseNestReply(p)
		require.NoError(t, err)
		assert.Equal(t, 1234567*time.Nanosecond, took)
		assert.Equal(t, in, out)
	}
	good := NestReply(time.Second, v)
	for _, bad := range []frame.Payload{
		{0xa1, 'x'},
		frame.MustPayload(map[string]any{"value": map[string]any{"text": "hi"}}), // no ns
		good[:len(good)-len(v)], // no value
		append(append(frame.Payload{}, good[:1]...), append([]byte{0xa2, 'n', 'x'}, good[4:]...)...), // another key
	} {
		_, _, err := ParseNestReply(bad)
		assert.ErrorIsf(t, err, errNestReply, "% x", []byte(bad))
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { ParseNestReply(good) }), "allocations per parse")
}
