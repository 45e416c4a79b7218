package replay_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/internal/replay"
)

// A call's events as a journal keeps them (full content), one JSON line
// each, as skulk-host follow prints them.
const callLines = `{"format":1,"kind":"started","tree":"c1","writer":"w1","seq":1,"after":null,"at":"2026-11-29T22:10:00.000000001Z","call":"c1","parent":null,"tool":"say","tool_version":"1.0","payload":{"type":"object","bytes":1,"keys":0,"value":{}}}
{"format":1,"kind":"request","tree":"c1","writer":"w1","seq":2,"after":1,"at":"2026-11-29T22:10:00.000100000Z","call":"c1","parent":null,"tool":"say","tool_version":"1.0","attempt":1,"child":"child-0"}
{"format":1,"kind":"output","tree":"c1","writer":"w1","seq":3,"after":2,"at":"2026-11-29T22:10:00.000200000Z","call":"c1","parent":null,"tool":"say","tool_version":"1.0","attempt":1,"frame":{"kind":"chunk","sequence":1},"payload":{"type":"object","bytes":12,"keys":1,"value":{"text":"hello"}}}
{"format":1,"kind":"output","tree":"c1","writer":"w1","seq":4,"after":3,"at":"2026-11-29T22:10:00.000300000Z","call":"c1","parent":null,"tool":"say","tool_version":"1.0","attempt":1,"frame":{"kind":"chunk","sequence":2},"payload":{"type":"object","bytes":14,"keys":1,"value":{"text":", world"}}}
`

func decode(lines string) []calllog.Event {
	var evs []calllog.Event
	sc := bufio.NewScanner(strings.NewReader(lines))
	for sc.Scan() {
		var e calllog.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			panic(err)
		}
		evs = append(evs, e)
	}
	return evs
}

// Events rebuilds what the caller of each call saw: its text so far, and
// its end once the log has it.
func ExampleEvents() {
	c := replay.Events(decode(callLines)).Call("c1")
	fmt.Printf("%s %s: %q, ended %v\n", c.Call, c.Tool, c.Text, c.Ended)
	// Output:
	// c1 say: "hello, world", ended false
}
