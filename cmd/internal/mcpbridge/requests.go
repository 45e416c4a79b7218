package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
)

// requestTool is the id of the tool skulk-mcp offers beside the MCP
// server's own: a call of it is one MCP request other than tools/call
// (docs/mcp.md, "Requests other than tools/call"). Its arguments are
// {"method", "params"}; it answers with one chunk whose inline media
// (mediaJSON) is the MCP result's JSON, then completes with no payload.
// The result rides as media, not as a payload, because a payload lives in
// a frame's header, whose size is bounded far below a resource's.
const requestTool = "mcp/request"

// mediaJSON is the media type of a requestTool result.
const mediaJSON = "application/json"

// methodInitialize is the requestTool method that returns the wrapped
// server's initialize result (its capabilities, instructions and
// implementation), which mcp serve declares as its own.
const methodInitialize = "initialize"

// Errors of requestTool calls, to match with errors.Is.
var (
	// ErrMethod: a requestTool call named a method it does not forward.
	ErrMethod = errors.New("mcpbridge: the MCP method is not forwarded")
	// ErrNoResult: a requestTool call ended without its result chunk.
	ErrNoResult = errors.New("mcpbridge: the MCP request's call ended without a result")
)

// requestArgs are a requestTool call's arguments.
type requestArgs struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// forwardedMethods are the MCP requests requestTool forwards, each to the
// client session method that sends it.
var forwardedMethods = map[string]func(ctx context.Context, cs *mcp.ClientSession, params json.RawMessage) (any, error){
	methodInitialize: func(_ context.Context, cs *mcp.ClientSession, _ json.RawMessage) (any, error) {
		return cs.InitializeResult(), nil
	},
	"resources/list":           forward((*mcp.ClientSession).ListResources),
	"resources/templates/list": forward((*mcp.ClientSession).ListResourceTemplates),
	"resources/read":           forward((*mcp.ClientSession).ReadResource),
	"resources/subscribe":      forwardEmpty((*mcp.ClientSession).Subscribe),
	"resources/unsubscribe":    forwardEmpty((*mcp.ClientSession).Unsubscribe),
	"prompts/list":             forward((*mcp.ClientSession).ListPrompts),
	"prompts/get":              forward((*mcp.ClientSession).GetPrompt),
	"completion/complete":      forward((*mcp.ClientSession).Complete),
	"logging/setLevel":         forwardEmpty((*mcp.ClientSession).SetLoggingLevel), //nolint:staticcheck // still served
}

// forward adapts a client session method to forwardedMethods.
func forward[P, R any](m func(*mcp.ClientSession, context.Context, *P) (*R, error)) func(context.Context, *mcp.ClientSession, json.RawMessage) (any, error) {
	return func(ctx context.Context, cs *mcp.ClientSession, raw json.RawMessage) (any, error) {
		p := new(P)
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, p); err != nil {
				return nil, &frame.Error{Code: frame.CodeInvalidFrame, Message: "arguments.params: not the method's params (the JSON does not decode into them)"}
			}
		}
		return m(cs, ctx, p)
	}
}

// forwardEmpty is forward for methods whose result is empty.
func forwardEmpty[P any](m func(*mcp.ClientSession, context.Context, *P) error) func(context.Context, *mcp.ClientSession, json.RawMessage) (any, error) {
	return forward(func(cs *mcp.ClientSession, ctx context.Context, p *P) (*struct{}, error) {
		return &struct{}{}, m(cs, ctx, p)
	})
}

// requestHandler is the handler of requestTool.
func (w *Wrapper) requestHandler() child.Tool {
	return child.Tool{
		ID:          requestTool,
		Description: "Forwards one MCP request other than tools/call to the wrapped MCP server (used by skulk-host mcp serve; docs/mcp.md).",
		ArgumentsSchema: map[string]any{
			"type":       "object",
			"properties": map[string]any{"method": map[string]any{"type": "string"}, "params": map[string]any{"type": "object"}},
			"required":   []any{"method"},
		},
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			for _, err := range s.Input() {
				if err != nil {
					return nil, err
				}
				return nil, &frame.Error{Code: frame.CodeInvalidFrame, Message: ErrCallerInput.Error()}
			}
			var args requestArgs
			if err := s.Arguments().Decode(&args); err != nil {
				return nil, &frame.Error{Code: frame.CodeInvalidFrame, Message: "arguments: not an object of method and params"}
			}
			f, ok := forwardedMethods[args.Method]
			if !ok {
				return nil, &frame.Error{Code: frame.CodeInvalidFrame, Message: ErrMethod.Error() + " (arguments.method)"}
			}
			res, err := f(ctx, w.sess, args.Params)
			if err != nil {
				if ctx.Err() != nil {
					return nil, context.Cause(ctx)
				}
				return nil, fmt.Errorf("mcp %s: %w", args.Method, err)
			}
			b, err := json.Marshal(res)
			if err != nil {
				return nil, err
			}
			return nil, s.Send(nil, &frame.InlineMedia{Data: b, MediaType: mediaJSON})
		},
	}
}

// contentExtras returns the fields of an MCP content that the chunk's
// plain shape has no place for (annotations, _meta, icons, a link's
// title), as the content's JSON without its bulk (text, data, blob), to
// ride in the chunk's "mcp" key; nil when it has none. mcp serve rebuilds
// the content from it (rebuildContent).
func contentExtras(c mcp.Content) map[string]any {
	extra := false
	switch c := c.(type) {
	case *mcp.TextContent:
		extra = c.Annotations != nil || ownMeta(c.Meta)
	case *mcp.ImageContent:
		extra = c.Annotations != nil || ownMeta(c.Meta)
	case *mcp.AudioContent:
		extra = c.Annotations != nil || ownMeta(c.Meta)
	case *mcp.EmbeddedResource, *mcp.ResourceLink:
		extra = true // the URI, kept exact, and every field beside it
	}
	if !extra {
		return nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	delete(m, "text")
	delete(m, "data")
	if r, ok := m["resource"].(map[string]any); ok {
		r = maps.Clone(r)
		delete(r, "text")
		delete(r, "blob")
		m["resource"] = r
	}
	return m
}

// rebuildContent makes the MCP content of a chunk that carries an "mcp"
// key (contentExtras): the shape from it, the text from the payload's
// "text", the bytes from the media.
func rebuildContent(extras map[string]any, text *string, media []byte) (mcp.Content, error) {
	m := maps.Clone(extras)
	switch m["type"] {
	case "text":
		if text != nil {
			m["text"] = *text
		}
	case "image", "audio":
		m["data"] = media
	case "resource":
		r, _ := m["resource"].(map[string]any)
		r = maps.Clone(r)
		if r == nil {
			r = map[string]any{}
		}
		switch {
		case media != nil:
			r["blob"] = media
		case text != nil:
			r["text"] = *text
		}
		m["resource"] = r
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var w wireContent
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, err
	}
	return w.c, nil
}

// wireContent decodes one MCP content of any type (the go-sdk decodes
// content only inside the results that hold it).
type wireContent struct{ c mcp.Content }

func (w *wireContent) UnmarshalJSON(b []byte) error {
	var r mcp.CallToolResult
	if err := json.Unmarshal([]byte(`{"content":[`+string(b)+`]}`), &r); err != nil {
		return err
	}
	if len(r.Content) != 1 {
		return errors.New("mcpbridge: content does not decode")
	}
	w.c = r.Content[0]
	return nil
}

// deliverLog sends a log notification of the MCP server as a chunk
// {"mcp_log": params} of the one tools/call running, so that mcp serve
// passes it to the client that made the call. MCP over stdio does not say
// which request a notification belongs to: with no call, or more than
// one, running, it is not delivered here (the wrapper's log has it). Like
// deliverProgress it runs on the read loop, so the notification comes
// before the call's result. It reports whether it was delivered.
func (w *Wrapper) deliverLog(params json.RawMessage) bool {
	var v map[string]any
	if json.Unmarshal(params, &v) != nil {
		return false
	}
	w.mu.Lock()
	var only *wrappedCall
	if len(w.calls) == 1 {
		for _, wc := range w.calls {
			only = wc
		}
	}
	w.mu.Unlock()
	if only == nil {
		return false
	}
	payload, err := frame.PayloadOf(map[string]any{"mcp_log": v})
	only.mu.Lock()
	defer only.mu.Unlock()
	if only.ended || only.failed != nil {
		return false
	}
	if err == nil {
		err = only.s.Send(payload, nil)
	}
	if err != nil {
		only.failed = err
		return false
	}
	w.logger.Info("mcp server log", "level", v["level"], "logger", v["logger"], "data", v["data"], "call_id", only.s.CallID())
	return true
}

// notifyTool is the id of the tool skulk-mcp offers for the MCP server's
// notifications that belong to no call: a call of it lasts until it is
// cancelled (or the child ends), and each notification is one chunk
// {"mcp_notification": {"method", "params"}} (docs/mcp.md). mcp serve
// keeps one such call open to each MCP child.
const notifyTool = "mcp/notifications"

// notifyHandler is the handler of notifyTool. The latest call is the
// listener; an earlier one still open gets nothing more.
func (w *Wrapper) notifyHandler() child.Tool {
	return child.Tool{
		ID:              notifyTool,
		Description:     "Streams the wrapped MCP server's notifications that belong to no call until cancelled (used by skulk-host mcp serve; docs/mcp.md).",
		ArgumentsSchema: map[string]any{"type": "object"},
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			for _, err := range s.Input() {
				if err != nil {
					return nil, err
				}
				return nil, &frame.Error{Code: frame.CodeInvalidFrame, Message: ErrCallerInput.Error()}
			}
			w.lmu.Lock()
			w.listener = s
			w.lmu.Unlock()
			defer func() {
				w.lmu.Lock()
				if w.listener == s {
					w.listener = nil
				}
				w.lmu.Unlock()
			}()
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-w.done:
				return nil, ErrServerExited
			}
		},
	}
}

// notify passes a notification of the MCP server to the notifyTool
// listener; with none open it is dropped (logged at debug). A slow
// listener holds the sender back (backpressure), as Send does.
func (w *Wrapper) notify(method string, params any) {
	w.lmu.Lock()
	defer w.lmu.Unlock()
	if w.listener == nil {
		w.logger.Debug("mcp notification with no listener dropped", "method", method)
		return
	}
	b, err := json.Marshal(params)
	if err != nil {
		return
	}
	var p any
	if json.Unmarshal(b, &p) != nil {
		return
	}
	payload, err := frame.PayloadOf(map[string]any{"mcp_notification": map[string]any{"method": method, "params": p}})
	if err == nil {
		err = w.listener.Send(payload, nil)
	}
	if err != nil {
		w.logger.Debug("mcp notification not passed on", "method", method, "err", err)
	}
}
