// Command skulk-mcp runs an MCP stdio server as a Skulk provider: its
// tools become Skulk tools, so skulk-host and host.Start supervise it like
// any child (health, restarts, journals). docs/mcp.md describes the
// mapping.
//
//	skulk-host tools -- skulk-mcp -- npx -y @modelcontextprotocol/server-everything
//
// Usage:
//
//	skulk-mcp -- COMMAND [ARGS...]
package main

import (
	"fmt"
	"os"

	"github.com/skulkrt/skulk/cmd/internal/mcpbridge"
)

const usage = `usage: skulk-mcp -- COMMAND [ARGS...]

Runs the MCP stdio server COMMAND as a Skulk provider; start it with a
Skulk host, e.g. skulk-host tools -- skulk-mcp -- ./my-mcp-server.
`

func main() {
	args := os.Args[1:]
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		fmt.Print(usage)
		return
	case len(args) > 0 && args[0] == "--":
		args = args[1:]
	}
	if len(args) == 0 || args[0] == "" {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(mcpbridge.ExitStart)
	}
	os.Exit(mcpbridge.RunHosted(mcpbridge.WrapOptions{Command: args[0], Args: args[1:]}, os.Stderr))
}
