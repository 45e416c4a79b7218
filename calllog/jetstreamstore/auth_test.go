package jetstreamstore_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/skulkrt/skulk/calllog/calllogtest"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/internal/natstest"
)

// Servers that require credentials: the store reaches each with the files
// its URL names (or with Options.Connect), keeps and reads a tree, and is
// refused without them.
func TestCredentials(t *testing.T) {
	seed, nkeyAuth := natstest.Nkey(t)
	creds, credsAuth := natstest.Creds(t)
	tlsFiles, tlsAuth := natstest.TLS(t)
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return "?" + v.Encode()
	}
	for _, tc := range []struct {
		name    string
		set     func(*server.Options)
		scheme  string
		params  string
		connect []nats.Option
	}{
		{"nkey", nkeyAuth, "nats", q("nkey", seed), nil},
		{"creds", credsAuth, "nats", q("creds", creds), nil},
		{"tls", tlsAuth, "tls", q("tls_ca", tlsFiles.CA, "tls_cert", tlsFiles.Cert, "tls_key", tlsFiles.Key), nil},
		{"user in Options.Connect", natstest.UserPassword("skulk", "pw-42"), "nats", "", []nats.Option{nats.UserInfo("skulk", "pw-42")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv := natstest.Run(t, tc.set)
			base := tc.scheme + "://" + srv.Addr() + "/CALLS"
			// Without credentials (for TLS: the CA, so the server is
			// trusted, but no client certificate) the server refuses.
			bare := base
			if tc.scheme == "tls" {
				bare += q("tls_ca", tlsFiles.CA)
			}
			if st, err := jetstreamstore.Open(ctx, bare, jetstreamstore.Options{}); err == nil {
				st.Close()
				require.FailNow(t, "a store with no credentials was let in")
			}
			st, err := jetstreamstore.Open(ctx, base+tc.params, jetstreamstore.Options{Connect: tc.connect})
			require.NoError(t, err)
			defer st.Close()
			c, err := st.KeepNew(ctx, "t", "w", calllogtest.Events("t", "w", 1, 3))
			require.Falsef(t, err != nil || c.Epoch != 1, "KeepNew = %+v, %v", c, err)
			got, err := st.EventsAfter(ctx, "t", 0, 0)
			require.Falsef(t, err != nil || len(got) != 3, "%d events read, %v", len(got), err)
		})
	}
}
