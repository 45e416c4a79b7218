package hostconf

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCallsThroughHost checks §8 (calls a child makes through its host):
// without --offer, startup carries no calls map; with --offer count, it
// names a call socket and offers count alone, a call of another tool is
// refused with failed invalid_frame and end on a connection that then
// carries a call of count, whose chunks and completed arrive, and the
// outer call completes.
func TestCallsThroughHost(t *testing.T) {
	t.Parallel()
	t.Run("not offered", func(t *testing.T) {
		t.Parallel()
		res := runCall(t, "calls_probe", "t")
		if res.rc != 0 {
			res.dump(t)
			require.FailNow(t, fmt.Sprintf("exit %d", res.rc))
		}
		st, ok := res.first(t, "startup", nil)
		if !ok {
			return
		}
		if p, _ := st.F["packet"].(map[string]any); p == nil || p["calls"] != nil {
			assert.Fail(t, fmt.Sprintf("startup without --offer: calls = %v, want none", p["calls"]))
		}
		if n := res.find("nested", func(e event) bool { return !e.flag("offered") }); len(n) != 1 {
			res.dump(t)
			require.FailNow(t, fmt.Sprintf("the child saw an offer it was not given"))
		}
	})
	t.Run("offered", func(t *testing.T) {
		t.Parallel()
		res := runCall(t, "calls_probe", "t", "--offer", "count")
		if res.rc != 0 {
			res.dump(t)
			require.FailNow(t, fmt.Sprintf("exit %d", res.rc))
		}
		st, ok := res.first(t, "startup", nil)
		if !ok {
			return
		}
		p, _ := st.F["packet"].(map[string]any)
		calls, _ := p["calls"].(map[string]any)
		require.Falsef(t, calls == nil, "startup with --offer count has no calls map: %v", p)
		if s, _ := calls["socket"].(string); s == "" {
			assert.Fail(t, fmt.Sprintf("calls.socket = %v", calls["socket"]))
		}
		tools, _ := calls["tools"].([]any)
		assert.Falsef(t, len(tools) != 1 || tools[0].(map[string]any)["id"] != "count", "calls.tools = %v, want count alone", tools)
		nested := res.find("nested", nil)
		if len(nested) != 2 {
			res.dump(t)
			require.FailNow(t, fmt.Sprintf("%d nested answers, want 2", len(nested)))
		}
		nope, count := nested[0], nested[1]
		assert.Falsef(t, nope.str("kind") != "failed" || nope.str("code") != "invalid_frame" || !nope.flag("end") || nope.num("chunks") != 0, "a tool not offered: %v, want failed invalid_frame, no chunk, then end", nope.F)
		assert.Falsef(t, count.str("kind") != "completed" || !count.flag("end") || count.num("chunks") != 2, "count through the host: %v, want 2 chunks, completed, end", count.F)
		checkStream(t, res.frames)
	})
}
