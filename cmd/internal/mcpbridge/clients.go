package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/wire"
)

// The host tools through which an MCP server under skulk-mcp asks the MCP
// client of skulk-host mcp serve (docs/mcp.md, "Sampling and
// elicitation"). Each takes the MCP request's params as its arguments and
// completes with the client's result.
const (
	samplingTool    = "mcp/sampling"
	elicitationTool = "mcp/elicitation"
)

// EnvClientRequests names the variable skulk-host mcp serve sets on its
// children: the MCP client requests its host tools carry, comma-separated
// ("sampling", "elicitation"). skulk-mcp declares the matching client
// capabilities to its MCP server, which it must do before its host's
// startup says what the host offers.
const EnvClientRequests = "SKULK_MCP_CLIENT_REQUESTS"

// ClientRequestsProtocol is the MCP protocol version skulk-mcp proposes to
// its server when its host carries client requests, and the latest one in
// which mcp serve can send them to its client: the last in which a server
// asks its client in the middle of a call. From 2026-07-28 on a server
// asks through its result instead (multi round-trip requests), which the
// bridge does not carry.
const ClientRequestsProtocol = "2025-11-25"

// Errors of the server-to-client requests, to match with errors.Is.
var (
	// ErrNoClient: the host tool was called from a call that no MCP
	// client of mcp serve made (or whose request has ended).
	ErrNoClient = errors.New("mcpbridge: no MCP client session for the call's tree")
	// ErrNoRunningCall: the MCP server asked its client while no call, or
	// more than one, was running, so which call's client to ask is not
	// known (stdio carries no link from a request to the call it serves).
	ErrNoRunningCall = errors.New("mcpbridge: the MCP server's request to its client matches no single running call")
)

// clientWait bounds how long a host tool waits for the client session of
// its call's tree to be registered: the tool handler registers it just
// after the call started, and the call's child can ask before that.
const clientWait = 2 * time.Second

// Clients routes the requests of MCP servers under skulk-mcp to the MCP
// client whose call they serve: put HostTools in the host's
// Config.Calls.HostTools and Env in its ExtraEnv, and pass the same
// Clients to NewServer (ServerOptions.Clients), which registers the
// session of each call it makes. Create it with NewClients; it is safe
// for concurrent use.
type Clients struct {
	mu      sync.Mutex
	trees   map[string]clientCall // call tree → the MCP request that made it; one entry per running tools/call
	changed chan struct{}         // closed and replaced when an entry is added
}

// clientCall is the MCP tools/call request a Skulk call tree serves: its
// context (which routes a request to the client on that request's HTTP
// stream) and its session.
type clientCall struct {
	ctx     context.Context
	session *mcp.ServerSession
}

// NewClients returns an empty Clients.
func NewClients() *Clients {
	return &Clients{trees: map[string]clientCall{}, changed: make(chan struct{})}
}

// Env returns the "NAME=value" pair of EnvClientRequests for a child's
// environment.
func (c *Clients) Env() string { return EnvClientRequests + "=sampling,elicitation" }

// HostTools returns the host tools mcp/sampling and mcp/elicitation.
func (c *Clients) HostTools() []host.HostTool {
	object := wire.Schema{"type": "object"}
	return []host.HostTool{
		{
			Tool: wire.Tool{ID: samplingTool, Description: "Asks the MCP client of the call's tree to sample a message (sampling/createMessage): arguments are its params, the result its result.",
				ArgumentsSchema: object, ResultSchema: object},
			Run: func(ctx context.Context, tc *host.ToolCall) (frame.Payload, error) {
				var p mcp.CreateMessageParams
				return ask(ctx, c, tc, &p, func(ctx context.Context, s *mcp.ServerSession) (any, error) {
					return s.CreateMessage(ctx, &p) //nolint:staticcheck // deprecated from 2026-07-28 on, still served
				})
			},
		},
		{
			Tool: wire.Tool{ID: elicitationTool, Description: "Asks the MCP client of the call's tree for input from its user (elicitation/create): arguments are its params, the result its result.",
				ArgumentsSchema: object, ResultSchema: object},
			Run: func(ctx context.Context, tc *host.ToolCall) (frame.Payload, error) {
				var p mcp.ElicitParams
				return ask(ctx, c, tc, &p, func(ctx context.Context, s *mcp.ServerSession) (any, error) {
					return s.Elicit(ctx, &p)
				})
			},
		},
	}
}

// ask decodes the call's arguments into params, sends the request to the
// client of the call's tree and returns its result as the call's payload.
func ask(ctx context.Context, c *Clients, tc *host.ToolCall, params any, send func(context.Context, *mcp.ServerSession) (any, error)) (frame.Payload, error) {
	if err := tc.Arguments.Decode(params); err != nil {
		return nil, fmt.Errorf("arguments are not the request's params: %w", err)
	}
	cc, err := c.find(ctx, tc.ParentTree)
	if err != nil {
		return nil, err
	}
	// The request's context routes it (on HTTP, the tools/call's stream);
	// the host tool's ends it.
	rctx, cancel := context.WithCancel(cc.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	res, err := send(rctx, cc.session)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("the MCP client: %w", err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return frame.PayloadOf(json.RawMessage(b))
}

// add registers the MCP request of the call tree tree; the returned func
// removes it.
func (c *Clients) add(tree string, ctx context.Context, s *mcp.ServerSession) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trees[tree] = clientCall{ctx: ctx, session: s}
	close(c.changed)
	c.changed = make(chan struct{})
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.trees, tree)
	}
}

// find returns the MCP request of tree, waiting up to clientWait for it.
func (c *Clients) find(ctx context.Context, tree string) (clientCall, error) {
	t := time.NewTimer(clientWait)
	defer t.Stop()
	for {
		c.mu.Lock()
		cc, ok := c.trees[tree]
		changed := c.changed
		c.mu.Unlock()
		if ok {
			return cc, nil
		}
		select {
		case <-changed:
		case <-t.C:
			return clientCall{}, ErrNoClient
		case <-ctx.Done():
			return clientCall{}, context.Cause(ctx)
		}
	}
}

// clientRequests reads EnvClientRequests: which client requests the host
// carries.
func clientRequests() (sampling, elicitation bool) {
	for r := range strings.SplitSeq(os.Getenv(EnvClientRequests), ",") {
		switch r {
		case "sampling":
			sampling = true
		case "elicitation":
			elicitation = true
		}
	}
	return sampling, elicitation
}
