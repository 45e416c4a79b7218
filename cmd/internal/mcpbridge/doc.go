// Package mcpbridge connects Skulk and the Model Context Protocol in both
// directions, with the official Go SDK (github.com/modelcontextprotocol/go-sdk):
//
//   - Server exposes the tools of a supervised Skulk child (a *host.Host) as
//     an MCP server: `skulk-host mcp serve` runs it over stdio or streamable
//     HTTP. A call's chunks become progress notifications, its text and
//     media become the result's content, its failure a tool error result
//     that says whether the host made it up (synthetic).
//   - Wrapper runs an MCP stdio server as a Skulk child: `skulk-mcp --
//     COMMAND` (cmd/skulk-mcp) lists the server's tools, offers them to the
//     host, and turns each call into an MCP tools/call whose progress
//     notifications become chunks and whose content becomes chunks and
//     inline media. Two tools of its own, mcp/request and
//     mcp/notifications, carry the server's other requests (resources,
//     prompts, completions, the log level) and its notifications outside
//     a call, so that Server in front of it forwards them: the MCP client
//     sees the server behind it. The server's sampling and elicitation
//     requests in the middle of a call go the other way: calls of the host
//     tools mcp/sampling and mcp/elicitation (Clients), which Server
//     answers with the MCP client of the call.
//
// docs/mcp.md says what maps, what cannot, and how each loss shows at run
// time. Both halves are thin over package host and package child; nothing
// here is needed by a program that only embeds host.
//
//	h, _ := host.Start(ctx, host.Config{Command: "skulk-child"})
//	defer h.Close(ctx)
//	srv, _ := mcpbridge.NewServer(h, mcpbridge.ServerOptions{})
//	err := srv.MCP().Run(ctx, &mcp.StdioTransport{})
package mcpbridge
