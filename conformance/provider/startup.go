package provider

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"
	"unicode/utf8"
)

// demoTools are the tools docs/demo-tools.md specifies (cmd/skulk-child offers them);
// --test-tools adds crash (and ignore_cancel to sleep).
var demoTools = []string{"echo", "upper", "count", "media", "sleep", "fail"}

// readHello starts a child with args and returns its hello, without
// answering it.
func readHello(t *testing.T, args []string) (*child, *packet) {
	t.Helper()
	c := startProcess(t, processOptions{args: args})
	h := c.ctl.must(wait)
	if h.typ != "hello" {
		t.Fatalf("first control packet %v, want hello", h)
	}
	return c, h
}

// toolDescriptors returns hello's tool descriptors by id.
func toolDescriptors(t *testing.T, h *packet) map[string]map[string]any {
	t.Helper()
	tools, ok := h.header["tools"].([]any)
	if !ok {
		t.Fatalf("hello.tools is %T, want an array", h.header["tools"])
	}
	out := map[string]map[string]any{}
	for _, ti := range tools {
		td, ok := ti.(map[string]any)
		if !ok {
			t.Errorf("tool descriptor is %T, want a map", ti)
			continue
		}
		id, _ := td["id"].(string)
		if _, dup := out[id]; dup {
			t.Errorf("tool id %q twice", id)
		}
		out[id] = td
	}
	return out
}

// Contract: docs/protocol.md §3 hello and tool descriptors.
// Hello offers version 1 and carries sdk, the child's pid, max_streams ≥ 1,
// limits and well-formed tool descriptors, every demo tool among them.
func testHello(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"default", nil, demoTools},
		{"test-tools", testToolsArgs(), append(slices.Clone(demoTools), "crash")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, h := readHello(t, tc.args)
			if len(h.att) != 0 {
				t.Errorf("hello has a %d-byte attachment", len(h.att))
			}
			pv, _ := h.header["protocol"].([]any)
			if !slices.ContainsFunc(pv, func(v any) bool { return asInt(v) == 1 }) {
				t.Errorf("hello.protocol %#v does not offer 1", h.header["protocol"])
			}
			if _, ok := h.header["sdk"].(string); !ok {
				t.Errorf("hello.sdk is %T, want a string", h.header["sdk"])
			}
			if pid := h.int("pid"); pid != int64(c.cmd.Process.Pid) {
				t.Errorf("hello.pid %d, want %d", pid, c.cmd.Process.Pid)
			}
			if ms := h.int("max_streams"); ms < 1 {
				t.Errorf("hello.max_streams %v, want ≥ 1", h.header["max_streams"])
			}
			if lim, ok := h.header["limits"].(map[string]any); !ok {
				t.Errorf("hello.limits is %T, want a map", h.header["limits"])
			} else if asInt(lim["max_header"]) < 1 || asInt(lim["max_attachment"]) < 0 {
				t.Errorf("hello.limits %v", lim)
			}
			tools := toolDescriptors(t, h)
			for id, td := range tools {
				if n := utf8.RuneCountInString(id); n < 1 || n > 128 {
					t.Errorf("tool id %q of %d characters", id, n)
				}
				if v, ok := td["version"]; ok && v != nil {
					if vs, ok := v.(string); !ok || utf8.RuneCountInString(vs) > 128 {
						t.Errorf("tool %s: version %#v", id, v)
					}
				}
				if d, ok := td["description"]; ok && d != nil {
					if _, ok := d.(string); !ok {
						t.Errorf("tool %s: description is %T", id, d)
					}
				}
				for _, k := range []string{"arguments_schema", "input_schema", "output_schema", "result_schema"} {
					if v, ok := td[k]; ok && v != nil {
						if _, ok := v.(map[string]any); !ok {
							t.Errorf("tool %s: %s is %T, want a map", id, k, v)
						}
					}
				}
				for _, k := range []string{"input_media", "no_input"} {
					if v, ok := td[k]; ok && v != nil {
						if _, ok := v.(bool); !ok {
							t.Errorf("tool %s: %s is %T, want a bool", id, k, v)
						}
					}
				}
			}
			for _, w := range tc.want {
				if _, ok := tools[w]; !ok {
					t.Errorf("tool %q missing from hello (have %v)", w, slices.Sorted(maps.Keys(tools)))
				}
			}
		})
	}
}

// Contract: docs/protocol.md §3 tool descriptor (version).
// Version changes whenever the descriptor (or the build) changes, and only
// then.
func testToolVersions(t *testing.T) {
	_, h1 := readHello(t, nil)
	_, h2 := readHello(t, testToolsArgs())
	_, h3 := readHello(t, nil)
	plain, test, again := toolDescriptors(t, h1), toolDescriptors(t, h2), toolDescriptors(t, h3)
	withoutVersion := func(td map[string]any) map[string]any {
		m := maps.Clone(td)
		delete(m, "version")
		return m
	}
	for id, td := range plain {
		v, _ := td["version"].(string)
		if v2, _ := again[id]["version"].(string); v2 != v {
			t.Errorf("tool %s: version %q, then %q from the same binary", id, v, v2)
		}
		other, ok := test[id]
		if !ok {
			t.Errorf("tool %s missing with --test-tools", id)
			continue
		}
		same := reflect.DeepEqual(withoutVersion(td), withoutVersion(other))
		if ov, _ := other["version"].(string); same != (ov == v) {
			t.Errorf("tool %s: descriptor same=%v with --test-tools, but versions %q and %q", id, same, v, ov)
		}
	}
	// The test tools change sleep's descriptor (ignore_cancel), so at least
	// one version must differ: the check above is not vacuous.
	if reflect.DeepEqual(withoutVersion(plain["sleep"]), withoutVersion(test["sleep"])) {
		t.Errorf("sleep's descriptor is the same with --test-tools; docs/demo-tools.md adds ignore_cancel")
	}
}

// startupPacket is a valid startup choosing protocol version v.
func startupPacket(v any) map[string]any {
	return map[string]any{"t": "startup", "protocol": v, "child_id": childID,
		"limits":             map[string]any{"max_header": defaultMaxHeader, "max_attachment": defaultMaxAttachment},
		"health_interval_ms": 1000, "cancel_grace_ms": 1000, "ingress_queue": 8}
}

// expectStartFailed checks docs/protocol.md §5 item 3: exit status 2 within d,
// the output ending with a one-line reason.
func expectStartFailed(t *testing.T, c *child, d time.Duration) {
	t.Helper()
	code, ok := c.waitExit(d)
	if !ok {
		t.Fatalf("child did not exit within %v", d)
	}
	out := c.outputText()
	t.Logf("exit %d, last line %q", code, lastLine(out))
	if code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	if !endsWithReason(out) {
		t.Errorf("output does not end with a one-line reason: %q", out)
	}
}

// Contract: docs/protocol.md §5 item 3 (unknown version).
// A startup naming a version the child did not offer gives a one-line reason
// and exit status 2.
func testStartupUnknownVersion(t *testing.T) {
	for _, v := range []any{2, 0, uint64(1) << 40} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			c, _ := readHello(t, nil)
			c.ctl.send(startupPacket(v))
			expectStartFailed(t, c, wait)
		})
	}
}

// Contract: docs/protocol.md §5 item 3 (an unreadable startup).
// A first control packet that is not a readable startup fails the start like
// an unknown version (exit 2).
func testStartupUnreadable(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"ping", encodePacket(map[string]any{"t": "ping", "nonce": 1}, nil)},
		{"drain", encodePacket(map[string]any{"t": "drain", "grace_ms": 10}, nil)},
		{"unknown_t", encodePacket(map[string]any{"t": "bogus"}, nil)},
		{"H0", prefix(0, 0)},
		{"protocol_string", encodePacket(with(startupPacket(1), "protocol", "1"), nil)},
		{"protocol_nil", encodePacket(with(startupPacket(1), "protocol", nil), nil)},
		{"cancel_grace_negative", encodePacket(with(startupPacket(1), "cancel_grace_ms", -1), nil)},
		{"limits_string", encodePacket(with(startupPacket(1), "limits", "big"), nil)},
		{"attachment", encodePacket(startupPacket(1), []byte("x"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := readHello(t, nil)
			c.ctl.sendRaw(tc.b)
			expectStartFailed(t, c, wait)
		})
	}
}

// Contract: docs/protocol.md §5 item 3 (no startup within 10 s).
// No startup within 10 s gives a one-line reason and exit status 2, and not
// before the 10 s are up.
func testStartupTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 10 s for the child's startup timeout; skipped with -short")
	}
	t.Parallel()
	t0 := time.Now() // before the child's own clock starts
	c, _ := readHello(t, nil)
	expectStartFailed(t, c, 10*time.Second+wait)
	el := time.Since(t0)
	t.Logf("gave up %v after its start", el)
	if el < 10*time.Second {
		t.Errorf("gave up after %v, before 10 s", el)
	}
	if el > 10*time.Second+atOnce {
		t.Errorf("gave up after %v, well after 10 s", el)
	}
}

// Contract: docs/protocol.md §1 environment; docs/provider.md item 1.
// A child started without the SKULK_* environment, or with a protocol it
// does not speak, says so in one line and exits 2.
func testStartWithoutHost(t *testing.T) {
	for _, tc := range []struct{ name, key, value string }{
		{"no_control_fd", "SKULK_CONTROL_FD", ""},
		{"no_streams_fd", "SKULK_STREAMS_FD", ""},
		{"no_protocol", "SKULK_PROTOCOL", ""},
		{"protocol_2", "SKULK_PROTOCOL", "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startProcess(t, processOptions{env: map[string]string{tc.key: tc.value}})
			expectStartFailed(t, c, wait)
		})
	}
}

// Contract: docs/protocol.md §2 (Numbers) and §3 startup (ingress_queue).
// The field startup.protocol is read in any integer encoding (here
// uint64), and ingress_queue is ignored.
func testStartupEncodings(t *testing.T) {
	c, _ := readHello(t, nil)
	hdr := rawMap(mstr("t"), mstr("startup"),
		mstr("protocol"), []byte{0xcf, 0, 0, 0, 0, 0, 0, 0, 1},
		mstr("child_id"), mstr(childID),
		mstr("ingress_queue"), []byte{0x02})
	c.ctl.sendRaw(rawPacket(hdr, nil))
	c.ping(1)
	s := c.dial(t)
	runProbe(t, s, "after-startup")
}
