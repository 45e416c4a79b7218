package export_test

import (
	"context"
	"fmt"

	"github.com/skulkrt/skulk/asif"
	"github.com/skulkrt/skulk/asif/export"
	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/recorder"
)

// A call recorded with full content into a journal, exported as a whole
// and as the window after its first chunk.
func ExampleExport() {
	ctx := context.Background()
	store := &eventstore.Memory{}
	rec, _ := recorder.New(calllog.Options{Content: calllog.ContentFull, Journal: &calllog.Journal{Store: store, Required: true}})
	r, _ := rec.Begin(ctx, recorder.CallInfo{ID: "c7", Tool: "upper"})
	r.Request(recorder.RequestInfo{Child: "child-0"})
	for i, s := range []string{"HELLO ", "WORLD"} {
		f, _ := frame.NewChunk("c7", frame.ProviderToCaller, uint64(i+1), frame.MustPayload(map[string]any{"text": s}), nil)
		r.Output(f)
	}
	_ = r.End(ctx, recorder.Done(nil))
	_ = rec.Close(ctx)
	events, _ := store.EventsAfter(ctx, "c7", 0, 1000)

	for _, after := range []uint64{0, 3} {
		doc, err := export.Export(events, export.Options{After: after})
		if err != nil {
			fmt.Println(err)
			return
		}
		data, err := doc.Marshal() // checked: schema and every rule
		if err != nil {
			fmt.Println(err)
			return
		}
		report, _ := asif.Check(data, asif.Options{})
		s := report.Streams[0]
		fmt.Printf("%s: %d events, %d bindings; %s %s %q\n", doc.Capture.ID, len(doc.Events), len(doc.ExternalBindings), s.StreamID, s.Status, s.Bytes)
	}
	// Output:
	// tree-c7-seq-1-5: 3 events, 0 bindings; text-3-4 complete "HELLO WORLD"
	// tree-c7-seq-4-5: 2 events, 1 bindings; text-4-4 partial ""
}
