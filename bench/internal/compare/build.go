package compare

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Binaries are the children of a run, built once into a temporary
// directory.
type Binaries struct {
	// Skulk is cmd/skulkchild; SkulkDemo the main module's cmd/skulk-child.
	Skulk, SkulkDemo string
	// GoPlugin, MCP and Raw are cmd/gpchild, cmd/mcpchild and cmd/rawchild.
	GoPlugin, MCP, Raw string
}

// children maps each binary to its package.
var children = []struct {
	system string
	pkg    string
	name   string
	dst    func(*Binaries) *string
}{
	{Skulk, "github.com/skulkrt/skulk/bench/cmd/skulkchild", "skulkchild", func(b *Binaries) *string { return &b.Skulk }},
	{SkulkDemo, "github.com/skulkrt/skulk/cmd/skulk-child", "skulk-child", func(b *Binaries) *string { return &b.SkulkDemo }},
	{"go-plugin", "github.com/skulkrt/skulk/bench/cmd/gpchild", "gpchild", func(b *Binaries) *string { return &b.GoPlugin }},
	{"mcp", "github.com/skulkrt/skulk/bench/cmd/mcpchild", "mcpchild", func(b *Binaries) *string { return &b.MCP }},
	{"raw", "github.com/skulkrt/skulk/bench/cmd/rawchild", "rawchild", func(b *Binaries) *string { return &b.Raw }},
}

// ProfileTag is the build tag that gives cmd/skulkchild its profiler
// (SKULK_BENCH_PROFILE); the other children ignore it.
const ProfileTag = "skulkprofile"

// Build builds the children of the named systems (all when none are named)
// with one `go build` run in benchDir (the bench module) into outDir, with
// the build tags given (ProfileTag, say).
func Build(ctx context.Context, benchDir, outDir string, systems []string, tags ...string) (Binaries, error) {
	var b Binaries
	args := []string{"build", "-o", outDir + "/"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	// The systems across TCP loopback run the children of their local
	// counterparts.
	if slices.Contains(systems, SkulkNATS) {
		systems = append(slices.Clip(systems), Skulk)
	}
	if slices.Contains(systems, GoPluginTCP) {
		systems = append(slices.Clip(systems), "go-plugin")
	}
	for _, c := range children {
		if len(systems) > 0 && !slices.Contains(systems, c.system) {
			continue
		}
		args = append(args, c.pkg)
		*c.dst(&b) = filepath.Join(outDir, c.name)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = benchDir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return b, fmt.Errorf("building the children: %w\n%s", err, out.String())
	}
	return b, nil
}

// ModuleDir returns the directory of the Go module the current directory
// is in (the bench module when run as documented).
func ModuleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == "/dev/null" {
		return "", fmt.Errorf("not inside a Go module: run from the bench directory")
	}
	return filepath.Dir(mod), nil
}

// Revision returns the git revision of dir's repository, with "+dirty"
// when the work tree has changes; "" when git cannot say.
func Revision(ctx context.Context, dir string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += "+dirty"
	}
	return rev
}

// SystemNames are the systems a run can compare, in column order.
var SystemNames = []string{Skulk, SkulkDemo, "go-plugin", "mcp", "raw", SkulkNATS, GoPluginTCP}

// systems returns the systems o names (all when none), Skulk first.
func (o *Options) systems() []system {
	all := []system{
		&skulkSystem{sys: Skulk, bin: o.Bin.Skulk, dir: o.Dir, env: o.SkulkEnv},
		&skulkSystem{sys: SkulkDemo, bin: o.Bin.SkulkDemo, dir: o.Dir},
		&grpcSystem{bin: o.Bin.GoPlugin, dir: o.Dir},
		&mcpSystem{bin: o.Bin.MCP},
		&rawSystem{bin: o.Bin.Raw, dir: o.Dir},
		&natsSystem{bin: o.Bin.Skulk, dir: o.Dir},
		&grpcTCPSystem{bin: o.Bin.GoPlugin},
	}
	if len(o.Systems) == 0 {
		return all
	}
	var out []system
	for _, s := range all {
		if slices.Contains(o.Systems, s.name()) {
			out = append(out, s)
		}
	}
	return out
}
