// Package mcpbridge connects Skulk and the Model Context Protocol in both
// directions, with the official Go SDK (github.com/modelcontextprotocol/go-sdk):
//
//   - Server exposes the tools of a supervised Skulk child (a *host.Host,
//     NewServer) as an MCP server, or those of several children, each on a
//     host of its own, their names kept apart as "name/tool", a child in a
//     crash loop withdrawn until a new host is up (NewGateway): `skulk-host
//     mcp serve` runs it over stdio or streamable HTTP. A call's chunks become progress notifications, its text and
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
//	defer srv.Close(ctx) // before h.Close
//	err := srv.MCP().Run(ctx, &mcp.StdioTransport{})
//
// A gateway of two children:
//
//	start := func(cfg host.Config) func(context.Context) (*host.Host, error) {
//		return func(ctx context.Context) (*host.Host, error) { return host.Start(ctx, cfg) }
//	}
//	srv, err := mcpbridge.NewGateway(ctx, []mcpbridge.Child{
//		{Name: "tools", Start: start(host.Config{Command: "skulk-child"})},
//		{Name: "files", Start: start(host.Config{Command: "skulk-mcp", Args: []string{"--", "files-server"}})},
//	}, mcpbridge.ServerOptions{})
//	defer srv.Close(ctx) // closes both hosts
//	http.ListenAndServe("127.0.0.1:8080", srv.HTTPHandler())
package mcpbridge
