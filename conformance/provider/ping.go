package provider

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// nonceOf returns pong.nonce as a uint64 (loose decoding gives small
// positive values as int64).
func nonceOf(p *packet) (uint64, bool) {
	switch v := p.header["nonce"].(type) {
	case uint64:
		return v, true
	case int64:
		return uint64(v), v >= 0
	}
	n := asInt(p.header["nonce"])
	return uint64(n), n >= 0
}

// Contract: docs/protocol.md §3 pong.
// The nonce is a uint64 echoed exactly; an idle child reports streams 0 and
// stuck 0.
func testPingNonceEcho(t *testing.T) {
	c := start(t, setup{})
	for _, n := range []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32,
		1<<63 - 1, 1 << 63, 1<<63 + 12345, math.MaxUint64} {
		c.ctl.send(map[string]any{"t": "ping", "nonce": n})
		p := c.ctl.must(wait)
		if got, ok := nonceOf(p); p.typ != "pong" || !ok || got != n {
			t.Errorf("ping %d answered by %v", n, p)
			continue
		}
		if len(p.att) != 0 {
			t.Errorf("pong with a %d-byte attachment", len(p.att))
		}
		for _, k := range []string{"streams", "stuck"} {
			if v, ok := p.header[k]; !ok || asInt(v) != 0 {
				t.Errorf("idle child: pong.%s = %#v, want 0", k, v)
			}
		}
	}
}

// Contract: docs/protocol.md §2 (`t`, duplicate keys, numbers, unknown keys).
// A nonce in any integer encoding that holds it; t anywhere in the map; the
// last of duplicate keys wins; an unknown key with a bin value is ignored.
func testPingNonceEncodings(t *testing.T) {
	c := start(t, setup{})
	// {t: "ping", nonce: <code><8 bytes>}
	header := func(code byte, v uint64) []byte {
		b := []byte{0x82, 0xa1, 't', 0xa4, 'p', 'i', 'n', 'g', 0xa5, 'n', 'o', 'n', 'c', 'e', code}
		for i := 7; i >= 0; i-- {
			b = append(b, byte(v>>(8*i)))
		}
		return b
	}
	for _, tc := range []struct {
		code byte
		v    uint64
	}{{0xcf, 5}, {0xd3, 7}, {0xcf, math.MaxUint64}} {
		c.ctl.sendRaw(rawPacket(header(tc.code, tc.v), nil))
		p := c.ctl.must(wait)
		if got, _ := nonceOf(p); p.typ != "pong" || got != tc.v {
			t.Errorf("nonce %d encoded as %#x: answered by %v", tc.v, tc.code, p)
		}
	}
	// {nonce: 1, zzz: bin, nonce: 9, t: "ping"}
	b := rawMap(mstr("nonce"), []byte{0x01}, mstr("zzz"), []byte{0xc4, 0x02, 0xff, 0xfe},
		mstr("nonce"), []byte{0x09}, mstr("t"), mstr("ping"))
	c.ctl.sendRaw(rawPacket(b, nil))
	if p := c.ctl.must(wait); p.typ != "pong" || p.int("nonce") != 9 {
		t.Errorf("ping with t last, a duplicate nonce and an unknown bin key: answered by %v, want nonce 9", p)
	}
}

// Contract: docs/protocol.md §3 ping/pong; §5 item 4 (health).
// A burst of pings in one write is answered in order.
func testPingBurst(t *testing.T) {
	c := start(t, setup{})
	var b []byte
	for i := range 200 {
		b = append(b, encodePacket(map[string]any{"t": "ping", "nonce": uint64(i) << 56}, nil)...)
	}
	c.ctl.sendRaw(b)
	for i := range 200 {
		p := c.ctl.must(wait)
		if got, _ := nonceOf(p); p.typ != "pong" || got != uint64(i)<<56 {
			t.Fatalf("pong %d: %v", i, p)
		}
	}
}

// Contract: docs/protocol.md §1 and §3 pong.
// Pong comes at once while handlers run and counts them; both counters are 0
// once they have returned.
func testPongWhileRunning(t *testing.T) {
	c := start(t, setup{})
	const sleep = 3000 // ms, far longer than the checks below take
	var ss []*conn
	for i := range 3 {
		s := c.dial(t)
		id := fmt.Sprintf("run%d", i)
		s.send(invoke(id, "sleep", map[string]any{"ms": sleep}))
		s.send(callerFrame(id, 0, "started"))
		s.send(callerFrame(id, 1, "completed"))
		ss = append(ss, s)
	}
	t0 := time.Now()
	c.mustCounters(3, 0, wait)
	t1 := time.Now()
	c.counters()
	if el := time.Since(t1); el > 500*time.Millisecond {
		t.Errorf("pong took %v while handlers run", el)
	}
	if time.Since(t0) > sleep*time.Millisecond/2 {
		t.Fatalf("the checks took %v, too long to tell the handlers were running", time.Since(t0))
	}
	for i, s := range ss {
		expectCall(t, s, fmt.Sprintf("run%d", i), "completed,end")
	}
	if err := c.waitCounters(0, 0, atOnce); err != nil {
		t.Errorf("after the calls ended: %v", err)
	}
}
