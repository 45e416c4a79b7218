package host

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/frame"
)

// BenchmarkCallJournal measures one small real call (count n=1 against
// cmd/skulk-child) without a journal and with a required SQLite journal
// (full content, as skulk-host call --journal), in the same run: the
// difference is the journal's start and end barriers.
//
//	go test -run '^$' -bench CallJournal -benchtime 2s ./host/
func BenchmarkCallJournal(b *testing.B) {
	args := frame.MustPayload(map[string]any{"n": 1})
	run := func(b *testing.B, opts calllog.Options) {
		cfg := realConfig()
		cfg.TempDir = b.TempDir()
		cfg.CallLog = opts
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h, err := Start(ctx, cfg)
		require.NoError(b, err)
		defer h.Close(context.Background())
		b.ResetTimer()
		for b.Loop() {
			c, err := h.Call(context.Background(), "count", args)
			require.NoError(b, err)
			if _, err := c.Wait(); err != nil {
				require.FailNow(b, fmt.Sprint(err))
			}
		}
	}
	b.Run("none", func(b *testing.B) { run(b, calllog.Options{}) })
	b.Run("required-sqlite", func(b *testing.B) {
		st, err := sqlitestore.Open(filepath.Join(b.TempDir(), "calls.db"))
		require.NoError(b, err)
		defer st.Close()
		run(b, calllog.Options{FullContent: true, Journal: &calllog.Journal{Store: st, Required: true}})
	})
}
