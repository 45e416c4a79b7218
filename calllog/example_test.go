package calllog_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
)

// A host records a call; a required journal keeps it; a reader of the
// store replays what the caller saw.
func Example() {
	ctx := context.Background()
	store := &calllog.MemoryStore{}
	rec, _ := calllog.New(calllog.Options{Writer: "w1", Content: calllog.ContentFull,
		Journal: &calllog.Journal{Store: store, Required: true}})
	defer rec.Close(ctx)

	r, err := rec.Begin(ctx, calllog.CallInfo{ID: "c1", Tool: "say", ToolVersion: "1.0"})
	if err != nil {
		return // refused: the host must not write the invoke
	}
	r.Request(calllog.RequestInfo{Child: "child-0"})
	for i, s := range []string{"hello", ", world"} {
		f, _ := frame.NewChunk("c1", frame.ProviderToCaller, uint64(i+1), frame.MustPayload(map[string]any{"text": s}), nil)
		r.Output(f)
	}
	if err := r.End(ctx, calllog.Done(nil)); err != nil {
		fmt.Println("end not kept:", calllog.Settle(ctx, err))
	}

	kept, _ := store.EventsAfter(ctx, "c1", 0, 0)
	for _, e := range kept {
		fmt.Println(e.Seq, e.Kind)
	}
	fmt.Println(calllog.Replay(kept).Call("c1").Text)
	b, _ := json.Marshal(kept[0])
	fmt.Println(string(b)[:60])
	// Output:
	// 1 started
	// 2 request
	// 3 output
	// 4 output
	// 5 done
	// hello, world
	// {"format":1,"kind":"started","tree":"c1","writer":"w1","seq"
}

// A program's calls are its steps: one tree, numbered once, the program's
// end last.
func ExampleRecorder_Program() {
	ctx := context.Background()
	rec, _ := calllog.New(calllog.Options{})
	defer rec.Close(ctx)
	var prog *calllog.Record
	_ = rec.Program(ctx, calllog.CallInfo{ID: "p", Tool: "reply"}, func(ctx context.Context) error {
		prog = calllog.Running(ctx)
		step, _ := rec.Begin(ctx, calllog.CallInfo{ID: "s", Tool: "triage"})
		return step.End(ctx, calllog.Done(nil))
	})
	for e := range prog.Events() {
		fmt.Println(e.Seq, e.Call, e.Kind, e.After)
	}
	// Output:
	// 1 p started 0
	// 2 s started 1
	// 3 s done 2
	// 4 p done 3
}
