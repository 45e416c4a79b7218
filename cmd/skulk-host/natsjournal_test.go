package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/internal/natstest"
)

// The crash test on a JetStream journal: the host process, the process
// that takes the tree over and the follower each have their own
// connection to a real nats-server running in the test process.
func TestNATSJournalCrashTakeover(t *testing.T) {
	srv := natstest.Run(t)
	url := srv.URL() + "/CALLS"
	crashTakeover(t, url, func(t *testing.T, readOnly bool) calllog.EventStore {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := jetstreamstore.Open(ctx, url, jetstreamstore.Options{ReadOnly: readOnly})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	})
}

// call, replay, follow and asif export on a nats:// journal; a URL with a
// password is refused without echoing it.
func TestNATSJournalReplayFollowExport(t *testing.T) {
	url := natstest.Run(t).URL() + "/CALLS"
	r := run(t, "", "call", "--journal", url, "count", "--args", `{"n":3}`, "--", childBin)
	if r.status != 0 {
		t.Fatalf("call: %d %q", r.status, r.stderr)
	}
	_, rest, _ := strings.Cut(r.stderr, "journal: tree ")
	tree, _, _ := strings.Cut(rest, " ")
	rp := run(t, "", "replay", url, tree)
	if rp.status != 0 || !strings.Contains(rp.stdout, "call "+tree+" count") || !strings.Contains(rp.stdout, `done: {"n":3}`) {
		t.Fatalf("replay: %d %q %q", rp.status, rp.stdout, rp.stderr)
	}
	fl := run(t, "", "follow", url)
	if fl.status != 0 || strings.Count(fl.stdout, `"kind":"output"`) != 3 || !strings.Contains(fl.stdout, `"kind":"done"`) {
		t.Fatalf("follow: %d %q %q", fl.status, fl.stdout, fl.stderr)
	}
	ex := run(t, "", "asif", "export", url, tree)
	if ex.status != 0 || !strings.Contains(ex.stdout, `"asif_version"`) {
		t.Fatalf("asif export: %d %q", ex.status, ex.stderr)
	}
	bad := strings.Replace(url, "nats://", "nats://me:hunter2@", 1)
	if r := run(t, "", "replay", bad, tree); r.status != 1 || strings.Contains(r.stderr, "hunter2") || !strings.Contains(r.stderr, "creds") {
		t.Fatalf("a URL with a password: %d %q", r.status, r.stderr)
	}
	if r := run(t, "", "replay", natstest.Run(t).URL()+"/NONE", tree); r.status != 1 || !strings.Contains(r.stderr, "no such stream") {
		t.Fatalf("replay of a missing stream: %d %q", r.status, r.stderr)
	}
}
