package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/wire"
)

// hasRequestTool reports whether the host's children are MCP servers under
// skulk-mcp: they offer requestTool.
func hasRequestTool(tools []string) bool {
	for _, id := range tools {
		if id == requestTool {
			return true
		}
	}
	return false
}

// hasTool reports whether tools has one of id.
func hasTool(tools []wire.Tool, id string) bool {
	for _, t := range tools {
		if t.ID == id {
			return true
		}
	}
	return false
}

// errCrashLoop: a forwarded request to a child in a crash loop.
var errCrashLoop = errors.New("mcpbridge: the child is in a crash loop (its host is starting again)")

// request forwards one MCP request to the backend's MCP server through
// requestTool and decodes its result into out.
func (b *backend) request(ctx context.Context, method string, params any, out any) error {
	args := map[string]any{"method": method}
	if params != nil {
		raw, err := json.Marshal(params)
		if err != nil {
			return err
		}
		var p any
		if err := json.Unmarshal(raw, &p); err != nil {
			return err
		}
		if p != nil {
			args["params"] = p
		}
	}
	payload, err := frame.PayloadOf(args)
	if err != nil {
		return err
	}
	h := b.host()
	if h == nil {
		return fmt.Errorf("mcpbridge: %s: %w", method, errCrashLoop)
	}
	c, err := h.Call(ctx, requestTool, payload, host.WithInput())
	if err != nil {
		return fmt.Errorf("mcpbridge: %s: %w", method, err)
	}
	var result []byte
	for {
		f, err := c.Recv(context.Background()) // a cancelled call still ends with its terminal
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("mcpbridge: %s: %w", method, err)
		}
		if m, ok := f.Media.(*frame.InlineMedia); ok && f.Kind == frame.KindChunk && m.MediaType == mediaJSON && result == nil {
			result = m.Data
		}
		if f.Kind.IsTerminal() && f.Kind != frame.KindCompleted {
			msg := f.Kind.String()
			if f.Error != nil {
				msg = failureText(f.Kind, f.Error.Code, f.Error.Message, f.Synthetic)
			}
			return &jsonrpcError{msg: msg}
		}
	}
	if result == nil {
		return fmt.Errorf("%w (%s)", ErrNoResult, method)
	}
	return json.Unmarshal(result, out)
}

// jsonrpcError is the error of a forwarded request the child's server
// refused or failed: its text goes to the MCP client as the JSON-RPC
// error's message.
type jsonrpcError struct{ msg string }

func (e *jsonrpcError) Error() string { return e.msg }

// childInitialize asks the backend's MCP server for its initialize
// result, whose capabilities and instructions mcp serve declares as its
// own.
func childInitialize(ctx context.Context, b *backend) (*mcp.InitializeResult, error) {
	var res mcp.InitializeResult
	if err := b.request(ctx, methodInitialize, nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// single reports whether the server fronts one unnamed child, whose
// requests are forwarded as they are (cursors and all).
func (s *Server) single() bool { return len(s.backends) == 1 && s.backends[0].name == "" }

// forwardOptions sets the options of the MCP server that forward to the
// MCP children: their capabilities, merged (tools' list changes always
// announced), their instructions (each child's under its name when there
// are several), and the handlers the go-sdk takes as options (subscribe,
// unsubscribe, complete).
func (s *Server) forwardOptions(children []*backend, o *mcp.ServerOptions) {
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}, Logging: &mcp.LoggingCapabilities{}}
	var instructions []string
	for _, b := range children {
		c := b.init.Capabilities
		if b.init.Instructions != "" {
			if s.single() {
				instructions = append(instructions, b.init.Instructions)
			} else {
				instructions = append(instructions, b.name+": "+b.init.Instructions)
			}
		}
		if c == nil {
			continue
		}
		if c.Prompts != nil {
			if caps.Prompts == nil {
				caps.Prompts = &mcp.PromptCapabilities{}
			}
			caps.Prompts.ListChanged = caps.Prompts.ListChanged || c.Prompts.ListChanged
		}
		if c.Resources != nil {
			if caps.Resources == nil {
				caps.Resources = &mcp.ResourceCapabilities{}
			}
			caps.Resources.ListChanged = caps.Resources.ListChanged || c.Resources.ListChanged
			caps.Resources.Subscribe = caps.Resources.Subscribe || c.Resources.Subscribe
		}
		if c.Completions != nil {
			caps.Completions = c.Completions
		}
		if s.single() {
			caps.Experimental = c.Experimental
		}
	}
	if caps.Resources == nil {
		// The links of media too large to send inline are resources.
		caps.Resources = &mcp.ResourceCapabilities{}
	}
	o.Capabilities = caps
	o.Instructions = strings.Join(instructions, "\n\n")
	if caps.Resources.Subscribe {
		o.SubscribeHandler = func(ctx context.Context, req *mcp.SubscribeRequest) error {
			return s.toOwner(ctx, req.Params.URI, func(b *backend) error {
				return b.request(ctx, "resources/subscribe", req.Params, &struct{}{})
			})
		}
		o.UnsubscribeHandler = func(ctx context.Context, req *mcp.UnsubscribeRequest) error {
			return s.toOwner(ctx, req.Params.URI, func(b *backend) error {
				return b.request(ctx, "resources/unsubscribe", req.Params, &struct{}{})
			})
		}
	}
	if caps.Completions != nil {
		o.CompletionHandler = s.complete
	}
}

// complete forwards completion/complete to the child of its reference: a
// prompt's by its name, a resource's by its URI.
func (s *Server) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	var r mcp.CompleteResult
	if s.single() {
		return &r, s.backends[0].request(ctx, "completion/complete", req.Params, &r)
	}
	p := *req.Params
	if p.Ref != nil && p.Ref.Type == "ref/prompt" {
		b, name := s.splitName(p.Ref.Name)
		if b == nil || !b.mcpChild {
			return nil, fmt.Errorf("%w: completion/complete ref.name", ErrUnknownName)
		}
		ref := *p.Ref
		ref.Name = name
		p.Ref = &ref
		return &r, b.request(ctx, "completion/complete", &p, &r)
	}
	uri := ""
	if p.Ref != nil {
		uri = p.Ref.URI
	}
	return &r, s.toOwner(ctx, uri, func(b *backend) error {
		return b.request(ctx, "completion/complete", &p, &r)
	})
}

// ErrUnknownName: a prompt (or a completion's prompt reference) whose
// name names no child of the gateway ("child/prompt").
var ErrUnknownName = errors.New("mcpbridge: the name names no child of this gateway")

// toOwner runs do with the backend that listed uri, or with each MCP
// backend in turn until one succeeds (a URI not listed, a template's).
func (s *Server) toOwner(ctx context.Context, uri string, do func(*backend) error) error {
	s.mu.Lock()
	owner := s.owners[uri]
	s.mu.Unlock()
	if owner != nil {
		return do(owner)
	}
	err := error(&jsonrpcError{msg: "no child has the resource"})
	for _, b := range s.backends {
		if !b.mcpChild {
			continue
		}
		if err = do(b); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
	}
	return err
}

// forwardMiddleware forwards the list, read and get requests and the log
// level to the children's servers; the server's own handlers answer the
// rest (and a read of a link to media the bridge keeps).
func (s *Server) forwardMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "resources/templates/list":
			return s.forwardTemplates(ctx, req)
		case "resources/read":
			p, _ := req.GetParams().(*mcp.ReadResourceParams)
			if p != nil && strings.HasPrefix(p.URI, linkPrefix) {
				return next(ctx, method, req)
			}
			var out mcp.ReadResourceResult
			uri := ""
			if p != nil {
				uri = p.URI
			}
			if err := s.toOwner(ctx, uri, func(b *backend) error { return b.request(ctx, method, req.GetParams(), &out) }); err != nil {
				return nil, err
			}
			return &out, nil
		case "logging/setLevel":
			// The session's own level (which filters what it is sent),
			// then the children's servers'.
			r, err := next(ctx, method, req)
			if err != nil {
				return r, err
			}
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
				s.mu.Lock()
				s.leveled[ss] = true
				s.mu.Unlock()
			}
			for _, b := range s.backends {
				if b.mcpChild {
					if err := b.request(ctx, method, req.GetParams(), &struct{}{}); err != nil {
						s.opts.Logger.Warn("mcpbridge: logging/setLevel not forwarded", "child", b.name, "err", err)
					}
				}
			}
			return r, nil
		case "resources/list", "prompts/list", "prompts/get":
		default:
			return next(ctx, method, req)
		}
		if s.single() {
			var out mcp.Result
			switch method {
			case "resources/list":
				out = &mcp.ListResourcesResult{}
			case "prompts/list":
				out = &mcp.ListPromptsResult{}
			default:
				out = &mcp.GetPromptResult{}
			}
			if err := s.backends[0].request(ctx, method, req.GetParams(), out); err != nil {
				return nil, err
			}
			return out, nil
		}
		switch method {
		case "resources/list":
			return s.listResources(ctx)
		case "prompts/list":
			return s.listPrompts(ctx)
		}
		p, _ := req.GetParams().(*mcp.GetPromptParams)
		if p == nil {
			return nil, fmt.Errorf("%w: prompts/get name", ErrUnknownName)
		}
		b, name := s.splitName(p.Name)
		if b == nil || !b.mcpChild {
			return nil, fmt.Errorf("%w: prompts/get name", ErrUnknownName)
		}
		q := *p
		q.Name = name
		var out mcp.GetPromptResult
		if err := b.request(ctx, method, &q, &out); err != nil {
			return nil, err
		}
		return &out, nil
	}
}

// listPages bounds the pages a gateway of several children reads of one
// child's list: it answers with every child's whole list in one page.
const listPages = 100

// listAll reads every page of a list of b (at most listPages), calling
// add with each page's result.
func listAll[R any](ctx context.Context, b *backend, method string, cursor func(*R) string, add func(*R)) error {
	next := ""
	for range listPages {
		var r R
		var params any
		if next != "" {
			params = map[string]string{"cursor": next}
		}
		if err := b.request(ctx, method, params, &r); err != nil {
			return err
		}
		add(&r)
		if next = cursor(&r); next == "" {
			return nil
		}
	}
	s := b.s
	s.opts.Logger.Warn("mcpbridge: a child's list has more pages than a gateway reads", "child", b.name, "method", method, "pages", listPages)
	return nil
}

// upMCP returns the MCP backends that have a host now.
func (s *Server) upMCP() []*backend {
	var out []*backend
	for _, b := range s.backends {
		if b.mcpChild && b.host() != nil {
			out = append(out, b)
		}
	}
	return out
}

// listResources lists every MCP child's resources, each named
// "child/name", and remembers which child listed each URI (for read and
// subscribe).
func (s *Server) listResources(ctx context.Context) (*mcp.ListResourcesResult, error) {
	out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
	for _, b := range s.upMCP() {
		var mine []*mcp.Resource
		err := listAll(ctx, b, "resources/list", func(r *mcp.ListResourcesResult) string { return r.NextCursor },
			func(r *mcp.ListResourcesResult) { mine = append(mine, r.Resources...) })
		if err != nil {
			s.opts.Logger.Warn("mcpbridge: a child's resources not listed", "child", b.name, "err", err)
			continue
		}
		s.mu.Lock()
		for uri, o := range s.owners {
			if o == b {
				delete(s.owners, uri)
			}
		}
		for _, r := range mine {
			if _, taken := s.owners[r.URI]; !taken {
				s.owners[r.URI] = b
			}
			r.Name = b.name + "/" + r.Name
		}
		s.mu.Unlock()
		out.Resources = append(out.Resources, mine...)
	}
	return out, nil
}

// listPrompts lists every MCP child's prompts, each named "child/name".
func (s *Server) listPrompts(ctx context.Context) (*mcp.ListPromptsResult, error) {
	out := &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}}
	for _, b := range s.upMCP() {
		err := listAll(ctx, b, "prompts/list", func(r *mcp.ListPromptsResult) string { return r.NextCursor },
			func(r *mcp.ListPromptsResult) {
				for _, p := range r.Prompts {
					p.Name = b.mcpName(p.Name)
					out.Prompts = append(out.Prompts, p)
				}
			})
		if err != nil {
			s.opts.Logger.Warn("mcpbridge: a child's prompts not listed", "child", b.name, "err", err)
		}
	}
	return out, nil
}

// forwardTemplates lists the children's resource templates (each named
// "child/name" when there are several) and the bridge's own (links to
// media kept for results).
func (s *Server) forwardTemplates(ctx context.Context, req mcp.Request) (*mcp.ListResourceTemplatesResult, error) {
	if s.single() {
		var r mcp.ListResourceTemplatesResult
		if err := s.backends[0].request(ctx, "resources/templates/list", req.GetParams(), &r); err != nil {
			return nil, err
		}
		if r.NextCursor == "" {
			r.ResourceTemplates = append(r.ResourceTemplates, linkResourceTemplate())
		}
		return &r, nil
	}
	out := &mcp.ListResourceTemplatesResult{}
	for _, b := range s.upMCP() {
		err := listAll(ctx, b, "resources/templates/list", func(r *mcp.ListResourceTemplatesResult) string { return r.NextCursor },
			func(r *mcp.ListResourceTemplatesResult) {
				for _, t := range r.ResourceTemplates {
					t.Name = b.name + "/" + t.Name
					out.ResourceTemplates = append(out.ResourceTemplates, t)
				}
			})
		if err != nil {
			s.opts.Logger.Warn("mcpbridge: a child's resource templates not listed", "child", b.name, "err", err)
		}
	}
	out.ResourceTemplates = append(out.ResourceTemplates, linkResourceTemplate())
	return out, nil
}

// addMCP adds a chunk of an MCP server under skulk-mcp: its progress
// notification ({"progress", "total", "message"}) goes to the client as
// the server sent it, its log notification ({"mcp_log"}) to the session
// with the call's request, and its content (contentFrame's shapes) is one
// content of the result, rebuilt exactly when the chunk carries "mcp".
func (b *resultBuilder) addMCP(ctx context.Context, f frame.Frame) {
	var keys map[string]json.RawMessage
	if f.Payload != nil {
		raw, err := f.Payload.MarshalJSON()
		if err == nil {
			_ = json.Unmarshal(raw, &keys)
		}
	}
	var media []byte
	if m, ok := f.Media.(*frame.InlineMedia); ok {
		media = m.Data
	}
	switch {
	case keys["mcp_log"] != nil && len(keys) == 1:
		var p mcp.LoggingMessageParams
		if json.Unmarshal(keys["mcp_log"], &p) == nil && b.session != nil {
			if err := b.session.Log(ctx, &p); err != nil { //nolint:staticcheck // still served
				b.s.opts.Logger.Debug("mcpbridge: log notification not sent", "call", b.call.ID(), "err", err)
			}
		}
		return
	case keys["progress"] != nil && f.Media == nil:
		if b.token == nil || b.session == nil {
			return
		}
		var p mcp.ProgressNotificationParams
		if json.Unmarshal(mustJSON(keys), &p) != nil {
			return
		}
		p.ProgressToken = b.token
		if err := b.session.NotifyProgress(ctx, &p); err != nil {
			b.s.opts.Logger.Debug("mcpbridge: progress notification not sent", "call", b.call.ID(), "err", err)
		}
		return
	}
	b.chunks++
	var text *string
	if raw, ok := keys["text"]; ok {
		var t string
		if json.Unmarshal(raw, &t) == nil {
			text = &t
		}
	}
	if raw, ok := keys["mcp"]; ok {
		var extras map[string]any
		if json.Unmarshal(raw, &extras) == nil {
			if c, err := rebuildContent(extras, text, media); err == nil {
				b.content = append(b.content, c)
				return
			}
		}
	}
	if text != nil && len(keys) == 1 && f.Media == nil {
		b.content = append(b.content, &mcp.TextContent{Text: *text})
		return
	}
	b.addChunk(f)
	b.text, b.lines = b.closeRun(b.text), b.closeRun(b.lines)
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// listenRetry is the pause between attempts to open the notifyTool call
// while the child is down or restarting.
const listenRetry = 200 * time.Millisecond

// listen keeps a notifyTool call open to the backend's child and passes
// its notifications to the MCP clients. When the call ends (the child died
// or was restarted, or its host was replaced after a crash loop) it opens
// it again. It returns when ctx is done (Close).
func (b *backend) listen(ctx context.Context) {
	for ctx.Err() == nil {
		h := b.waitHost(ctx)
		if h == nil {
			return
		}
		c, err := h.Call(ctx, notifyTool, nil, host.WithInput())
		if err != nil {
			sleepCtx(ctx, listenRetry)
			continue
		}
		for f, err := range c.Frames() {
			if err != nil || f.Kind != frame.KindChunk || f.Payload == nil {
				continue
			}
			b.s.dispatch(ctx, b, f.Payload)
		}
		sleepCtx(ctx, listenRetry)
	}
}

// sleepCtx waits d, or less when ctx is done first; it reports whether it
// waited all of d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// dispatch passes one notification of a child's server on: a resource's
// update to the sessions subscribed to it, a log message to the sessions
// that set a log level (logging/setLevel; each filters by its level).
// A log message that belongs to a call reached that call's session as a
// chunk of the call; this one belongs to none.
func (s *Server) dispatch(ctx context.Context, b *backend, p frame.Payload) {
	raw, err := p.MarshalJSON()
	if err != nil {
		return
	}
	var n struct {
		Notification struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		} `json:"mcp_notification"`
	}
	if json.Unmarshal(raw, &n) != nil {
		return
	}
	switch n.Notification.Method {
	case "notifications/resources/updated":
		var up mcp.ResourceUpdatedNotificationParams
		if json.Unmarshal(n.Notification.Params, &up) == nil {
			if err := s.srv.ResourceUpdated(ctx, &up); err != nil {
				s.opts.Logger.Debug("mcpbridge: resource update not sent", "err", err)
			}
		}
	case "notifications/message":
		var lm mcp.LoggingMessageParams
		if json.Unmarshal(n.Notification.Params, &lm) == nil {
			for _, ss := range s.leveledSessions() {
				_ = ss.Log(ctx, &lm) //nolint:staticcheck // still served
			}
		}
	case "notifications/resources/list_changed":
		// The go-sdk sends list_changed when its own list changes: a
		// placeholder added and removed at once makes it send one (within
		// its 10 ms debounce). Clients never see the placeholder: list and
		// read of resources are forwarded to the children.
		s.srv.AddResource(listChangedResource, nil)
		s.srv.RemoveResources(listChangedResource.URI)
	case "notifications/prompts/list_changed":
		s.srv.AddPrompt(listChangedPrompt, nil)
		s.srv.RemovePrompts(listChangedPrompt.Name)
	default:
		s.opts.Logger.Debug("mcpbridge: notification of the child's server not passed on", "child", b.name, "method", n.Notification.Method)
	}
}

// The placeholders through which a child's resources/list_changed and
// prompts/list_changed reach the clients (dispatch).
var (
	listChangedResource = &mcp.Resource{URI: "skulk-internal://list-changed", Name: "skulk-list-changed"}
	listChangedPrompt   = &mcp.Prompt{Name: "skulk-internal/list-changed"}
)

// leveledSessions returns the open sessions that set a log level, and
// forgets the closed ones.
func (s *Server) leveledSessions() []*mcp.ServerSession {
	open := map[*mcp.ServerSession]bool{}
	for ss := range s.srv.Sessions() {
		open[ss] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*mcp.ServerSession
	for ss := range s.leveled {
		if !open[ss] {
			delete(s.leveled, ss)
			continue
		}
		out = append(out, ss)
	}
	return out
}

// Close stops the server's own work (the supervision of its children, the
// notification listeners of MCP children), waits for it, and closes the
// hosts the Server started (NewGateway), all at once, bounded by ctx. A
// Host given to NewServer stays the caller's. Call it once the Server's
// transports ended; it is idempotent and safe for concurrent use, and
// returns the first error of a host's Close.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

// close is Close's work, run once.
func (s *Server) close(ctx context.Context) error {
	s.stop()
	s.work.Wait()
	errs := make([]error, len(s.backends))
	var wg sync.WaitGroup
	for i, b := range s.backends {
		wg.Go(func() { errs[i] = b.close(ctx) }) // waited for below
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// HealthPath is the path of the health report HealthHandler serves beside
// MCP over HTTP.
const HealthPath = "/healthz"

// childHealth is one child slot in the health report.
type childHealth struct {
	Name       string `json:"name"`
	Status     string `json:"status"`
	CrashLoops int    `json:"crash_loops"`
	ID         string `json:"id,omitempty"`
	PID        int    `json:"pid,omitempty"`
	State      string `json:"state"`
	Restarts   int    `json:"restarts"`
	Running    int    `json:"running"`
}

// HealthHandler reports the state of every child as JSON: {"status",
// "children": [{"name", "status", "crash_loops", "id", "pid", "state",
// "restarts", "running"}]}, one entry per slot of each child's pool (one
// with state "down" for a child without a host: in a crash loop, or down).
// "status" is "ok" when every child has a ready slot, "degraded" when some
// have, with status 200; "down" when none has, with 503 (the MCP server
// then has nothing to call). Safe for concurrent use.
func (s *Server) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		report := struct {
			Status   string        `json:"status"`
			Children []childHealth `json:"children"`
		}{Children: []childHealth{}}
		readyChildren := 0
		for _, b := range s.backends {
			b.mu.Lock()
			h, st, loops := b.h, b.status, b.crashLoops
			b.mu.Unlock()
			if h == nil {
				report.Children = append(report.Children, childHealth{Name: b.name, Status: st.String(), CrashLoops: loops, State: "down"})
				continue
			}
			ready := false
			for _, c := range h.Children() {
				report.Children = append(report.Children, childHealth{Name: b.name, Status: st.String(), CrashLoops: loops,
					ID: c.ID, PID: c.PID, State: c.State, Restarts: c.Restarts, Running: c.Running})
				ready = ready || c.State == "ready"
			}
			if ready {
				readyChildren++
			}
		}
		switch readyChildren {
		case len(s.backends):
			report.Status = "ok"
		case 0:
			report.Status = "down"
		default:
			report.Status = "degraded"
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if readyChildren == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(report)
	})
}
