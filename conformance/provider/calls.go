package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// Contract: docs/protocol.md §6 item 3; docs/demo-tools.md, count.
// The count tool numbers its chunks i from 0; provider frames run from
// sequence 1 to one terminal, then end.
func testCountLifecycle(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	for _, n := range []int{0, 1, 5, 300} {
		id := fmt.Sprintf("count-%d", n)
		want := strings.Repeat("chunk,", n) + "completed,end"
		r := runCall(t, s, id, "count", map[string]any{"n": n}, nil, want)
		if r.outcomes() != want {
			t.FailNow()
		}
		for i, f := range r.frames[:n] {
			if p, _ := f.header["payload"].(map[string]any); asInt(p["i"]) != int64(i) {
				t.Errorf("n=%d: chunk %d has payload %v, want i=%d", n, i, f.header["payload"], i)
			}
		}
		if p, _ := r.frames[n].header["payload"].(map[string]any); asInt(p["n"]) != int64(n) {
			t.Errorf("n=%d: completed has payload %v", n, r.frames[n].header["payload"])
		}
	}
	r := runCall(t, s, "count-pad", "count", map[string]any{"n": 2, "size": 100}, nil, "chunk,chunk,completed,end")
	for _, f := range r.frames[:min(2, len(r.frames))] {
		if p, _ := f.header["payload"].(map[string]any); len(fmt.Sprint(p["pad"])) != 100 {
			t.Errorf("size 100: pad %v", p["pad"])
		}
	}
}

// Contract: docs/protocol.md §4.1 (caller completed is a half-close).
// Caller completed is a half-close: the handler's output streams before it
// and goes on after it; a caller completed may carry a payload.
func testHalfCloseAndStreaming(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	id := "up1"
	s.send(invoke(id, "upper", nil))
	s.send(callerFrame(id, 0, "started"))
	next, term := uint64(1), false
	for i, w := range []string{"hello", "wörld", ""} {
		s.send(callerChunk(id, uint64(i+1), map[string]any{"text": w}))
		p := s.must(wait) // streamed back before the caller completes
		for _, pr := range checkProviderFrame(p, id, &next, &term) {
			t.Error(pr)
		}
		if pl, _ := p.header["payload"].(map[string]any); pl["text"] != strings.ToUpper(w) {
			t.Errorf("upper(%q) = %v", w, p.header["payload"])
		}
	}
	s.send(callerFrame(id, 4, "completed"))
	p := s.must(wait)
	if pl, _ := p.header["payload"].(map[string]any); p.str("kind") != "completed" || asInt(pl["chunks"]) != 3 || p.int("sequence") != 4 {
		t.Errorf("terminal after the half-close: %v", p.header)
	}
	if e := s.must(wait); e.typ != "end" || e.str("call_id") != id {
		t.Errorf("want end, got %v", e)
	}

	runCall(t, s, "echo-res", "echo", nil, []map[string]any{{"a": 1}}, "chunk,completed,end")
	s.send(invoke("echo-res2", "echo", nil))
	s.send(callerFrame("echo-res2", 0, "started"))
	s.send(with(callerFrame("echo-res2", 1, "completed"), "payload", map[string]any{"result": true}))
	expectCall(t, s, "echo-res2", "completed,end")
}

// Contract: docs/protocol.md §2-§4 via the demo tools (docs/demo-tools.md).
// Payloads and inline media round-trip, attachments are raw bytes,
// error.message is cut to 2,048 characters (docs/protocol.md §3, Error).
func testDemoTools(t *testing.T) {
	c := start(t, setup{})
	t.Run("echo_payloads", func(t *testing.T) {
		s := c.dial(t)
		chunks := []map[string]any{{"a": int64(1)}, {"b": "x", "c": []any{int64(1), true, nil, 1.5}}, {"nested": map[string]any{"k": "v"}}}
		r := runCall(t, s, "e1", "echo", nil, chunks, "chunk,chunk,chunk,completed,end")
		if len(r.frames) != 4 {
			return
		}
		for i := range chunks {
			if fmt.Sprint(r.frames[i].header["payload"]) != fmt.Sprint(chunks[i]) {
				t.Errorf("chunk %d echoed as %v, want %v", i, r.frames[i].header["payload"], chunks[i])
			}
		}
		if p, _ := r.frames[3].header["payload"].(map[string]any); asInt(p["chunks"]) != 3 {
			t.Errorf("echo result %v", r.frames[3].header["payload"])
		}
	})
	t.Run("echo_media", func(t *testing.T) {
		s := c.dial(t)
		id := "e2"
		s.send(invoke(id, "echo", nil))
		s.send(callerFrame(id, 0, "started"))
		data := bytes.Repeat([]byte{0, 1, 2, 0xff}, 2500)
		s.sendAtt(with(callerFrame(id, 1, "chunk"),
			"media", map[string]any{"kind": "inline", "media_type": "audio/pcm", "codec": "pcm_s16le", "sample_rate": 16000,
				"channels": 1, "timestamp_seconds": 1.5, "duration_seconds": 0.25},
			"payload", map[string]any{"note": "with media"}), data)
		s.send(with(callerFrame(id, 2, "chunk"), "media", inlineMedia("text/plain")))
		s.send(with(callerFrame(id, 3, "chunk"), "media", map[string]any{"kind": "blob", "blob_id": "b-1", "size_bytes": 10,
			"sha256": strings.Repeat("ab", 32), "media_type": "image/png"}))
		s.send(callerFrame(id, 4, "completed"))
		r := expectCall(t, s, id, "chunk,chunk,chunk,completed,end")
		if len(r.frames) != 4 {
			return
		}
		if !bytes.Equal(r.frames[0].att, data) {
			t.Errorf("echoed attachment differs (%d bytes, want %d)", len(r.frames[0].att), len(data))
		}
		m, _ := r.frames[0].header["media"].(map[string]any)
		if m["media_type"] != "audio/pcm" || m["codec"] != "pcm_s16le" || asInt(m["sample_rate"]) != 16000 ||
			asInt(m["channels"]) != 1 || fmt.Sprint(m["timestamp_seconds"]) != "1.5" || fmt.Sprint(m["duration_seconds"]) != "0.25" {
			t.Errorf("echoed media %v", m)
		}
		if r.frames[0].header["payload"] == nil {
			t.Errorf("the payload beside the media was lost")
		}
		if len(r.frames[1].att) != 0 {
			t.Errorf("empty inline media echoed with %d bytes", len(r.frames[1].att))
		}
		if m3, _ := r.frames[2].header["media"].(map[string]any); m3["kind"] != "blob" || m3["blob_id"] != "b-1" || len(r.frames[2].att) != 0 {
			t.Errorf("blob echoed as %v (attachment %d bytes)", m3, len(r.frames[2].att))
		}
	})
	t.Run("media", func(t *testing.T) {
		s := c.dial(t)
		for _, tc := range []struct{ bytes, chunk int }{{200000, 65536}, {0, 100}, {100, 100}, {1 << 20, 1 << 20}} {
			id := fmt.Sprintf("m-%d-%d", tc.bytes, tc.chunk)
			r := runCall(t, s, id, "media", map[string]any{"bytes": tc.bytes, "chunk": tc.chunk}, nil, "")
			h := sha256.New()
			total := 0
			for _, f := range r.frames {
				if f.str("kind") != "chunk" {
					continue
				}
				if m, _ := f.header["media"].(map[string]any); m["kind"] != "inline" || m["media_type"] != "application/octet-stream" {
					t.Errorf("%s: media %v", id, m)
				}
				if len(f.att) > tc.chunk {
					t.Errorf("%s: a chunk of %d bytes, more than %d", id, len(f.att), tc.chunk)
				}
				total += len(f.att)
				h.Write(f.att)
			}
			if total != tc.bytes {
				t.Errorf("%s: %d bytes, want %d", id, total, tc.bytes)
			}
			sum := hex.EncodeToString(h.Sum(nil))
			tm := r.terminal()
			if tm == nil {
				t.Errorf("%s: no terminal", id)
				continue
			}
			if p, _ := tm.header["payload"].(map[string]any); tm.str("kind") != "completed" || p["sha256"] != sum {
				t.Errorf("%s: terminal %v, sha256 of the bytes %s", id, tm.header, sum)
			}
		}
	})
	t.Run("sleep", func(t *testing.T) {
		s := c.dial(t)
		t0 := time.Now()
		r := runCall(t, s, "sl", "sleep", map[string]any{"ms": 200}, nil, "completed,end")
		if el := time.Since(t0); el < 200*time.Millisecond {
			t.Errorf("sleep 200 ms completed after %v", el)
		}
		if tm := r.terminal(); tm != nil {
			if p, _ := tm.header["payload"].(map[string]any); asInt(p["slept_ms"]) < 190 {
				t.Errorf("slept_ms %v", p)
			}
		}
	})
	t.Run("fail", func(t *testing.T) {
		s := c.dial(t)
		r := runCall(t, s, "fl", "fail", map[string]any{"message": "boom"}, nil, "failed/provider_error,end")
		if tm := r.terminal(); tm != nil && tm.errMessage() != "boom" {
			t.Errorf("fail: message %q, want boom", tm.errMessage())
		}
		r = runCall(t, s, "fl2", "fail", map[string]any{"message": strings.Repeat("é", 3000)}, nil, "failed/provider_error,end")
		if tm := r.terminal(); tm != nil && tm.errMessage() != strings.Repeat("é", 2048) {
			t.Errorf("a 3,000-character message sent as %d characters, want its first 2,048", len([]rune(tm.errMessage())))
		}
	})
}

// Contract: docs/protocol.md §7 "EOF before the terminal"; docs/demo-tools.md crash.
// After its chunks the process exits with status 3; the host sees EOF before
// a terminal (§7).
func testCrashTool(t *testing.T) {
	c := start(t, setup{args: testToolsArgs()})
	s := c.dial(t)
	// One write: the child may be gone before a second one.
	s.sendRaw(plainRequest(invoke("cr", "crash", map[string]any{"after": 2})))
	r, err := readCall(s, "cr", wait)
	for _, p := range r.problems {
		t.Error(p)
	}
	if !isClosed(err) || r.outcomes() != "chunk,chunk" {
		t.Errorf("crash after 2: %q then %v, want two chunks then EOF", r.outcomes(), err)
	}
	if code, ok := c.waitExit(wait); !ok || code != 3 {
		t.Errorf("crash: exited %v with status %d, want 3", ok, code)
	}
}

// Contract: docs/protocol.md §1 and §6 item 6 (reuse, the quiet interval).
// Calls in sequence on one connection, a plain request written in one go
// (its child need not read in the quiet interval), and eight connections
// in parallel.
func testSequentialAndConcurrentCalls(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	for i := range 20 {
		runCall(t, s, fmt.Sprintf("seq-%d", i), "count", map[string]any{"n": 2}, nil, "chunk,chunk,completed,end")
	}
	s.sendRaw(plainRequest(invoke("plain", "count", map[string]any{"n": 3})))
	expectCall(t, s, "plain", "chunk,chunk,chunk,completed,end")

	const n = 50
	want := strings.Repeat("chunk,", n) + "completed,end"
	var wg sync.WaitGroup
	results := make([]string, 8)
	for i := range results {
		s := c.dial(t)
		id := fmt.Sprintf("par-%d", i)
		s.send(invoke(id, "count", map[string]any{"n": n}))
		s.send(callerFrame(id, 0, "started"))
		s.send(callerFrame(id, 1, "completed"))
		wg.Add(1)
		go func() { // stopped by readCall's bound
			defer wg.Done()
			r, err := readCall(s, id, wait)
			if err != nil || len(r.problems) > 0 || r.outcomes() != want {
				results[i] = fmt.Sprintf("%s: %d frames, problems %v, error %v", id, len(r.frames), r.problems, err)
			}
		}()
	}
	wg.Wait()
	for _, res := range results {
		if res != "" {
			t.Error(res)
		}
	}
}
