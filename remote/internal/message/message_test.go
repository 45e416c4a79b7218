package message_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/remote/internal/message"
)

func validMessages() []message.Message {
	return []message.Message{
		{Kind: message.KindOpen, Seq: 0, Arg: 1 << 20, Body: []byte("invoke bytes")},
		{Kind: message.KindOpen, Seq: 0, Arg: 1},
		{Kind: message.KindAccept, Seq: 0, Arg: 1 << 20, Body: []byte("skulk.tools.h.h1.TOKEN")},
		{Kind: message.KindData, Seq: 7, Body: bytes.Repeat([]byte{0xff}, message.MaxFragment)},
		{Kind: message.KindCredit, Seq: 1 << 63, Arg: 1<<64 - 1},
		{Kind: message.KindPing, Seq: 3},
		{Kind: message.KindCancel, Seq: 4},
		{Kind: message.KindFin, Seq: 5, Arg: message.FinSynthetic},
		{Kind: message.KindFin, Seq: 5},
		{Kind: message.KindAbort, Seq: 9, Arg: 6, Body: []byte("a reason")},
		{Kind: message.KindTree, Seq: 1, Body: []byte("9f2c1a0b-17")},
		{Kind: message.KindTree, Seq: 1, Body: []byte(strings.Repeat("é", 128))},
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range validMessages() {
		b := message.Append(nil, m)
		require.Len(t, b, message.HeaderLen+len(m.Body))
		got, err := message.Parse(b)
		require.NoError(t, err, m.Kind.String())
		assert.Equal(t, m.Kind, got.Kind)
		assert.Equal(t, m.Seq, got.Seq)
		assert.Equal(t, m.Arg, got.Arg)
		assert.True(t, bytes.Equal(m.Body, got.Body))
	}
}

func TestMessageGolden(t *testing.T) {
	b := message.Append(nil, message.Message{Kind: message.KindCredit, Seq: 2, Arg: 0x200000})
	assert.Equal(t, []byte{1, 4, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0x20, 0, 0}, b)
	assert.Equal(t, "credit", message.KindCredit.String())
	assert.Equal(t, "kind(200)", message.Kind(200).String())
	b = message.Append(nil, message.Message{Kind: message.KindTree, Seq: 1, Body: []byte("a7-1")})
	assert.Equal(t, []byte{1, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 'a', '7', '-', '1'}, b)
	assert.Equal(t, "tree", message.KindTree.String())
}

func TestMessageRefusals(t *testing.T) {
	enc := func(k message.Kind, seq, arg uint64, body []byte) []byte {
		return message.Append(nil, message.Message{Kind: k, Seq: seq, Arg: arg, Body: body})
	}
	cases := map[string]struct {
		b     []byte
		field string
	}{
		"short":            {[]byte{1, 3, 0}, "length"},
		"over the limit":   {enc(message.KindData, 1, 0, make([]byte, message.MaxFragment+1)), "length"},
		"version":          {append([]byte{2}, enc(message.KindPing, 1, 0, nil)[1:]...), "version"},
		"kind 0":           {enc(0, 1, 0, nil), "kind"},
		"unknown kind":     {enc(99, 1, 0, nil), "kind"},
		"open data":        {enc(message.KindOpen, 0, 1, make([]byte, message.MaxOpenData+1)), "body"},
		"open seq":         {enc(message.KindOpen, 1, 1, nil), "sequence"},
		"open window":      {enc(message.KindOpen, 0, 0, nil), "arg"},
		"accept empty":     {enc(message.KindAccept, 0, 1, nil), "body"},
		"accept wildcard":  {enc(message.KindAccept, 0, 1, []byte("skulk.>")), "body"},
		"accept space":     {enc(message.KindAccept, 0, 1, []byte("a b")), "body"},
		"accept dots":      {enc(message.KindAccept, 0, 1, []byte("a..b")), "body"},
		"accept long":      {enc(message.KindAccept, 0, 1, []byte(strings.Repeat("a", message.MaxSubject+1))), "body"},
		"accept seq":       {enc(message.KindAccept, 1, 1, []byte("a")), "sequence"},
		"accept window":    {enc(message.KindAccept, 0, 0, []byte("a")), "arg"},
		"data empty":       {enc(message.KindData, 1, 0, nil), "body"},
		"data arg":         {enc(message.KindData, 1, 1, []byte("x")), "arg"},
		"credit body":      {enc(message.KindCredit, 1, 1, []byte("x")), "body"},
		"ping arg":         {enc(message.KindPing, 1, 1, nil), "body"},
		"cancel body":      {enc(message.KindCancel, 1, 0, []byte("x")), "body"},
		"fin flags":        {enc(message.KindFin, 1, 2, nil), "arg"},
		"fin body":         {enc(message.KindFin, 1, 0, []byte("x")), "body"},
		"abort code 0":     {enc(message.KindAbort, 1, 0, nil), "arg"},
		"abort code large": {enc(message.KindAbort, 1, 256, nil), "arg"},
		"abort long":       {enc(message.KindAbort, 1, 1, make([]byte, message.MaxReason+1)), "body"},
		"abort not utf8":   {enc(message.KindAbort, 1, 1, []byte{0xff}), "body"},
		"tree empty":       {enc(message.KindTree, 1, 0, nil), "body"},
		"tree long":        {enc(message.KindTree, 1, 0, make([]byte, 513)), "body"},
		"tree not utf8":    {enc(message.KindTree, 1, 0, []byte{0xff}), "body"},
		"tree arg":         {enc(message.KindTree, 1, 1, []byte("a")), "arg"},
	}
	for name, c := range cases {
		_, err := message.Parse(c.b)
		require.ErrorIs(t, err, message.ErrMalformed, name)
		var me *message.Error
		require.ErrorAs(t, err, &me, name)
		assert.Equal(t, c.field, me.Field, name)
		assert.NotContains(t, err.Error(), "garbage", name)
	}
}

// FuzzParseMessage parses any bytes without panicking, and re-encodes
// what it accepts to the same bytes.
func FuzzParseMessage(f *testing.F) {
	for _, m := range validMessages() {
		b := message.Append(nil, m)
		if len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Add([]byte{1, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := message.Parse(b)
		if err != nil {
			return
		}
		if got := message.Append(nil, m); !bytes.Equal(got, b) {
			require.FailNow(t, fmt.Sprintf("re-encoded %x, parsed from %x", got, b))
		}
	})
}
