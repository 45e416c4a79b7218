package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/skulkrt/skulk/host"
)

// gatewayChild is one child of mcp serve: from --child, from --config, or
// the lone child after --. Its JSON form is --config's (docs/mcp.md,
// "One gateway, many servers").
type gatewayChild struct {
	Name    string         `json:"name"`
	Command string         `json:"command"`
	Args    []string       `json:"args"`
	Env     []string       `json:"env"`  // NAME (passed on) or NAME=VALUE, beside --env's
	Pool    int            `json:"pool"` // 0: --pool's
	Restart *restartConfig `json:"restart"`

	env envFlag // Env, parsed as the config is read
}

// restartConfig is a child's restart policy (host.RestartPolicy) and its
// crash-loop retry (mcpbridge.Child's RetryMin, RetryMax); zero fields
// take their defaults.
type restartConfig struct {
	MaxRestarts int          `json:"max_restarts"`
	Window      jsonDuration `json:"window"`
	BackoffMin  jsonDuration `json:"backoff_min"`
	BackoffMax  jsonDuration `json:"backoff_max"`
	RetryMin    jsonDuration `json:"retry_min"`
	RetryMax    jsonDuration `json:"retry_max"`
}

// jsonDuration is a duration written as Go writes one ("100ms", "1m").
type jsonDuration time.Duration

// errDuration: a restart field that is not a duration string.
var errDuration = errors.New("a restart duration (window, backoff_min, backoff_max, retry_min, retry_max) is not a duration string such as \"500ms\", or is negative")

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errDuration
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return errDuration
	}
	*d = jsonDuration(v)
	return nil
}

// gatewayConfig is the file of --config.
type gatewayConfig struct {
	Children []gatewayChild `json:"children"`
}

// maxGatewayConfig bounds --config's file.
const maxGatewayConfig = 1 << 20

// maxGatewayChildren bounds the children of one mcp serve.
const maxGatewayChildren = 64

// childFlag is --child NAME=COMMAND [ARG]...: repeated, one child each.
type childFlag []gatewayChild

func (c *childFlag) String() string { return "" }

func (c *childFlag) Set(v string) error {
	name, cmdline, ok := strings.Cut(v, "=")
	argv := strings.Fields(cmdline)
	if !ok || name == "" || len(argv) == 0 {
		return errors.New("want NAME=COMMAND [ARG]...")
	}
	*c = append(*c, gatewayChild{Name: name, Command: argv[0], Args: argv[1:]})
	return nil
}

// readGatewayConfig reads --config's file: JSON, no unknown field, every
// child with a name and a command.
func readGatewayConfig(path string) ([]gatewayChild, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErr("--config: cannot open the file: %v", errors.Unwrap(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxGatewayConfig+1))
	if err != nil {
		return nil, usageErr("--config: cannot read the file: %v", err)
	}
	if len(b) > maxGatewayConfig {
		return nil, usageErr("--config: the file is over %d bytes", maxGatewayConfig)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var cfg gatewayConfig
	if err := dec.Decode(&cfg); err != nil {
		var ue *json.UnmarshalTypeError
		switch {
		case errors.As(err, &ue):
			return nil, usageErr("--config: field %s has the wrong type (%s)", ue.Field, ue.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return nil, usageErr("--config: a field not in the format (docs/mcp.md lists them)")
		}
		return nil, usageErr("--config: not the JSON of the format: %v", describeJSONErr(err))
	}
	for i, c := range cfg.Children {
		switch {
		case c.Name == "":
			return nil, usageErr("--config: children[%d].name is missing", i)
		case c.Command == "":
			return nil, usageErr("--config: children[%d].command is missing", i)
		case c.Pool < 0:
			return nil, usageErr("--config: children[%d].pool must not be negative", i)
		}
		for _, e := range c.Env {
			if err := cfg.Children[i].env.Set(e); err != nil {
				return nil, usageErr("--config: children[%d].env: %v", i, err)
			}
		}
		if r := c.Restart; r != nil && r.RetryMax != 0 && r.RetryMax < r.RetryMin {
			return nil, usageErr("--config: children[%d].restart.retry_max is below retry_min", i)
		}
	}
	return cfg.Children, nil
}

// describeJSONErr names what is wrong with a JSON document without
// quoting it: a syntax error's offset, or the decoder's message for a
// duration's.
func describeJSONErr(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	}
	if errors.Is(err, errDuration) {
		return errDuration.Error()
	}
	return "not a JSON object"
}

// checkGatewayChildren refuses children whose names are unusable: the
// gateway's names are NAME/TOOL.
func checkGatewayChildren(children []gatewayChild) error {
	if len(children) > maxGatewayChildren {
		return usageErr("at most %d children", maxGatewayChildren)
	}
	seen := map[string]bool{}
	for i, c := range children {
		if !validChildName(c.Name) {
			return usageErr("child %d: the name must be 1 to 64 letters, digits, '_' or '-'", i)
		}
		if seen[c.Name] {
			return usageErr("child %d: the name is taken by an earlier child", i)
		}
		seen[c.Name] = true
	}
	return nil
}

func validChildName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// childConfig is the host config of one gateway child: base (the global
// flags, the journal, telemetry and host tools) with the child's command,
// environment, pool and restart policy.
func childConfig(base host.Config, c gatewayChild) host.Config {
	cfg := base
	cfg.Command, cfg.Args = c.Command, c.Args
	// The child's NAME and NAME=VALUE entries go on top of the default
	// environment, as --env's do: a NAME in Config.Env would replace the
	// default list with the names given.
	cfg.ExtraEnv = append(slices.Clone(base.ExtraEnv), c.env.childExtraEnv()...)
	if c.Pool > 0 {
		cfg.PoolSize = c.Pool
	}
	if r := c.Restart; r != nil {
		cfg.Restart = host.RestartPolicy{
			MaxRestarts: r.MaxRestarts, Window: time.Duration(r.Window),
			BackoffMin: time.Duration(r.BackoffMin), BackoffMax: time.Duration(r.BackoffMax),
		}
	}
	if c.Name != "" && cfg.Logger != nil {
		cfg.Logger = cfg.Logger.With("gateway_child", c.Name)
	}
	return cfg
}
