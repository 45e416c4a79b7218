package mpack_test

import (
	"fmt"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
)

// Build a payload {"text": "hello"} without reflection, then read it back.
func Example() {
	b := mpack.AppendMapHeader(nil, 1)
	b = mpack.AppendString(b, "text")
	b = mpack.AppendString(b, "hello")
	p := frame.Payload(b)
	fmt.Println(mpack.CheckObject(p)) // a valid payload

	r := mpack.NewReader(b)
	n, _ := r.ReadMapLen()
	k, _ := r.ReadStr()
	v, _ := r.ReadStr()
	fmt.Println(n, string(k), string(v), r.Remaining())
	// Output:
	// <nil>
	// 1 text hello 0
}
