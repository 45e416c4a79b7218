package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/internal/natstest"
)

// The crash test on a JetStream journal: the host process, the process
// that takes the tree over and the follower each have their own
// connection to a real nats-server running in the test process.
func TestNATSJournalCrashTakeover(t *testing.T) {
	t.Parallel()
	srv := natstest.Run(t)
	url := srv.URL() + "/CALLS"
	crashTakeover(t, url, func(t *testing.T, readOnly bool) calllog.EventStore {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := jetstreamstore.Open(ctx, url, jetstreamstore.Options{ReadOnly: readOnly})
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		return st
	})
}

// call, replay, follow and asif export on a nats:// journal; a URL with a
// password is refused without echoing it.
func TestNATSJournalReplayFollowExport(t *testing.T) {
	t.Parallel()
	url := natstest.Run(t).URL() + "/CALLS"
	tree := callTree(t, url, 3)
	rp := run(t, "", "replay", url, tree)
	require.Falsef(t, rp.Status != 0 || !strings.Contains(rp.Stdout, "call "+tree+" count") || !strings.Contains(rp.Stdout, `done: {"n":3}`), "replay: %d %q %q", rp.Status, rp.Stdout, rp.Stderr)
	fl := run(t, "", "follow", url, tree)
	require.Falsef(t, fl.Status != 0 || strings.Count(fl.Stdout, `"kind":"output"`) != 3 || !strings.Contains(fl.Stdout, `"kind":"done"`), "follow: %d %q %q", fl.Status, fl.Stdout, fl.Stderr)
	ex := run(t, "", "asif", "export", url, tree)
	require.Falsef(t, ex.Status != 0 || !strings.Contains(ex.Stdout, `"asif_version"`), "asif export: %d %q", ex.Status, ex.Stderr)
	bad := strings.Replace(url, "nats://", "nats://me:hunter2@", 1)
	if r := run(t, "", "replay", bad, tree); r.Status != 1 || strings.Contains(r.Stderr, "hunter2") || !strings.Contains(r.Stderr, "creds") {
		require.FailNow(t, fmt.Sprintf("a URL with a password: %d %q", r.Status, r.Stderr))
	}
	if r := run(t, "", "replay", natstest.Run(t).URL()+"/NONE", tree); r.Status != 1 || !strings.Contains(r.Stderr, "no such stream") {
		require.FailNow(t, fmt.Sprintf("replay of a missing stream: %d %q", r.Status, r.Stderr))
	}
}

// call and replay on servers that require credentials, each source the
// CLI reads: the NATS_* environment variables and the URL's parameters
// naming files. Without them (or with a wrong password) the command fails
// with status 1 and prints no secret.
//
// It runs alone (not t.Parallel): it sets this process's environment.
func TestNATSJournalCredentials(t *testing.T) {
	seed, nkeyAuth := natstest.Nkey(t)
	creds, credsAuth := natstest.Creds(t)
	tlsFiles, tlsAuth := natstest.TLS(t)
	for _, tc := range []struct {
		name   string
		set    func(*server.Options)
		scheme string
		params string
		env    map[string]string
	}{
		{"NATS_NKEY", nkeyAuth, "nats", "", map[string]string{"NATS_NKEY": seed}},
		{"NATS_CREDS", credsAuth, "nats", "", map[string]string{"NATS_CREDS": creds}},
		{"NATS_CERT", tlsAuth, "tls", "", map[string]string{"NATS_CERT": tlsFiles.Cert, "NATS_KEY": tlsFiles.Key, "NATS_CA": tlsFiles.CA}},
		{"NATS_USER", natstest.UserPassword("skulk", "pw-secret-42"), "nats", "", map[string]string{"NATS_USER": "skulk", "NATS_PASSWORD": "pw-secret-42"}},
		{"creds=", credsAuth, "nats", "?creds=" + url.QueryEscape(creds), nil},
		{"tls_cert=", tlsAuth, "tls", "?" + url.Values{"tls_ca": {tlsFiles.CA}, "tls_cert": {tlsFiles.Cert}, "tls_key": {tlsFiles.Key}}.Encode(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range []string{"NATS_CREDS", "NATS_NKEY", "NATS_CERT", "NATS_KEY", "NATS_CA", "NATS_USER", "NATS_PASSWORD"} {
				t.Setenv(v, "")
			}
			srv := natstest.Run(t, tc.set)
			journal := tc.scheme + "://" + srv.Addr() + "/CALLS" + tc.params
			bare := tc.scheme + "://" + srv.Addr() + "/CALLS"
			if tc.params == "" { // credentials from the environment only
				if r := run(t, "", "call", "--journal", journal, "count", "--args", `{"n":2}`, "--", childBin); r.Status != 1 ||
					!strings.Contains(r.Stderr, "cannot open the journal") {
					require.FailNow(t, fmt.Sprintf("call with no credentials: %d %q", r.Status, r.Stderr))
				}
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			tree := callTree(t, journal, 2)
			rp := run(t, "", "replay", journal, tree)
			require.Falsef(t, rp.Status != 0 || !strings.Contains(rp.Stdout, `done: {"n":2}`), "replay: %d %q %q", rp.Status, rp.Stdout, rp.Stderr)
			if tc.params != "" { // the URL's files, not the environment, let it in
				if r := run(t, "", "replay", bare, tree); r.Status != 1 {
					require.FailNow(t, fmt.Sprintf("replay without the URL's credentials: %d %q", r.Status, r.Stderr))
				}
			}
			if tc.name == "NATS_USER" {
				t.Setenv("NATS_PASSWORD", "wrong-secret-77")
				if r := run(t, "", "replay", journal, tree); r.Status != 1 || strings.Contains(r.Stderr, "secret") {
					require.FailNow(t, fmt.Sprintf("replay with a wrong password: %d %q", r.Status, r.Stderr))
				}
			}
		})
	}
}
