package provider

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// providerFrame is a provider_to_caller frame of call id, as the host
// writes one on a call connection (§8).
func providerFrame(id string, seq uint64, kind string) map[string]any {
	return map[string]any{"t": "frame", "call_id": id, "direction": "provider_to_caller", "sequence": seq, "kind": kind}
}

// Contract: docs/protocol.md §8 (calls a child makes through its host);
// docs/demo-tools.md relay. The suite offers the provider one tool,
// lookup, on a call socket of its own. relay's call of lookup arrives on
// a call connection the provider dialed: an invoke naming relay's call as
// parent, with the depth rule kept, then the caller's started and
// completed; the suite answers a chunk, completed and end, and relay
// streams the chunk back and completes with lookup's result. A tool not
// offered and a call deeper than max_depth are refused by the provider
// before it dials: relay fails, and no other connection comes.
func testCallsThroughHost(t *testing.T) {
	if callArgs == nil {
		t.Skip("Options.CallToolsArgs is not set: relay is not tested")
	}
	dir, err := os.MkdirTemp("", "skc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "calls.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	acc := make(chan net.Conn, 2) // connections the provider dialed; closed once the accepts returned
	go func() {                   // stopped by ln.Close (deferred below)
		defer close(acc)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			acc <- nc
		}
	}()
	defer func() {
		ln.Close()
		for nc := range acc {
			nc.Close()
		}
	}()
	c := start(t, setup{args: slices.Clone(callArgs), calls: map[string]any{
		"socket": sock, "max_depth": 2, "max_in_flight": 4,
		"tools": []any{map[string]any{"id": "lookup", "arguments_schema": map[string]any{"type": "object"}}},
	}})
	tools, _ := c.hello.header["tools"].([]any)
	if !slices.ContainsFunc(tools, func(x any) bool { m, _ := x.(map[string]any); return m["id"] == "relay" }) {
		t.Skip("the provider offers no relay with Options.CallToolsArgs")
	}
	s := c.dial(t)
	s.send(invoke("r1", "relay", map[string]any{"tool": "lookup", "args": map[string]any{"word": "fox"}}))
	s.send(callerFrame("r1", 0, "started"))
	s.send(callerFrame("r1", 1, "completed"))
	var nc net.Conn
	select {
	case nc = <-acc:
	case <-time.After(wait):
		t.Fatal("relay dialed no call connection")
	}
	h := &conn{t: t, nc: nc, name: "call"}
	inv := h.must(wait)
	id := inv.str("call_id")
	args, _ := inv.header["arguments"].(map[string]any)
	if inv.typ != "invoke" || inv.str("tool_id") != "lookup" || inv.str("parent") != "r1" || id == "" || args["word"] != "fox" {
		t.Fatalf("relay's call: %v, want an invoke of lookup {word: fox} with parent r1", inv)
	}
	for seq, kind := range []string{"started", "completed"} {
		p := h.must(wait)
		if p.typ != "frame" || p.str("call_id") != id || p.str("kind") != kind || p.int("sequence") != int64(seq) || p.str("direction") != "caller_to_provider" {
			t.Fatalf("relay's call, caller frame %d: %v, want %s", seq, p, kind)
		}
	}
	h.send(with(providerFrame(id, 1, "chunk"), "payload", map[string]any{"text": "f"}))
	h.send(with(providerFrame(id, 2, "completed"), "payload", map[string]any{"len": 3}))
	h.send(map[string]any{"t": "end", "call_id": id})
	r := expectCall(t, s, "r1", "chunk,completed,end")
	if term := r.terminal(); term != nil {
		if res, _ := term.header["payload"].(map[string]any); asInt(res["len"]) != 3 {
			t.Errorf("relay's result %v, want lookup's {len: 3}", term.header["payload"])
		}
	}

	// Refused before anything is dialed: a tool not offered; a call from a
	// call at depth 2 (max_depth 2).
	s.send(invoke("r2", "relay", map[string]any{"tool": "nope"}))
	s.send(callerFrame("r2", 0, "started"))
	s.send(callerFrame("r2", 1, "completed"))
	expectCall(t, s, "r2", "failed/provider_error,end")
	s.send(with(invoke("r3", "relay", map[string]any{"tool": "lookup"}), "tree", "r0", "parent", "r0", "depth", 2))
	s.send(callerFrame("r3", 0, "started"))
	s.send(callerFrame("r3", 1, "completed"))
	expectCall(t, s, "r3", "failed/provider_error,end")
	select {
	case nc := <-acc:
		t.Errorf("a refused call dialed the host (%v)", nc.LocalAddr())
	case <-time.After(100 * time.Millisecond):
	}
}
