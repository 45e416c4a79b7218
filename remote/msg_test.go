package remote_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/remote"
)

func validMessages() []remote.Message {
	return []remote.Message{
		{Kind: remote.KindOpen, Seq: 0, Arg: 1 << 20, Body: []byte("invoke bytes")},
		{Kind: remote.KindOpen, Seq: 0, Arg: 1},
		{Kind: remote.KindAccept, Seq: 0, Arg: 1 << 20, Body: []byte("skulk.tools.h.h1.TOKEN")},
		{Kind: remote.KindData, Seq: 7, Body: bytes.Repeat([]byte{0xff}, remote.MaxFragment)},
		{Kind: remote.KindCredit, Seq: 1 << 63, Arg: 1<<64 - 1},
		{Kind: remote.KindPing, Seq: 3},
		{Kind: remote.KindCancel, Seq: 4},
		{Kind: remote.KindFin, Seq: 5, Arg: remote.FinSynthetic},
		{Kind: remote.KindFin, Seq: 5},
		{Kind: remote.KindAbort, Seq: 9, Arg: 6, Body: []byte("a reason")},
		{Kind: remote.KindTree, Seq: 1, Body: []byte("9f2c1a0b-17")},
		{Kind: remote.KindTree, Seq: 1, Body: []byte(strings.Repeat("é", 128))},
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range validMessages() {
		b := remote.AppendMessage(nil, m)
		require.Len(t, b, remote.HeaderLen+len(m.Body))
		got, err := remote.ParseMessage(b)
		require.NoError(t, err, m.Kind.String())
		assert.Equal(t, m.Kind, got.Kind)
		assert.Equal(t, m.Seq, got.Seq)
		assert.Equal(t, m.Arg, got.Arg)
		assert.True(t, bytes.Equal(m.Body, got.Body))
	}
}

func TestMessageGolden(t *testing.T) {
	b := remote.AppendMessage(nil, remote.Message{Kind: remote.KindCredit, Seq: 2, Arg: 0x200000})
	assert.Equal(t, []byte{1, 4, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0x20, 0, 0}, b)
	assert.Equal(t, "credit", remote.KindCredit.String())
	assert.Equal(t, "kind(200)", remote.Kind(200).String())
	b = remote.AppendMessage(nil, remote.Message{Kind: remote.KindTree, Seq: 1, Body: []byte("a7-1")})
	assert.Equal(t, []byte{1, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 'a', '7', '-', '1'}, b)
	assert.Equal(t, "tree", remote.KindTree.String())
}

func TestMessageRefusals(t *testing.T) {
	enc := func(k remote.Kind, seq, arg uint64, body []byte) []byte {
		return remote.AppendMessage(nil, remote.Message{Kind: k, Seq: seq, Arg: arg, Body: body})
	}
	cases := map[string]struct {
		b     []byte
		field string
	}{
		"short":            {[]byte{1, 3, 0}, "length"},
		"over the limit":   {enc(remote.KindData, 1, 0, make([]byte, remote.MaxFragment+1)), "length"},
		"version":          {append([]byte{2}, enc(remote.KindPing, 1, 0, nil)[1:]...), "version"},
		"kind 0":           {enc(0, 1, 0, nil), "kind"},
		"unknown kind":     {enc(99, 1, 0, nil), "kind"},
		"open data":        {enc(remote.KindOpen, 0, 1, make([]byte, remote.MaxOpenData+1)), "body"},
		"open seq":         {enc(remote.KindOpen, 1, 1, nil), "sequence"},
		"open window":      {enc(remote.KindOpen, 0, 0, nil), "arg"},
		"accept empty":     {enc(remote.KindAccept, 0, 1, nil), "body"},
		"accept wildcard":  {enc(remote.KindAccept, 0, 1, []byte("skulk.>")), "body"},
		"accept space":     {enc(remote.KindAccept, 0, 1, []byte("a b")), "body"},
		"accept dots":      {enc(remote.KindAccept, 0, 1, []byte("a..b")), "body"},
		"accept long":      {enc(remote.KindAccept, 0, 1, []byte(strings.Repeat("a", remote.MaxSubject+1))), "body"},
		"accept seq":       {enc(remote.KindAccept, 1, 1, []byte("a")), "sequence"},
		"accept window":    {enc(remote.KindAccept, 0, 0, []byte("a")), "arg"},
		"data empty":       {enc(remote.KindData, 1, 0, nil), "body"},
		"data arg":         {enc(remote.KindData, 1, 1, []byte("x")), "arg"},
		"credit body":      {enc(remote.KindCredit, 1, 1, []byte("x")), "body"},
		"ping arg":         {enc(remote.KindPing, 1, 1, nil), "body"},
		"cancel body":      {enc(remote.KindCancel, 1, 0, []byte("x")), "body"},
		"fin flags":        {enc(remote.KindFin, 1, 2, nil), "arg"},
		"fin body":         {enc(remote.KindFin, 1, 0, []byte("x")), "body"},
		"abort code 0":     {enc(remote.KindAbort, 1, 0, nil), "arg"},
		"abort code large": {enc(remote.KindAbort, 1, 256, nil), "arg"},
		"abort long":       {enc(remote.KindAbort, 1, 1, make([]byte, remote.MaxReason+1)), "body"},
		"abort not utf8":   {enc(remote.KindAbort, 1, 1, []byte{0xff}), "body"},
		"tree empty":       {enc(remote.KindTree, 1, 0, nil), "body"},
		"tree long":        {enc(remote.KindTree, 1, 0, make([]byte, 513)), "body"},
		"tree not utf8":    {enc(remote.KindTree, 1, 0, []byte{0xff}), "body"},
		"tree arg":         {enc(remote.KindTree, 1, 1, []byte("a")), "arg"},
	}
	for name, c := range cases {
		_, err := remote.ParseMessage(c.b)
		require.ErrorIs(t, err, remote.ErrMessage, name)
		var me *remote.MessageError
		require.ErrorAs(t, err, &me, name)
		assert.Equal(t, c.field, me.Field, name)
		assert.NotContains(t, err.Error(), "garbage", name)
	}
}

// FuzzParseMessage parses any bytes without panicking, and re-encodes
// what it accepts to the same bytes.
func FuzzParseMessage(f *testing.F) {
	for _, m := range validMessages() {
		b := remote.AppendMessage(nil, m)
		if len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Add([]byte{1, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := remote.ParseMessage(b)
		if err != nil {
			return
		}
		if got := remote.AppendMessage(nil, m); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, parsed from %x", got, b)
		}
	})
}
