package export_test

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/skulkrt/skulk/asif"
	"github.com/skulkrt/skulk/asif/export"
	"github.com/skulkrt/skulk/calllog"
)

// A call's events as a journal keeps them with full content (the JSON form
// of docs/events.md, as skulk-host follow prints them).
const journalLines = `{"format":1,"kind":"started","tree":"c7","writer":"w1","seq":1,"after":null,"at":"2026-11-29T22:10:00.000000001Z","call":"c7","parent":null,"tool":"upper"}
{"format":1,"kind":"request","tree":"c7","writer":"w1","seq":2,"after":1,"at":"2026-11-29T22:10:00.000100000Z","call":"c7","parent":null,"tool":"upper","attempt":1,"child":"child-0"}
{"format":1,"kind":"output","tree":"c7","writer":"w1","seq":3,"after":2,"at":"2026-11-29T22:10:00.000200000Z","call":"c7","parent":null,"tool":"upper","attempt":1,"frame":{"kind":"chunk","sequence":1},"payload":{"type":"object","bytes":13,"keys":1,"value":{"text":"HELLO "}}}
{"format":1,"kind":"output","tree":"c7","writer":"w1","seq":4,"after":3,"at":"2026-11-29T22:10:00.000300000Z","call":"c7","parent":null,"tool":"upper","attempt":1,"frame":{"kind":"chunk","sequence":2},"payload":{"type":"object","bytes":12,"keys":1,"value":{"text":"WORLD"}}}
{"format":1,"kind":"done","tree":"c7","writer":"w1","seq":5,"after":4,"at":"2026-11-29T22:10:00.000400000Z","call":"c7","parent":null,"tool":"upper","attempt":1}
`

// A call recorded with full content into a journal, exported as a whole
// and as the window after its first chunk.
func ExampleExport() {
	var events []calllog.Event
	for _, line := range strings.Split(strings.TrimSpace(journalLines), "\n") {
		var e calllog.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			fmt.Println(err)
			return
		}
		events = append(events, e)
	}

	for _, after := range []uint64{0, 3} {
		session, err := export.Export(events, export.Options{After: after}) // checked: schema and every rule
		if err != nil {
			fmt.Println(err)
			return
		}
		report, _ := asif.Check(session.JSON, asif.Options{})
		s := report.Streams[0]
		fmt.Printf("%s: %d events, %d bindings; %s %s %q\n", session.CaptureID, session.Events, session.ExternalBindings, s.StreamID, s.Status, s.Bytes)
	}
	// Output:
	// tree-c7-seq-1-5: 3 events, 0 bindings; text-3-4 complete "HELLO WORLD"
	// tree-c7-seq-4-5: 2 events, 1 bindings; text-4-4 partial ""
}
