package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"
)

// Sizes of PiledUpOutput. A Unix socket's buffer holds some thousands
// of small packets, so each call writes several times that: the rest must
// wait in the provider's own queue while the host does not read.
const (
	// pileChunks is how many chunks each call of PiledUpOutput writes:
	// far more than IOV_MAX (1,024 on Linux), even after what the socket
	// buffer takes.
	pileChunks = 20000
	// pileMediaChunk is the size of the media call's chunks: small, so
	// that as many inline-media frames pile up as count's chunks.
	pileMediaChunk = 64
	// pilePause is how long the host leaves the output unread. The child
	// fills the socket in milliseconds and its queue soon after; the
	// Python provider, on a loaded two-core machine under -race, has
	// queued all it will queue within a few hundred milliseconds.
	pilePause = time.Second
	// pileRead bounds reading one whole call of pileChunks chunks on a
	// loaded machine under -race: a failure, not a hang.
	pileRead = 6 * wait
)

// Contract: docs/protocol.md §2 ("Writing": several queued packets may go out in
// one write) and §6 item 3.
// Thousands of packets piled up behind a host that stopped reading arrive
// whole and in order once it reads again: count's chunks (payload only)
// and media's (header and attachment). A writer that puts every queued
// packet's header and attachment into one writev(2) (sendmsg, in Python)
// hands the kernel more buffers than IOV_MAX once more than 1,024 are
// queued; the kernel refuses the whole write (EINVAL), and the call never
// ends.
//
// The test can pile up only what the provider's writer lets queue. Each
// call writes 20,000 chunks with the shortest call id (so the smallest
// headers, about 90 bytes for count's chunks), and the host reads nothing
// for a second, so a writer whose queue can hold more than 1,024 packets
// (about 100 KB of count's headers) goes past IOV_MAX in its first write
// after the pause. A writer that bounds its
// queue below that never reaches the limit, and there a missing cap on a
// write's buffers is not caught; it cannot do harm either, as long as the
// bound holds. The Go and Python SDKs are such writers: the Python one
// holds at most 64 KiB of headers (about 730 of count's chunks) and
// waits for an attachment to be written, and the Go one writes a batch's
// headers as one buffer.
func testPiledUpOutput(t *testing.T) {
	c := start(t, setup{})
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"count", map[string]any{"n": pileChunks}},
		{"media", map[string]any{"bytes": pileChunks * pileMediaChunk, "chunk": pileMediaChunk}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			s := c.dial(t)
			id := tc.tool[:1] // a one-character call id: the smallest headers
			s.sendRaw(plainRequest(invoke(id, tc.tool, tc.args)))
			// A deliberate interval: the output fills the socket, then the
			// provider's queue, while the host reads nothing.
			time.Sleep(pilePause)
			t0 := time.Now()
			r, err := readPile(s, id)
			for i, p := range r.problems {
				if i == 10 {
					t.Errorf("call %s: %d more problems", id, len(r.problems)-i)
					break
				}
				t.Errorf("call %s: %s", id, p)
			}
			if err != nil {
				t.Fatalf("call %s: read %d frames, then %v", id, len(r.frames), err)
			}
			t.Logf("%d frames read in %v after a %v pause", len(r.frames), time.Since(t0), pilePause)
			if len(r.frames) != pileChunks+1 {
				t.Fatalf("call %s: %d frames, want %d chunks and completed", id, len(r.frames), pileChunks)
			}
			if tc.tool == "count" {
				checkCountChunks(t, r)
			} else {
				checkMediaChunks(t, r)
			}
		})
	}
}

// readPile reads the call id on s as readCall does, checking every frame,
// but gives up as soon as the next packet takes more than wait to begin
// (a provider whose write failed may keep the connection open), and after
// pileRead in all.
func readPile(s *conn, id string) (*callResult, error) {
	r := &callResult{}
	deadline := time.Now().Add(pileRead)
	next, terminal := uint64(1), false
	for {
		p, err := s.read(min(wait, time.Until(deadline)))
		if err != nil {
			return r, err
		}
		switch p.typ {
		case "frame":
			r.frames = append(r.frames, p)
			r.problems = append(r.problems, checkProviderFrame(p, id, &next, &terminal)...)
		case "end":
			r.end = p
			if !terminal || p.str("call_id") != id {
				r.problems = append(r.problems, fmt.Sprintf("end %v after %d frames", p, len(r.frames)))
			}
			return r, nil
		default:
			r.problems = append(r.problems, fmt.Sprintf("packet %q on a stream connection", p.typ))
		}
	}
}

// checkCountChunks checks count's output: chunk i has payload {"i": i},
// completed has {"n": n}.
func checkCountChunks(t *testing.T, r *callResult) {
	t.Helper()
	n := len(r.frames) - 1
	for i, f := range r.frames[:n] {
		if p, _ := f.header["payload"].(map[string]any); f.str("kind") != "chunk" || asInt(p["i"]) != int64(i) {
			t.Fatalf("frame %d: %v, want chunk {i: %d}", i, f, i)
		}
	}
	if p, _ := r.frames[n].header["payload"].(map[string]any); r.frames[n].outcome() != "completed" || asInt(p["n"]) != int64(n) {
		t.Errorf("terminal %v, want completed {n: %d}", r.frames[n], n)
	}
}

// checkMediaChunks checks media's output (docs/demo-tools.md): chunks of
// pileMediaChunk bytes, byte k of the whole output k mod 251, completed
// with their SHA-256.
func checkMediaChunks(t *testing.T, r *callResult) {
	t.Helper()
	n := len(r.frames) - 1
	want := make([]byte, pileMediaChunk)
	h := sha256.New()
	off := 0
	for i, f := range r.frames[:n] {
		for k := range want {
			want[k] = byte((off + k) % 251)
		}
		if m, _ := f.header["media"].(map[string]any); f.str("kind") != "chunk" || m["kind"] != "inline" || !bytes.Equal(f.att, want) {
			t.Fatalf("frame %d: %v, attachment %s, want an inline chunk of bytes %d.. mod 251", i, f, abbrevHex(f.att), off)
		}
		h.Write(f.att)
		off += len(f.att)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if p, _ := r.frames[n].header["payload"].(map[string]any); r.frames[n].outcome() != "completed" || p["sha256"] != sum {
		t.Errorf("terminal %v, want completed {sha256: %s}", r.frames[n], sum)
	}
}

// abbrevHex renders the first bytes of b for a test message.
func abbrevHex(b []byte) string {
	if len(b) > 16 {
		return fmt.Sprintf("%x… (%d bytes)", b[:16], len(b))
	}
	return fmt.Sprintf("%x", b)
}
