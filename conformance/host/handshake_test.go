package hostconf

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartFails runs children whose start must fail: exit status 3, nothing
// on standard output (docs/cli.md), no call sent, and the child stopped —
// these children do not exit by themselves when their control connection
// ends, so the host must stop them (docs/protocol.md §5 item 2: "fails
// the start with a clear error and stops the child").
func TestStartFails(t *testing.T) {
	t.Parallel()
	cases := []string{
		"exit_before_hello",          // docs/operations.md "Starting": the child exits before its hello
		"hello_unsupported_versions", // §5 item 2: no version the host speaks
		"hello_no_versions",          // §5 item 2; §2 "Optional keys" (absent = empty)
		"hello_max_streams_zero",     // §3 max_streams ≥ 1; a bad control field is a protocol error (§3)
		"hello_bad_schema",           // §3 schemas are JSON Schemas; docs/operations.md "Starting"
	}
	for _, mode := range cases {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			res := runCall(t, mode, "t")
			checkRefused(t, res, 3)
		})
	}
}

// TestStartTimeout checks docs/operations.md "Starting" (StartTimeout): the start fails
// when no hello arrives within 10 s — not much before, and not much after.
func TestStartTimeout(t *testing.T) {
	t.Parallel()
	res := runCall(t, "no_hello", "t")
	checkRefused(t, res, 3)
	took := res.exitAt.Sub(res.start)
	assert.Falsef(t, took < startTimeout-500*time.Millisecond || took > startTimeout+margin, "the start failed after %v, want about %v", took, startTimeout)
}

// TestStartupPacket checks the startup the host answers a hello with
// (docs/protocol.md §3 startup; §2 Limits: startup carries the effective
// limits, the smaller of each pair; §5 item 4 and docs/operations.md
// "Health" for the defaults).
func TestStartupPacket(t *testing.T) {
	t.Parallel()
	defaults := map[string]int64{"max_header": 65536, "max_attachment": 16777216}
	cases := []struct {
		mode     string
		protocol int64
		limits   map[string]int64
	}{
		{"ok", 1, defaults},                  // §3: version 1, defaults on both sides
		{"hello_many_versions", 1, defaults}, // §3: the host chooses 1 out of [7, 1, 3]
		{"hello_small_limits", 1, map[string]int64{"max_header": 1000, "max_attachment": 5000}}, // §2: the child's smaller limits
		{"hello_big_limits", 1, defaults}, // §2: the host's smaller limits
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			res := runCall(t, tc.mode, "t")
			res.expect(t, outcome{rc: 0, frames: 4, kind: "completed"})
			su, ok := res.first(t, "startup", nil)
			if !ok {
				return
			}
			p, _ := su.F["packet"].(map[string]any)
			lim, _ := p["limits"].(map[string]any)
			got := map[string]int64{"max_header": numOf(lim["max_header"]), "max_attachment": numOf(lim["max_attachment"])}
			if numOf(p["protocol"]) != tc.protocol || !reflect.DeepEqual(got, tc.limits) {
				assert.Fail(t, fmt.Sprintf("startup protocol %v limits %v, want %d %v", p["protocol"], got, tc.protocol, tc.limits))
			}
			if p["child_id"] != su.Child || su.Child == "" {
				assert.Fail(t, fmt.Sprintf("startup child_id %v, SKULK_CHILD_ID %q: want the same id", p["child_id"], su.Child))
			}
			// §5 item 4: health_interval_ms 1000 by default; §3 cancel_grace_ms default 1000, ingress_queue always 8.
			if numOf(p["health_interval_ms"]) != 1000 || numOf(p["ingress_queue"]) != 8 {
				assert.Fail(t, fmt.Sprintf("startup health_interval_ms %v ingress_queue %v, want 1000 and 8", p["health_interval_ms"], p["ingress_queue"]))
			}
			if g, ok := p["cancel_grace_ms"]; ok && numOf(g) != 1000 {
				assert.Fail(t, fmt.Sprintf("startup cancel_grace_ms %v, want 1000 (or absent)", g))
			}
		})
	}
}

// TestChildSetup checks how the host starts a child (docs/protocol.md §1): fd 3
// a connected AF_UNIX stream socket, fd 4 a listening one at
// <dir>/streams.sock with <dir> of mode 0700 (under TMPDIR:
// docs/operations.md "Starting"), stdin /dev/null, no other descriptor, and
// an environment of the SKULK_ variables plus only what the configuration
// passes (docs/cli.md --env: the listed host variables, --env NAME,
// --env NAME=VALUE).
func TestChildSetup(t *testing.T) {
	t.Parallel()
	r := start(t, "ok", opts{
		minimalEnv: true,
		env:        []string{"SECRETVAR=not-for-the-child", "PASSME=from-host", "LANG=C.UTF-8"},
	}, "call", "t", "--json", "--env", "PASSME", "--env", "FOO=bar")
	res := r.wait()
	res.expect(t, outcome{rc: 0, frames: 4, kind: "completed"})
	st, ok := res.first(t, "start", nil)
	if !ok {
		return
	}
	env := map[string]string{}
	for _, kv := range st.F["env"].([]any) {
		k, v, _ := strings.Cut(kv.(string), "=")
		env[k] = v
	}
	want := map[string]string{
		"SKULK_PROTOCOL": "1", "SKULK_CONTROL_FD": "3", "SKULK_STREAMS_FD": "4", "SKULK_CHILD_ID": st.Child,
		"PASSME": "from-host", "FOO": "bar",
	}
	for k, v := range want {
		if env[k] != v {
			assert.Fail(t, fmt.Sprintf("child env %s=%q, want %q", k, env[k], v))
		}
	}
	allowed := []string{"PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"}
	for k := range env {
		if _, ok := want[k]; !ok && !slices.Contains(allowed, k) {
			assert.Fail(t, fmt.Sprintf("child env has %s, which the host should not pass through", k))
		}
	}

	fds := map[int]map[string]any{}
	for _, f := range st.F["fds"].([]any) {
		m := f.(map[string]any)
		fds[int(numOf(m["fd"]))] = m
	}
	var nums []int
	for fd := range fds {
		nums = append(nums, fd)
	}
	slices.Sort(nums)
	assert.Falsef(t, !slices.Equal(nums, []int{0, 1, 2, 3, 4}), "child started with descriptors %v, want exactly 0..4", nums)
	if fds[0]["dev_null"] != true {
		assert.Fail(t, fmt.Sprintf("fd 0 is %v, want /dev/null", fds[0]["target"]))
	}
	unixStream := func(m map[string]any) bool { return numOf(m["type"]) == 1 && numOf(m["domain"]) == 1 }
	if c := fds[3]; c == nil || !unixStream(c) || c["connected"] != true || c["listening"] == true {
		assert.Fail(t, fmt.Sprintf("fd 3 is %v, want a connected AF_UNIX stream socket", c))
	}
	l := fds[4]
	if l == nil || !unixStream(l) || l["listening"] != true {
		assert.Fail(t, fmt.Sprintf("fd 4 is %v, want a listening AF_UNIX stream socket", l))
		return
	}
	name, _ := l["name"].(string)
	if filepath.Base(name) != "streams.sock" || l["dir_mode"] != "700" || filepath.Dir(filepath.Dir(name)) != r.tmpDir {
		assert.Fail(t, fmt.Sprintf("fd 4 bound at %q in a dir of mode %v, want %s/<fresh dir of mode 0700>/streams.sock", name, l["dir_mode"], r.tmpDir))
	}
}

// TestChildOutputForwarded checks docs/protocol.md §1 "the host forwards them
// line by line tagged with the child's id and pid" (§7 "Child output"), as
// skulk-host does it (docs/architecture.md, Host: records msg="child
// output" with child, pid, stream and line on standard error; lines over
// 4 KiB are split, docs/operations.md "Starting").
func TestChildOutputForwarded(t *testing.T) {
	t.Parallel()
	res := runCall(t, "logs", "t")
	res.expect(t, outcome{rc: 0, frames: 4, kind: "completed"})
	st, ok := res.first(t, "start", nil)
	if !ok {
		return
	}
	var out, errs []string
	for _, rec := range strings.Split(res.stderr, "\n") {
		kv := logfmt(rec)
		if kv["msg"] != "child output" {
			continue
		}
		if kv["child"] != st.Child || kv["pid"] != strconv.Itoa(st.PID) {
			assert.Fail(t, fmt.Sprintf("forwarded record tagged child=%q pid=%q, want %q and %d: %s", kv["child"], kv["pid"], st.Child, st.PID, rec))
		}
		switch kv["stream"] {
		case "stdout":
			out = append(out, kv["line"])
		case "stderr":
			errs = append(errs, kv["line"])
		default:
			assert.Fail(t, fmt.Sprintf("forwarded record with stream=%q: %s", kv["stream"], rec))
		}
	}
	for _, want := range []string{"fakechild started: stdout", "line-b", "after-empty"} {
		assert.Falsef(t, !slices.Contains(out, want), "stdout line %q was not forwarded as one record; got %q", want, out)
	}
	assert.Falsef(t, !slices.ContainsFunc(out, func(s string) bool { return strings.TrimSuffix(s, "\r") == "line-a" }), "stdout line %q was not forwarded; got %q", "line-a", out)
	for _, want := range []string{"fakechild started: stderr", "stderr-only-line"} {
		assert.Falsef(t, !slices.Contains(errs, want), "stderr line %q was not forwarded; got %q", want, errs)
	}
	var long strings.Builder
	for _, s := range out {
		if s != "" && strings.Trim(s, "L") == "" {
			long.WriteString(s)
		}
	}
	if long.Len() != 10000 {
		assert.Fail(t, fmt.Sprintf("the 10,000-byte line came through as %d bytes of records", long.Len()))
	}
}

// TestToolsCommand checks `skulk-host tools --json`: the descriptors of the
// child's hello as one JSON array with the protocol's keys (docs/cli.md
// "tools"; docs/protocol.md §3 tool descriptor).
func TestToolsCommand(t *testing.T) {
	t.Parallel()
	res := start(t, "ok", opts{}, "tools", "--json").wait()
	require.EqualValuesf(t, 0, res.rc, "exit status %d, want 0", res.rc)
	var printed []map[string]any
	if err := json.Unmarshal([]byte(linesText(res)), &printed); err != nil {
		require.FailNow(t, fmt.Sprintf("tools --json output is not one JSON array: %v\n%s", err, linesText(res)))
	}
	hello, ok := res.first(t, "hello", nil)
	if !ok {
		return
	}
	declared := normalize(t, hello.F["packet"].(map[string]any)["tools"])
	if len(printed) != len(declared.([]any)) {
		require.FailNow(t, fmt.Sprintf("tools --json printed %d tools, the hello declared %d", len(printed), len(declared.([]any))))
	}
	for i, d := range declared.([]any) {
		want := d.(map[string]any)
		got := printed[i]
		for k, v := range want {
			if !reflect.DeepEqual(normalize(t, got[k]), v) {
				assert.Fail(t, fmt.Sprintf("tool %v: %s = %v, want %v", want["id"], k, got[k], v))
			}
		}
		for k, v := range got {
			if _, ok := want[k]; !ok && v != nil && v != "" {
				assert.Fail(t, fmt.Sprintf("tool %v: %s = %v printed, not in the hello", want["id"], k, v))
			}
		}
	}
}

// TestToolsCommandBadChild checks that `tools` fails the start like `call`
// does (docs/cli.md exit status 3; docs/protocol.md §5 item 2).
func TestToolsCommandBadChild(t *testing.T) {
	t.Parallel()
	res := start(t, "hello_unsupported_versions", opts{}, "tools", "--json").wait()
	assert.Falsef(t, res.rc != 3 || len(res.lines) != 0, "exit status %d with %d lines of output, want 3 and none", res.rc, len(res.lines))
}

// checkRefused checks a run that must end before any call reached the
// child: the exit status, empty standard output (docs/cli.md --json: "then
// standard output is empty"), and no invoke at the child (docs/protocol.md
// §7 "Refused calls": "no stream connection is taken, no `started` is given").
func checkRefused(t *testing.T, res *result, rc int) {
	t.Helper()
	assert.Falsef(t, res.rc != rc, "exit status %d, want %d", res.rc, rc)
	assert.EqualValuesf(t, 0, len(res.lines), "standard output has %d lines, want none", len(res.lines))
	if inv := res.find("invoke", nil); len(inv) > 0 {
		assert.Fail(t, fmt.Sprintf("the child got an invoke: %v", inv[0].F))
	}
	if t.Failed() {
		res.dump(t)
	}
}

// normalize round-trips v through JSON so that values compare by content.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// logfmt parses one slog text record into its keys and values.
func logfmt(rec string) map[string]string {
	kv := map[string]string{}
	for s := strings.TrimSpace(rec); s != ""; s = strings.TrimLeft(s, " ") {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			break
		}
		key, rest := s[:eq], s[eq+1:]
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				break
			}
			kv[key], _ = strconv.Unquote(q)
			s = rest[len(q):]
			continue
		}
		end := strings.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		kv[key] = rest[:end]
		s = rest[end:]
	}
	return kv
}
