// Command mcpchild is the MCP benchmark child: the mcpbench server over
// stdio. The compare driver starts it through the go-sdk's CommandTransport.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skulkrt/skulk/bench/internal/mcpbench"
)

func main() {
	if err := mcpbench.NewServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcpchild:", err)
		os.Exit(1)
	}
}
