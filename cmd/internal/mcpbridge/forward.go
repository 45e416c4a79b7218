package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
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

// request forwards one MCP request to the child's MCP server through
// requestTool and decodes its result into out.
func (s *Server) request(ctx context.Context, method string, params any, out any) error {
	args := map[string]any{"method": method}
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return err
		}
		var p any
		if err := json.Unmarshal(b, &p); err != nil {
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
	c, err := s.h.Call(ctx, requestTool, payload, host.WithInput())
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

// childInitialize asks the child's MCP server for its initialize result,
// whose capabilities and instructions mcp serve declares as its own.
func childInitialize(ctx context.Context, s *Server) (*mcp.InitializeResult, error) {
	var res mcp.InitializeResult
	if err := s.request(ctx, methodInitialize, nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// forwardOptions sets the options of the MCP server that forward to the
// child: its capabilities (tools' list changes always announced), its
// instructions, and the handlers the go-sdk takes as options (subscribe,
// unsubscribe, complete).
func (s *Server) forwardOptions(init *mcp.InitializeResult, o *mcp.ServerOptions) {
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}, Logging: &mcp.LoggingCapabilities{}}
	if c := init.Capabilities; c != nil {
		caps.Prompts = c.Prompts
		caps.Resources = c.Resources
		caps.Completions = c.Completions
		caps.Experimental = c.Experimental
	}
	if caps.Resources == nil {
		// The links of media too large to send inline are resources.
		caps.Resources = &mcp.ResourceCapabilities{}
	}
	o.Capabilities = caps
	o.Instructions = init.Instructions
	if caps.Resources.Subscribe {
		o.SubscribeHandler = func(ctx context.Context, req *mcp.SubscribeRequest) error {
			return s.request(ctx, "resources/subscribe", req.Params, &struct{}{})
		}
		o.UnsubscribeHandler = func(ctx context.Context, req *mcp.UnsubscribeRequest) error {
			return s.request(ctx, "resources/unsubscribe", req.Params, &struct{}{})
		}
	}
	if caps.Completions != nil {
		o.CompletionHandler = func(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			var r mcp.CompleteResult
			return &r, s.request(ctx, "completion/complete", req.Params, &r)
		}
	}
}

// forwardMiddleware forwards the list, read and get requests and the log
// level to the child's server; the server's own handlers answer the rest
// (and a read of a link to media the bridge keeps).
func (s *Server) forwardMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		var out mcp.Result
		switch method {
		case "resources/list":
			out = &mcp.ListResourcesResult{}
		case "resources/templates/list":
			r, err := s.forwardTemplates(ctx, req)
			if err != nil {
				return nil, err
			}
			return r, nil
		case "resources/read":
			if p, ok := req.GetParams().(*mcp.ReadResourceParams); ok && strings.HasPrefix(p.URI, linkPrefix) {
				return next(ctx, method, req)
			}
			out = &mcp.ReadResourceResult{}
		case "prompts/list":
			out = &mcp.ListPromptsResult{}
		case "prompts/get":
			out = &mcp.GetPromptResult{}
		case "logging/setLevel":
			// The session's own level (which filters what it is sent),
			// then the child's server's.
			r, err := next(ctx, method, req)
			if err != nil {
				return r, err
			}
			if err := s.request(ctx, method, req.GetParams(), &struct{}{}); err != nil {
				s.opts.Logger.Warn("mcpbridge: logging/setLevel not forwarded", "err", err)
			}
			return r, nil
		default:
			return next(ctx, method, req)
		}
		if err := s.request(ctx, method, req.GetParams(), out); err != nil {
			return nil, err
		}
		return out, nil
	}
}

// forwardTemplates lists the child's resource templates and the bridge's
// own (links to media kept for results).
func (s *Server) forwardTemplates(ctx context.Context, req mcp.Request) (*mcp.ListResourceTemplatesResult, error) {
	var r mcp.ListResourceTemplatesResult
	if err := s.request(ctx, "resources/templates/list", req.GetParams(), &r); err != nil {
		return nil, err
	}
	if r.NextCursor == "" {
		r.ResourceTemplates = append(r.ResourceTemplates, linkResourceTemplate())
	}
	return &r, nil
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

// listen keeps a notifyTool call open to the child and passes its
// notifications to the MCP clients. When the call ends (the child died or
// was restarted) it opens it again; once it is open on a new child, it
// lists that child's tools again, which announces tools/list_changed. It
// returns when ctx is done (Close).
func (s *Server) listen(ctx context.Context) {
	first := true
	for ctx.Err() == nil {
		c, err := s.h.Call(ctx, notifyTool, nil, host.WithInput())
		if err != nil {
			sleepCtx(ctx, listenRetry)
			continue
		}
		if !first {
			s.relist()
		}
		first = false
		for f, err := range c.Frames() {
			if err != nil || f.Kind != frame.KindChunk || f.Payload == nil {
				continue
			}
			s.dispatch(ctx, f.Payload)
		}
		sleepCtx(ctx, listenRetry)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// dispatch passes one notification of the child's server on: a resource's
// update to the sessions subscribed to it, a log message to every session
// (each filters by its level).
func (s *Server) dispatch(ctx context.Context, p frame.Payload) {
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
			for ss := range s.srv.Sessions() {
				_ = ss.Log(ctx, &lm) //nolint:staticcheck // still served
			}
		}
	default:
		s.opts.Logger.Debug("mcpbridge: notification of the child's server not passed on", "method", n.Notification.Method)
	}
}

// relist makes the MCP server's tools those the host offers now (a
// restarted child may offer others): tools gone are removed, the rest
// added again; the go-sdk then sends tools/list_changed to every session.
func (s *Server) relist() {
	now := map[string]bool{}
	for _, t := range s.h.Tools() {
		if t.ID == requestTool || t.ID == notifyTool {
			continue
		}
		mt, err := mcpTool(t)
		if err != nil {
			s.opts.Logger.Warn("mcpbridge: tool not offered", "err", err)
			continue
		}
		now[t.ID] = true
		s.srv.AddTool(mt, s.handler(t.ID))
	}
	s.mu.Lock()
	var gone []string
	for id := range s.listed {
		if !now[id] {
			gone = append(gone, id)
		}
	}
	s.listed = now
	s.mu.Unlock()
	if len(gone) > 0 {
		s.srv.RemoveTools(gone...)
	}
}

// Close stops the server's own work (the notification listener of an MCP
// child) and waits for it. Call it before closing the Host; it is
// idempotent and safe for concurrent use.
func (s *Server) Close() error {
	if s.stopListen != nil {
		s.stopListen()
		s.listening.Wait()
	}
	return nil
}

// HealthPath is the path of the health report HealthHandler serves beside
// MCP over HTTP.
const HealthPath = "/healthz"

// childHealth is one child slot in the health report.
type childHealth struct {
	ID       string `json:"id,omitempty"`
	PID      int    `json:"pid,omitempty"`
	State    string `json:"state"`
	Restarts int    `json:"restarts"`
	Running  int    `json:"running"`
}

// HealthHandler reports the state of the host's children as JSON
// ({"children": [{"id", "pid", "state", "restarts", "running"}]}): status
// 200 when at least one is ready, 503 when none is (the MCP server then
// has nothing to call). Safe for concurrent use.
func (s *Server) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var report struct {
			Children []childHealth `json:"children"`
		}
		ready := false
		for _, c := range s.h.Children() {
			report.Children = append(report.Children, childHealth{ID: c.ID, PID: c.PID, State: c.State.String(), Restarts: c.Restarts, Running: c.Running})
			ready = ready || c.State == host.StateReady
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(report)
	})
}
