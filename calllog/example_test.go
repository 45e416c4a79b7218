package calllog_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
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

// A host writing tree c1 died mid-call. A new writer takes the tree over:
// the call's end was never kept, so it records that its outcome is
// unknown (it proves no failure), and a follower of the store shows the
// takeover.
func ExampleTakeOver() {
	ctx := context.Background()
	dir, _ := tempDir()
	st, err := sqlitestore.Open(filepath.Join(dir, "calls.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	// What the first writer kept before it died.
	c, _ := st.Claim(ctx, "c1", "w1")
	_ = st.Keep(ctx, c, decode(callLines))

	if _, err := calllog.TakeOver(ctx, st, "c1", "w2"); err != nil {
		fmt.Println(err)
		return
	}
	writer := ""
	for e, err := range calllog.Follow(ctx, st, "c1", 0, 0) {
		if err != nil {
			fmt.Println(err)
			return
		}
		if writer != "" && e.Writer != writer {
			fmt.Println("taken over from", writer)
		}
		writer = e.Writer
		line := fmt.Sprint(e.Seq, " ", e.Writer, " ", e.Kind)
		if e.Error != nil {
			line += fmt.Sprint(" ", e.Error.Code, " synthetic=", e.Error.Synthetic)
		}
		fmt.Println(line)
	}
	// Output:
	// 1 w1 started
	// 2 w1 request
	// 3 w1 output
	// 4 w1 output
	// taken over from w1
	// 5 w2 unknown
}
