package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/host"
)

func TestParseMCP(t *testing.T) {
	o, err := parseMCP([]string{"serve", "--http", "127.0.0.1:0", "--timeout", "2s", "--pool", "2", "--sse-poll", "30s", "--", "./p", "-x"})
	require.NoError(t, err)
	assert.Falsef(t, o.http != "127.0.0.1:0" || o.timeout != 2*time.Second || o.pool != 2 || len(o.child) != 2 || o.child[1] != "-x", "parsed %+v", o)
	assert.Equal(t, 30*time.Second, o.ssePoll)
	for _, args := range [][]string{
		{"--", "./p"},                   // no subcommand
		{"run", "--", "./p"},            // unknown subcommand
		{"serve", "extra", "--", "./p"}, // stray argument
		{"serve"},                       // no child
		{"serve", "--timeout", "-1s", "--", "./p"},
		{"serve", "--inline-max", "-1", "--", "./p"},
		{"serve", "--pool", "0", "--", "./p"},
		{"serve", "--sse-poll", "1s", "--", "./p"}, // without --http
		{"serve", "--http", "127.0.0.1:0", "--sse-poll", "-1s", "--", "./p"},
		{"serve", "--http", "127.0.0.1:0", "--sse-poll", "500us", "--", "./p"}, // under the retry field's millisecond
	} {
		if _, err := parseMCP(args); statusOf(err) != ExitUsage {
			assert.Fail(t, fmt.Sprintf("parseMCP(%q) = %v, want a usage error", args, err))
		}
	}
}

// TestMcpGatewayFlags: --child and --config give the gateway's children,
// --child's first; each refusal is a usage error naming the field, never
// quoting the file.
func TestMcpGatewayFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	good := write("good.json", `{"children": [
		{"name": "files", "command": "./skulk-mcp", "args": ["--", "./server", "a b"], "env": ["GW_TOKEN", "GW_UNSET", "A=1"], "pool": 2,
		 "restart": {"max_restarts": 3, "window": "30s", "backoff_min": "50ms", "backoff_max": "2s", "retry_min": "1s", "retry_max": "10s"}}]}`)
	o, err := parseMCP([]string{"serve", "--child", "tools=./skulk-child -x", "--config", good})
	require.NoError(t, err)
	require.Len(t, o.children, 2)
	assert.Equal(t, gatewayChild{Name: "tools", Command: "./skulk-child", Args: []string{"-x"}}, o.children[0])
	files := o.children[1]
	assert.Equal(t, "files", files.Name)
	assert.Equal(t, []string{"--", "./server", "a b"}, files.Args)
	// The child's env adds to the default environment (a nil Env), as
	// --env does: GW_TOKEN with the host's value, GW_UNSET skipped (the
	// host has none), A as given.
	t.Setenv("GW_TOKEN", "t0k")
	t.Setenv("GW_UNSET", "") // restored after the test
	require.NoError(t, os.Unsetenv("GW_UNSET"))
	cfg := childConfig(host.Config{ExtraEnv: []string{"G=1"}, PoolSize: 1}, files)
	assert.Equal(t, "./skulk-mcp", cfg.Command)
	assert.Nil(t, cfg.Env, "a child's env replaced the default list")
	assert.Equal(t, []string{"G=1", "GW_TOKEN=t0k", "A=1"}, cfg.ExtraEnv)
	assert.Equal(t, 2, cfg.PoolSize)
	assert.Equal(t, host.RestartPolicy{MaxRestarts: 3, Window: 30 * time.Second, BackoffMin: 50 * time.Millisecond, BackoffMax: 2 * time.Second}, cfg.Restart)
	assert.Equal(t, jsonDuration(time.Second), files.Restart.RetryMin)

	secret := "s3cret-value"
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"mixed":      {[]string{"serve", "--child", "a=./p", "--", "./q"}, "not both"},
		"bad name":   {[]string{"serve", "--child", "a/b=./p"}, "letters, digits"},
		"taken name": {[]string{"serve", "--child", "a=./p", "--child", "a=./q"}, "taken"},
		"no command": {[]string{"serve", "--child", "a="}, "NAME=COMMAND"},
		"no file":    {[]string{"serve", "--config", filepath.Join(dir, "none.json")}, "cannot open"},
		"unknown":    {[]string{"serve", "--config", write("u.json", `{"children": [{"name": "a", "command": "x", "secret": "`+secret+`"}]}`)}, "not in the format"},
		"type":       {[]string{"serve", "--config", write("t.json", `{"children": [{"name": "a", "command": "x", "pool": "`+secret+`"}]}`)}, "children.pool"},
		"syntax":     {[]string{"serve", "--config", write("s.json", `{"children": [`+secret)}, "invalid JSON at byte"},
		"duration":   {[]string{"serve", "--config", write("d.json", `{"children": [{"name": "a", "command": "x", "restart": {"window": "`+secret+`"}}]}`)}, "duration"},
		"no name":    {[]string{"serve", "--config", write("n.json", `{"children": [{"command": "x"}]}`)}, "children[0].name"},
		"no cmd":     {[]string{"serve", "--config", write("c.json", `{"children": [{"name": "a"}]}`)}, "children[0].command"},
		"pool":       {[]string{"serve", "--config", write("p.json", `{"children": [{"name": "a", "command": "x", "pool": -1}]}`)}, "children[0].pool"},
		"retry":      {[]string{"serve", "--config", write("r.json", `{"children": [{"name": "a", "command": "x", "restart": {"retry_min": "2s", "retry_max": "1s"}}]}`)}, "retry_max"},
		"env":        {[]string{"serve", "--config", write("e.json", `{"children": [{"name": "a", "command": "x", "env": ["=`+secret+`"]}]}`)}, "children[0].env"},
		"big":        {[]string{"serve", "--config", write("b.json", `{"children": [`+strings.Repeat(" ", maxGatewayConfig)+`]}`)}, "over"},
	} {
		_, err := parseMCP(c.args)
		if assert.Error(t, err, name) {
			assert.Equal(t, ExitUsage, statusOf(err), name)
			assert.Contains(t, err.Error(), c.want, name)
			assert.NotContains(t, err.Error(), secret, name)
		}
	}
}
