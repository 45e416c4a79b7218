package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

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

// Clients routes the requests of MCP servers under skulk-mcp to the MCP
// client whose call they serve: put HostTools in the host's
// Config.Calls.HostTools and Env in its ExtraEnv, and pass the same
// Clients to NewServer or NewGateway (ServerOptions.Clients), which
// reserves a place for each call's session before the call starts and
// fills it in with the call's tree once it has one, so a request the
// child makes at once waits for that, not for a fixed time. Create it
// with NewClients; it is safe for concurrent use.
type Clients struct {
	mu    sync.Mutex
	trees map[string]clientCall // call tree → the MCP request that made it; one entry per running tools/call
	// pending counts the reservations not yet set or cancelled: tool
	// calls being started, whose trees are not known yet. At most one
	// per running tool handler.
	pending int
	changed chan struct{} // closed and replaced when an entry is set or a reservation ends
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
	object := map[string]any{"type": "object"}
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

// clientReservation is a tools/call's place in Clients, taken before its
// Skulk call starts (reserve) and set to the call's tree once the call has
// one (set), or given up when the call did not start (cancel). A nil
// reservation does nothing.
type clientReservation struct {
	c    *Clients
	done bool // set or cancelled; owned by the tool handler
}

// reserve takes a reservation: until it is set or cancelled, find waits
// for a tree it does not know yet instead of failing at once.
func (c *Clients) reserve() *clientReservation {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending++
	return &clientReservation{c: c}
}

// end gives the reservation up and wakes the waiting finds. c.mu must be
// held.
func (r *clientReservation) endLocked() {
	if r.done {
		return
	}
	r.done = true
	r.c.pending--
	close(r.c.changed)
	r.c.changed = make(chan struct{})
}

// cancel gives the reservation up: the call did not start.
func (r *clientReservation) cancel() {
	if r == nil {
		return
	}
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	r.endLocked()
}

// set registers the MCP request of the call tree tree in place of the
// reservation; the returned func removes it.
func (r *clientReservation) set(tree string, ctx context.Context, s *mcp.ServerSession) func() {
	if r == nil {
		return func() {}
	}
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trees[tree] = clientCall{ctx: ctx, session: s}
	r.endLocked()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.trees, tree)
	}
}

// find returns the MCP request of tree. While a tool call is being
// started (a reservation is pending) the tree may be its own, not known
// yet: find waits for the reservations to end, bounded by ctx. With none
// pending, a tree not registered is ErrNoClient at once.
func (c *Clients) find(ctx context.Context, tree string) (clientCall, error) {
	for {
		c.mu.Lock()
		cc, ok := c.trees[tree]
		pending, changed := c.pending, c.changed
		c.mu.Unlock()
		if ok {
			return cc, nil
		}
		if pending == 0 {
			return clientCall{}, ErrNoClient
		}
		select {
		case <-changed:
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
