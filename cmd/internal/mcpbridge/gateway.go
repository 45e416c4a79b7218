package mcpbridge

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skulkrt/skulk/host"
)

// Child is one child a gateway Server (NewGateway) fronts: a Skulk
// provider, or an MCP server under skulk-mcp, supervised by a host of its
// own.
type Child struct {
	// Name keeps the child's tools and prompts apart from the other
	// children's: they are offered as "Name/tool" and "Name/prompt". It is
	// 1 to 64 letters, digits, '_' or '-'. "" is allowed only when the
	// gateway has one child, whose names are then offered as they are.
	Name string
	// Start starts the child's host (host.Start with the child's
	// config). NewGateway calls it once; the Server calls it again when
	// the host gave up restarting the child (its restart policy met a
	// crash loop), after a wait between RetryMin and RetryMax. The Server
	// owns the hosts Start returns and closes them (Server.Close).
	Start func(ctx context.Context) (*host.Host, error)
	// RetryMin is the wait before the first new host after a crash loop,
	// doubled after each start that fails, up to RetryMax. 0 means
	// DefaultRetryMin and DefaultRetryMax.
	RetryMin, RetryMax time.Duration
}

// Defaults of Child's zero values.
const (
	DefaultRetryMin = time.Second
	DefaultRetryMax = time.Minute
)

// Errors of NewGateway's children, to match with errors.Is; the error
// names the child by its index.
var (
	// ErrChildName: a name that is not 1 to 64 letters, digits, '_' or
	// '-', taken twice, or "" beside other children.
	ErrChildName = errors.New("mcpbridge: child name must be 1 to 64 letters, digits, '_' or '-', unique, and \"\" only for a lone child")
	// ErrNoChildren: NewGateway was given no child.
	ErrNoChildren = errors.New("mcpbridge: a gateway needs at least one child")
	// ErrChildStart: a child has no Start, or a RetryMax below RetryMin.
	ErrChildStart = errors.New("mcpbridge: a child needs Start, and RetryMax at least RetryMin")
)

var childNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// validateChildren checks the children's names and fields.
func validateChildren(children []Child) error {
	if len(children) == 0 {
		return ErrNoChildren
	}
	seen := map[string]bool{}
	for i, c := range children {
		switch {
		case c.Name == "" && len(children) > 1, c.Name != "" && !childNameRE.MatchString(c.Name), seen[c.Name]:
			return fmt.Errorf("children[%d].name: %w", i, ErrChildName)
		case c.Start == nil, c.RetryMin < 0, c.RetryMax != 0 && c.RetryMax < c.RetryMin:
			return fmt.Errorf("children[%d]: %w", i, ErrChildStart)
		}
		seen[c.Name] = true
	}
	return nil
}

// ChildStatus is the state of one gateway child as the health report
// gives it.
type ChildStatus uint8

// Gateway child states.
const (
	// StatusUp: the child's host runs; its slots' own states say whether
	// a child is ready or restarting.
	StatusUp ChildStatus = iota + 1
	// StatusCrashLoop: the host gave up restarting the child; its tools
	// are withdrawn and a new host is being started, with backoff.
	StatusCrashLoop
	// StatusDown: the host gave up and the Server cannot start another
	// (a Server of NewServer, whose host is the caller's): its tools stay
	// withdrawn.
	StatusDown
)

var statusNames = [...]string{StatusUp: "up", StatusCrashLoop: "crash-loop", StatusDown: "down"}

// String returns the status's name, or "ChildStatus(n)" for an unknown
// value.
func (s ChildStatus) String() string {
	if s >= StatusUp && s <= StatusDown {
		return statusNames[s]
	}
	return fmt.Sprintf("ChildStatus(%d)", uint8(s))
}

// hostCloseWait bounds the close of a host that gave up (its children are
// down already, so there is little to wait for).
const hostCloseWait = 10 * time.Second

// backend is one child of the Server: its host, its tools in the MCP
// server, its supervision.
type backend struct {
	s     *Server
	name  string // "" : names offered as they are
	start func(context.Context) (*host.Host, error)
	// retryMin, retryMax: Child's, defaults applied.
	retryMin, retryMax time.Duration
	// mcpChild: the child is an MCP server under skulk-mcp (it offers
	// requestTool): requests other than tools/call are forwarded, and
	// each chunk that is an MCP content is its own content. Set before
	// the backend is shared.
	mcpChild bool
	// init: the MCP child's initialize result (nil for a provider).
	init *mcp.InitializeResult

	mu         sync.Mutex
	h          *host.Host // guarded by mu; nil while in a crash loop
	owned      bool       // the Server closes h (it came from start); guarded by mu
	status     ChildStatus
	crashLoops int
	changed    chan struct{} // closed and replaced when h changes; guarded by mu

	// Owned by the supervise goroutine (and NewGateway before it starts).
	listed    map[string]bool // the MCP names of the tools offered
	announced string          // the ready children's ids when the tools were last listed
	// toolsNew is h's ToolsChanged channel, taken before its tools were
	// last read, so that a change made after that read is never missed.
	toolsNew <-chan struct{}
}

// mcpName is the MCP name of the backend's tool or prompt id.
func (b *backend) mcpName(id string) string {
	if b.name == "" {
		return id
	}
	return b.name + "/" + id
}

// host returns the backend's host, nil while it has none.
func (b *backend) host() *host.Host {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.h
}

// waitHost returns the backend's host, waiting while it has none, or nil
// when ctx is done first.
func (b *backend) waitHost(ctx context.Context) *host.Host {
	for {
		b.mu.Lock()
		h, changed := b.h, b.changed
		b.mu.Unlock()
		if h != nil {
			return h
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

func (b *backend) setHost(h *host.Host, owned bool, st ChildStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.h, b.owned, b.status = h, owned, st
	close(b.changed)
	b.changed = make(chan struct{})
}

// readyIDs returns the ids of h's ready children, in slot order, and
// whether every slot is down (the restart policy gave up on all).
func readyIDs(h *host.Host) (ids string, down bool) {
	down = true
	var b strings.Builder
	for _, c := range h.Children() {
		if c.State == "ready" {
			b.WriteString(c.ID)
			b.WriteByte(',')
		}
		down = down && c.State == "down"
	}
	return b.String(), down
}

// supervise watches the backend's host until ctx is done (Server.Close):
// a child that restarted, or whose tool list changed while it runs
// (host.Host.ToolsChanged), has its tools listed again (the go-sdk sends
// tools/list_changed), and a host that gave up has its tools withdrawn
// while a new one is started. The host says when its children change
// (host.Host.ChildrenChanged): nothing is polled.
func (b *backend) supervise(ctx context.Context) {
	for {
		h := b.host()
		if h == nil {
			return // down for good: nothing left to watch
		}
		changed := h.ChildrenChanged() // before readyIDs: a later change closes it
		ids, down := readyIDs(h)
		switch {
		case down:
			if !b.crashLoop(ctx, h) {
				return
			}
			continue
		case ids != "" && ids != b.announced:
			b.announce(h)
			b.announced = ids
		}
		select {
		case <-ctx.Done():
			return
		case <-b.toolsNew:
			b.announce(h)
		case <-changed:
		}
	}
}

// crashLoop withdraws the backend's tools from a host that gave up, closes
// it and starts new hosts, waiting RetryMin and then twice as long after
// each failure (up to RetryMax), until one starts: its tools are then
// listed again. It reports false when the backend cannot come back (no
// start, or ctx done).
func (b *backend) crashLoop(ctx context.Context, old *host.Host) bool {
	b.withdraw()
	b.mu.Lock()
	owned := b.owned
	b.crashLoops++
	b.mu.Unlock()
	log := b.s.opts.Logger
	if b.start == nil {
		b.setHost(nil, false, StatusDown)
		log.Error("mcpbridge: the child is down and cannot be started again; its tools are withdrawn", "child", b.name)
		return false
	}
	b.setHost(nil, false, StatusCrashLoop)
	if owned {
		cctx, cancel := context.WithTimeout(context.Background(), hostCloseWait)
		if err := old.Close(cctx); err != nil {
			log.Debug("mcpbridge: closing the host that gave up", "child", b.name, "err", err)
		}
		cancel()
	}
	wait := b.retryMin
	for {
		log.Warn("mcpbridge: the child is in a crash loop; its tools are withdrawn until a new host starts", "child", b.name, "retry_in", wait)
		if !sleepCtx(ctx, wait) {
			return false
		}
		h, err := b.start(ctx)
		if err == nil {
			b.setHost(h, true, StatusUp)
			ids, _ := readyIDs(h)
			b.announce(h)
			b.announced = ids
			log.Info("mcpbridge: the child is back; its tools are offered again", "child", b.name)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("mcpbridge: a new host for the child did not start", "child", b.name, "err", err)
		wait = min(2*wait, b.retryMax)
	}
}

// announce makes the MCP server's tools of the backend those h offers now:
// tools gone are removed, the rest added again; the go-sdk then sends
// tools/list_changed to every session.
func (b *backend) announce(h *host.Host) {
	b.toolsNew = h.ToolsChanged() // before Tools: a later change closes it
	now := map[string]bool{}
	for _, t := range h.Tools() {
		if t.ID == requestTool || t.ID == notifyTool {
			continue
		}
		mt, err := mcpTool(t)
		if err != nil {
			b.s.opts.Logger.Warn("mcpbridge: tool not offered", "child", b.name, "err", err)
			continue
		}
		mt.Name = b.mcpName(t.ID)
		now[mt.Name] = true
		b.s.srv.AddTool(mt, b.s.handler(b, t.ID))
	}
	var gone []string
	for name := range b.listed {
		if !now[name] {
			gone = append(gone, name)
		}
	}
	b.listed = now
	if len(gone) > 0 {
		b.s.srv.RemoveTools(gone...)
	}
}

// withdraw removes the backend's tools from the MCP server; the go-sdk
// sends tools/list_changed.
func (b *backend) withdraw() {
	var names []string
	for name := range b.listed {
		names = append(names, name)
	}
	b.listed = map[string]bool{}
	b.announced = ""
	if len(names) > 0 {
		b.s.srv.RemoveTools(names...)
	}
}

// close closes the backend's host when the Server started it.
func (b *backend) close(ctx context.Context) error {
	b.mu.Lock()
	h, owned := b.h, b.owned
	b.h, b.owned = nil, false
	b.mu.Unlock()
	if h == nil || !owned {
		return nil
	}
	return h.Close(ctx)
}

// splitName finds the backend of an MCP tool or prompt name and returns
// the name its child knows; nil when no backend has it.
func (s *Server) splitName(name string) (*backend, string) {
	if len(s.backends) == 1 && s.backends[0].name == "" {
		return s.backends[0], name
	}
	prefix, rest, ok := strings.Cut(name, "/")
	if !ok {
		return nil, ""
	}
	return s.byName[prefix], rest
}
