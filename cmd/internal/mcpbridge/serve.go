package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/wire"
)

// Keys of the _meta objects the bridge reads and writes. MCP reserves
// _meta for such extensions; the "skulk/" prefix keeps them apart.
const (
	// MetaTimeoutMS, in a tools/call request's _meta, is the call's deadline
	// in milliseconds: it becomes the invoke's timeout_ms. MCP carries no
	// deadline of its own (a client's local timeout reaches the server only
	// as a cancellation).
	MetaTimeoutMS = "skulk/timeout_ms"
	// MetaCallID, MetaTree: the Skulk call's id and its call tree's id (the
	// tree a journal keeps it in), on every result.
	MetaCallID = "skulk/call_id"
	MetaTree   = "skulk/tree"
	// MetaKind: the Skulk terminal's kind (completed, failed, cancelled);
	// "refused" for a call refused before it was sent.
	MetaKind = "skulk/kind"
	// MetaCode: the error code of a failed or cancelled call.
	MetaCode = "skulk/code"
	// MetaSynthetic: true when the host made the terminal up (the child
	// died, hung, timed out or broke the protocol).
	MetaSynthetic = "skulk/synthetic"
	// MetaTruncated: true when the result's content left chunks out
	// (ServerOptions.TextMax, a full link store); the content says how many.
	MetaTruncated = "skulk/truncated"
	// MetaSequence: the frame's sequence, on a progress notification and on
	// media content.
	MetaSequence = "skulk/sequence"
	// MetaVersion, MetaOutputSchema, MetaInputSchema: a tool's version and
	// its chunk schemas, on the tools/list entry.
	MetaVersion      = "skulk/version"
	MetaOutputSchema = "skulk/output_schema"
	MetaInputSchema  = "skulk/input_schema"
)

// Defaults of ServerOptions' zero values.
const (
	// DefaultInlineMax bounds the media bytes one result carries inline
	// (base64 in its JSON): 4 MiB, so a result stays well under the 16 MiB
	// line of the SDK's stdio transport.
	DefaultInlineMax = 4 << 20
	// DefaultTextMax bounds the text and JSON bytes one result accumulates.
	DefaultTextMax = 4 << 20
	// DefaultLinkStoreMax bounds the media bytes kept for resource links,
	// all calls together: 256 MiB; the oldest go first.
	DefaultLinkStoreMax = 256 << 20
)

// ServerOptions configure a Server. Every zero value has a documented
// meaning.
type ServerOptions struct {
	// Name and Version name the server in the MCP handshake; "" means
	// "skulk" and "dev".
	Name, Version string
	// Timeout is the deadline of a call whose request has no
	// MetaTimeoutMS; 0 means none. A request's own MetaTimeoutMS wins.
	Timeout time.Duration
	// InlineMax bounds the media bytes one result carries inline as image,
	// audio or embedded-resource content; media past it become resource
	// links the server serves (resources/read). 0 means DefaultInlineMax; a
	// negative value makes every media chunk a link.
	InlineMax int
	// TextMax bounds the text and JSON bytes one result accumulates; the
	// chunks past it are left out of the content, which says so (they
	// still went out as progress notifications). 0 means DefaultTextMax.
	TextMax int
	// LinkStoreMax bounds the media bytes kept for resource links, all
	// calls together; the oldest are dropped first, and a link to one
	// dropped reads as not found. 0 means DefaultLinkStoreMax.
	LinkStoreMax int64
	// Logger receives the bridge's own events; nil means discard.
	Logger *slog.Logger
	// Clients, when not nil, is given the MCP client session of each call
	// the server makes, so that the host tools of the same Clients (in the
	// Host's Config.Calls) reach it: an MCP server under skulk-mcp asks
	// the client of its call for sampling and elicitation through them.
	Clients *Clients
	// SSEPoll, over streamable HTTP (HTTPHandler), closes the SSE stream of
	// a request still running after it, with an SSE retry hint of the same
	// duration: the client reconnects with Last-Event-ID and gets the rest
	// of the stream, the response among it (SSE polling). It applies to
	// sessions at protocol version 2025-11-25 (the versions with priming
	// events and resumption), once per request. 0 means off: a request's
	// stream stays open until its response; a positive value under 1 ms is
	// taken as 1 ms (the retry hint is in whole milliseconds).
	SSEPoll time.Duration
}

// Server is an MCP server whose tools are the tools of supervised Skulk
// children: one Host's (NewServer), or several children's, each on a
// host of its own, their names kept apart (NewGateway). Serve its MCP()
// over any transport, or HTTPHandler over HTTP. It is safe for concurrent
// use; Close it once its transports ended.
type Server struct {
	opts     ServerOptions
	srv      *mcp.Server
	links    *linkStore
	backends []*backend
	byName   map[string]*backend
	// stop ends the supervise and listen goroutines; work waits for them.
	stop context.CancelFunc
	work sync.WaitGroup

	mu      sync.Mutex    // guards running, idle, leveled, owners and versions
	running int           // tool handlers running
	idle    chan struct{} // closed when running drops to 0; nil while 0
	leveled map[*mcp.ServerSession]bool
	owners  map[string]*backend // resource URI → the backend that listed it (gateway of several)
	// versions: the protocol version each session negotiated, by session
	// id; one entry per session, those of ended sessions dropped at the
	// next initialize.
	versions map[string]string

	closeOnce sync.Once // Close's work runs once; later callers wait for it
	closeErr  error     // Close's result, written inside closeOnce
}

// enter and leave count a running tool handler, for Wait.
func (s *Server) enter() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == 0 {
		s.idle = make(chan struct{})
	}
	s.running++
}

func (s *Server) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running--; s.running == 0 {
		close(s.idle)
		s.idle = nil
	}
}

// Wait returns once no tool handler is running, or ctx's error when it is
// done first. A transport that stopped (an HTTP server shut down) can
// leave handlers running, their calls cancelled: wait for them before
// closing the Host. Safe for concurrent use.
func (s *Server) Wait(ctx context.Context) error {
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NewServer returns a Server for the tools h offers now (h.Tools). The
// Host stays the caller's: close it after the Server (Close). A host that
// gives up restarting its child (every slot down) has its tools withdrawn
// for good: NewGateway starts a new one instead. The error says which tool
// could not be described to MCP, or that an MCP child did not describe
// itself.
func NewServer(h *host.Host, opts ServerOptions) (*Server, error) {
	b := &backend{retryMin: DefaultRetryMin, retryMax: DefaultRetryMax, h: h, status: StatusUp, changed: make(chan struct{})}
	return newServer(opts, []*backend{b})
}

// NewGateway starts every child's host (Child.Start), at once, and returns
// a Server for all of their tools, each child's names kept apart by its
// Name. Every child is supervised on its own: its host restarts it with
// backoff; a host that gives up (a crash loop) has its tools withdrawn
// (tools/list_changed) while new hosts are started, and offered again when
// one is up. A child that does not start at first fails NewGateway, whose
// error names it, after the hosts that did start are closed. Errors match
// ErrNoChildren, ErrChildName, ErrChildStart, or wrap the failed start's.
func NewGateway(ctx context.Context, children []Child, opts ServerOptions) (*Server, error) {
	if err := validateChildren(children); err != nil {
		return nil, err
	}
	bs := make([]*backend, len(children))
	errs := make([]error, len(children))
	var starts sync.WaitGroup
	for i, c := range children {
		b := &backend{name: c.Name, start: c.Start, retryMin: c.RetryMin, retryMax: c.RetryMax, changed: make(chan struct{}), status: StatusUp, owned: true}
		if b.retryMin == 0 {
			b.retryMin = DefaultRetryMin
		}
		if b.retryMax == 0 {
			b.retryMax = max(DefaultRetryMax, b.retryMin)
		}
		bs[i] = b
		starts.Go(func() { // ends with the start; waited for below
			b.h, errs[i] = c.Start(ctx)
		})
	}
	starts.Wait()
	var first error
	for i, err := range errs {
		if err != nil && first == nil {
			first = fmt.Errorf("children[%d] (%q): %w", i, children[i].Name, err)
		}
	}
	if first != nil {
		closeBackends(bs)
		return nil, first
	}
	s, err := newServer(opts, bs)
	if err != nil {
		closeBackends(bs)
		return nil, err
	}
	return s, nil
}

// closeBackends closes the hosts of backends that never served.
func closeBackends(bs []*backend) {
	ctx, cancel := context.WithTimeout(context.Background(), hostCloseWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, b := range bs {
		if b.h != nil {
			wg.Go(func() { _ = b.h.Close(ctx) }) // waited for below
		}
	}
	wg.Wait()
}

// newServer builds the Server of running backends and starts their
// supervision.
func newServer(opts ServerOptions, bs []*backend) (*Server, error) {
	if opts.Name == "" {
		opts.Name = "skulk"
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	switch {
	case opts.InlineMax == 0:
		opts.InlineMax = DefaultInlineMax
	case opts.InlineMax < 0:
		opts.InlineMax = 0
	}
	if opts.TextMax <= 0 {
		opts.TextMax = DefaultTextMax
	}
	if opts.LinkStoreMax <= 0 {
		opts.LinkStoreMax = DefaultLinkStoreMax
	}
	if opts.SSEPoll > 0 {
		opts.SSEPoll = max(opts.SSEPoll, time.Millisecond)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, links: newLinkStore(opts.LinkStoreMax), backends: bs, byName: map[string]*backend{},
		leveled: map[*mcp.ServerSession]bool{}, owners: map[string]*backend{}, versions: map[string]string{}}
	for _, b := range bs {
		b.s = s
		b.listed = map[string]bool{}
		s.byName[b.name] = b
	}
	so := &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}}}
	var mcpChildren []*backend
	for _, b := range bs {
		tools := b.h.Tools()
		ids := make([]string, len(tools))
		for i, t := range tools {
			ids[i] = t.ID
		}
		if !hasRequestTool(ids) {
			continue
		}
		// An MCP server under skulk-mcp: its other requests are
		// forwarded, and its capabilities are the server's.
		b.mcpChild = true
		ctx, cancel := context.WithTimeout(context.Background(), initializeWait)
		init, err := childInitialize(ctx, b)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("mcpbridge: the MCP server of child %q did not describe itself: %w", b.name, err)
		}
		b.init = init
		mcpChildren = append(mcpChildren, b)
	}
	if len(mcpChildren) > 0 {
		s.forwardOptions(mcpChildren, so)
	}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: opts.Name, Version: opts.Version}, so)
	if len(mcpChildren) > 0 {
		s.srv.AddReceivingMiddleware(s.forwardMiddleware)
	}
	s.srv.AddReceivingMiddleware(s.recordVersion)
	if opts.SSEPoll > 0 {
		s.srv.AddReceivingMiddleware(s.ssePoll)
	}
	for _, b := range bs {
		b.toolsNew = b.h.ToolsChanged() // before Tools: a later change closes it
		for _, t := range b.h.Tools() {
			if t.ID == requestTool || t.ID == notifyTool {
				continue
			}
			mt, err := mcpTool(t)
			if err != nil {
				return nil, err
			}
			mt.Name = b.mcpName(t.ID)
			s.srv.AddTool(mt, s.handler(b, t.ID))
			b.listed[mt.Name] = true
		}
		b.announced, _ = readyIDs(b.h)
	}
	s.srv.AddResourceTemplate(linkResourceTemplate(), s.links.read)
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	for _, b := range bs {
		s.work.Go(func() { b.supervise(ctx) }) // stopped by Close
		if b.mcpChild && hasTool(b.h.Tools(), notifyTool) {
			s.work.Go(func() { b.listen(ctx) }) // stopped by Close
		}
	}
	return s, nil
}

// initializeWait bounds NewServer's wait for a child MCP server's
// initialize result.
const initializeWait = 30 * time.Second

// linkResourceTemplate is the template of the links to media the server
// keeps (ServerOptions.InlineMax).
func linkResourceTemplate() *mcp.ResourceTemplate {
	return &mcp.ResourceTemplate{
		Name:        "skulk-media",
		Description: "Media a Skulk call produced that was too large to send inline; the tool result links to it.",
		URITemplate: linkTemplate,
	}
}

// MCP returns the MCP server, to Run over a transport.
func (s *Server) MCP() *mcp.Server { return s.srv }

// HTTPHandler returns a streamable HTTP handler of the server (MCP's
// streamable HTTP transport), with a session per client, event ids and
// resumption (Last-Event-ID) of a dropped stream; a request the client
// cancelled gets no response on its stream. Each request of a session is
// served at the protocol version the session negotiated when its
// Mcp-Protocol-Version header is absent or older; ServerOptions.SSEPoll
// closes the streams of long requests.
func (s *Server) HTTPHandler() http.Handler {
	na := newNoAnswerHTTP()
	na.next = s.streamableHandler(na.store(mcp.NewMemoryEventStore(nil)))
	return sessionVersionHTTP{next: na, s: s}
}

func (s *Server) streamableHandler(events mcp.EventStore) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.srv }, &mcp.StreamableHTTPOptions{
		Logger:                       s.opts.Logger,
		PropagateRequestCancellation: true,
		// Event ids on every SSE event and replay after Last-Event-ID,
		// so a client whose stream dropped gets the rest of its call
		// (bounded: the store drops the oldest past 10 MiB).
		EventStore: events,
	})
}

// mcpTool describes a Skulk tool to MCP: the arguments schema is the input
// schema (MCP insists on "type": "object", which Skulk arguments are
// anyway), the result schema the output schema.
func mcpTool(t wire.Tool) (*mcp.Tool, error) {
	desc := t.Description
	if !t.NoInput {
		// The tool may read caller input, which MCP cannot give it; a
		// tool that says it reads none (no_input) needs no note.
		desc = strings.TrimSpace(desc + " (Through MCP this tool gets no caller input: MCP has no input stream.)")
	}
	in := map[string]any{"type": "object"}
	if t.ArgumentsSchema != nil {
		switch typ, ok := t.ArgumentsSchema["type"]; {
		case !ok:
			in = maps.Clone(t.ArgumentsSchema)
			in["type"] = "object"
		case typ == "object":
			in = t.ArgumentsSchema
		default:
			return nil, fmt.Errorf("mcpbridge: tool %q: arguments_schema's type is not \"object\"", t.ID)
		}
	}
	mt := &mcp.Tool{Name: t.ID, Description: desc, InputSchema: in}
	if t.ResultSchema != nil {
		mt.OutputSchema = t.ResultSchema
	}
	meta := mcp.Meta{}
	if t.Version != "" {
		meta[MetaVersion] = t.Version
	}
	if t.OutputSchema != nil {
		meta[MetaOutputSchema] = t.OutputSchema
	}
	if t.InputSchema != nil {
		meta[MetaInputSchema] = t.InputSchema
	}
	if len(meta) > 0 {
		mt.Meta = meta
	}
	return mt, nil
}

// errTimeoutMeta: a request's MetaTimeoutMS is not a usable number.
var errTimeoutMeta = errors.New("_meta " + MetaTimeoutMS + " must be a positive number of milliseconds")

// callContext derives the call's context from the request's: its deadline
// from MetaTimeoutMS, else ServerOptions.Timeout. The request's context is
// cancelled by an MCP cancellation, which cancels the Skulk call.
func (s *Server) callContext(ctx context.Context, meta mcp.Meta) (context.Context, context.CancelFunc, error) {
	d := s.opts.Timeout
	if v, ok := meta[MetaTimeoutMS]; ok {
		ms, ok := v.(float64)
		if !ok || ms <= 0 || math.IsInf(ms, 0) || ms > float64(math.MaxInt64/int64(time.Millisecond)) {
			return nil, nil, errTimeoutMeta
		}
		d = time.Duration(ms * float64(time.Millisecond))
	}
	if d > 0 {
		c, cancel := context.WithTimeout(ctx, d)
		return c, cancel, nil
	}
	c, cancel := context.WithCancel(ctx)
	return c, cancel, nil
}

// traceLimits are the W3C trace context keys a tools/call request's _meta
// may carry (as MCP clients that trace send them) and the longest value of
// each that is read: the W3C limits for tracestate and baggage, room for a
// later traceparent version (version 00 is 55 characters).
var traceLimits = map[string]int{"traceparent": 256, "tracestate": 512, "baggage": 8192}

// traceOf returns the trace context of a request's _meta, for the call's
// invoke (the host's span becomes its child); nil when it has none. A value
// that is not a string, or longer than traceLimits allows, is
// ignored, as one that does not parse is: it never fails the call.
func traceOf(meta mcp.Meta) map[string]string {
	var m map[string]string
	for k, limit := range traceLimits {
		if v, ok := meta[k].(string); ok && v != "" && len(v) <= limit {
			if m == nil {
				m = make(map[string]string, len(traceLimits))
			}
			m[k] = v
		}
	}
	return m
}

// handler makes the MCP tool handler of the Skulk tool id of b.
func (s *Server) handler(b *backend, id string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s.enter()
		defer s.leave()
		var args frame.Payload
		if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
			p, err := frame.PayloadOf(json.RawMessage(raw))
			if err != nil {
				return refusedResult("arguments must be a JSON object"), nil
			}
			args = p
		}
		callCtx, cancel, err := s.callContext(ctx, req.Params.Meta)
		if err != nil {
			return refusedResult(err.Error()), nil
		}
		defer cancel()
		// MCP has no caller input: the call is a plain request, its input
		// closed with the invoke.
		opts := []host.CallOption{host.WithInput()}
		if tr := traceOf(req.Params.Meta); tr != nil {
			opts = append(opts, host.WithTrace(tr))
		}
		h := b.host()
		if h == nil {
			r := refusedResult("the child is in a crash loop: " + host.ErrPoolDown.Error())
			r.Meta[MetaCode] = frame.CodeUnreachable.String()
			return r, nil
		}
		// The client session is reserved before the call starts, so a
		// sampling or elicitation request of its child finds it (or
		// waits for it) however soon it asks.
		var reserved *clientReservation
		if s.opts.Clients != nil && req.Session != nil {
			reserved = s.opts.Clients.reserve()
		}
		c, err := h.Call(callCtx, id, args, opts...)
		if err != nil {
			reserved.cancel()
			return callRefused(err), nil
		}
		defer reserved.set(c.Tree(), ctx, req.Session)()
		rb := &resultBuilder{s: s, mcp: b.mcpChild, call: c, token: req.Params.GetProgressToken(), session: req.Session}
		for {
			// Not bound by ctx: a cancelled call still ends with its
			// terminal, which the host guarantees.
			f, err := c.Recv(context.Background())
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rb.journalErr = err
				break
			}
			rb.add(ctx, f)
		}
		if _, err := c.Wait(); err != nil { // at once: the output was read to its end
			var ce *frame.Error
			if errors.As(err, &ce) {
				rb.stderr = host.Stderr(err)
			}
		}
		return rb.result(), nil
	}
}

// refusedResult is the tool error result of a call refused before it was
// sent.
func refusedResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: "refused: " + msg}},
		Meta:    mcp.Meta{MetaKind: "refused"},
	}
}

// callRefused maps an error of host.Call. Its text names fields and
// describes values, never quotes them (host's contract).
func callRefused(err error) *mcp.CallToolResult {
	var ce *frame.Error
	if errors.As(err, &ce) {
		// The child went away as the call started.
		text := failureText(frame.KindFailed, ce.Code, ce.Message, ce.Synthetic)
		if ce.Synthetic && host.Stderr(err) != "" {
			text += "\n" + stderrTailText(host.Stderr(err))
		}
		r := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
		r.Meta = mcp.Meta{MetaKind: frame.KindFailed.String(), MetaCode: ce.Code.String(), MetaSynthetic: ce.Synthetic}
		return r
	}
	r := refusedResult(err.Error())
	var re *host.RefusedError
	if errors.As(err, &re) && re.Tree != "" {
		r.Meta[MetaTree] = re.Tree
	}
	if errors.Is(err, host.ErrPoolDown) {
		r.Meta[MetaCode] = frame.CodeUnreachable.String()
	}
	return r
}

// StderrTailMax bounds the bytes of a dead child's stderr that a synthetic
// failure's text carries: its last bytes, escaped.
const StderrTailMax = 2 << 10

// stderrTailText is the text that shows a dead child's stderr tail: its
// last StderrTailMax bytes (from a line start when one is near), quoted
// as a Go string, so control bytes and invalid UTF-8 show escaped and
// cannot pass for the bridge's own text.
func stderrTailText(tail string) string {
	cut := len(tail) > StderrTailMax
	if cut {
		tail = tail[len(tail)-StderrTailMax:]
		if i := strings.IndexByte(tail, '\n'); i >= 0 && i < len(tail)-1 {
			tail = tail[i+1:]
		}
	}
	tail = strings.TrimRight(tail, "\n")
	label := "the child's stderr before it died"
	if cut {
		label += fmt.Sprintf(" (last %d bytes)", len(tail))
	}
	return label + ": " + strconv.Quote(tail)
}

// failureText is the text of a failed or cancelled call's error content.
func failureText(kind frame.Kind, code frame.Code, msg string, synthetic bool) string {
	var b strings.Builder
	b.WriteString(kind.String())
	if code != 0 { // a cancelled call may have no error, so no code
		b.WriteString(": " + code.String())
	}
	if msg != "" {
		b.WriteString(": " + msg)
	}
	if synthetic {
		b.WriteString(" (synthetic: made up by the host, not the provider)")
	}
	return b.String()
}

// resultBuilder turns a call's frames into progress notifications and the
// content of its result. It belongs to the handler's goroutine.
type resultBuilder struct {
	s       *Server
	mcp     bool // the call's child is an MCP server under skulk-mcp
	call    *host.Call
	token   any // the client's progress token; nil: no notifications
	session *mcp.ServerSession

	content    []mcp.Content
	text       *strings.Builder // the open run of text chunks, nil when none
	lines      *strings.Builder // the open run of JSON chunks, nil when none
	textBytes  int              // text and JSON accumulated, against TextMax
	inline     int              // media bytes inline, against InlineMax
	chunks     int
	dropped    int // chunks left out of the content
	terminal   frame.Frame
	journalErr error  // a required journal's error after the terminal
	stderr     string // the dead child's stderr tail, for a synthetic failure
}

func (b *resultBuilder) add(ctx context.Context, f frame.Frame) {
	switch {
	case f.Kind == frame.KindChunk && b.mcp:
		b.addMCP(ctx, f)
	case f.Kind == frame.KindChunk:
		b.chunks++
		b.notify(ctx, f)
		b.addChunk(f)
	case f.Kind.IsTerminal():
		b.terminal = f
	}
}

// notify sends the chunk as a progress notification when the client asked
// for them: progress counts the chunks, the message is the chunk's text
// (or its payload as JSON, or a media summary).
func (b *resultBuilder) notify(ctx context.Context, f frame.Frame) {
	if b.token == nil || b.session == nil {
		return
	}
	p := &mcp.ProgressNotificationParams{
		ProgressToken: b.token,
		Progress:      float64(b.chunks),
		Message:       chunkSummary(f),
		Meta:          mcp.Meta{MetaSequence: f.Sequence},
	}
	if err := b.session.NotifyProgress(ctx, p); err != nil {
		// The client is gone or cancelled: the call ends through ctx.
		b.s.opts.Logger.Debug("mcpbridge: progress notification not sent", "call", b.call.ID(), "err", err)
	}
}

// chunkSummary is the message of a chunk's progress notification.
func chunkSummary(f frame.Frame) string {
	var parts []string
	if f.Payload != nil {
		if t, ok := textOnly(f.Payload); ok {
			parts = append(parts, t)
		} else {
			parts = append(parts, compactJSON(f.Payload))
		}
	}
	switch m := f.Media.(type) {
	case *frame.InlineMedia:
		parts = append(parts, fmt.Sprintf("[media %s, %d bytes]", m.MediaType, len(m.Data)))
	case *frame.BlobMedia:
		parts = append(parts, fmt.Sprintf("[blob %s, %d bytes]", m.MediaType, m.SizeBytes))
	}
	return strings.Join(parts, " ")
}

// textOnly returns the text of a text chunk: a payload whose one key is
// "text", a string. A payload with other keys beside it is not text: as
// JSON it keeps them.
func textOnly(p frame.Payload) (string, bool) {
	r := mpack.NewReader(p)
	if n, err := r.ReadMapLen(); err != nil || n != 1 {
		return "", false
	}
	return p.Text()
}

func compactJSON(p frame.Payload) string {
	b, err := p.MarshalJSON()
	if err != nil {
		return "{}"
	}
	return string(b)
}

// addPayload adds a chunk's payload to the text runs, or counts it dropped
// when it would take the text over TextMax.
func (b *resultBuilder) addPayload(p frame.Payload) {
	text, isText := textOnly(p)
	if !isText {
		text = compactJSON(p) + "\n"
	}
	if b.textBytes+len(text) > b.s.opts.TextMax {
		b.dropped++
		return
	}
	b.textBytes += len(text)
	if isText {
		b.lines = b.closeRun(b.lines)
		if b.text == nil {
			b.text = &strings.Builder{}
		}
		b.text.WriteString(text)
		return
	}
	b.text = b.closeRun(b.text)
	if b.lines == nil {
		b.lines = &strings.Builder{}
	}
	b.lines.WriteString(text)
}

// addChunk adds the chunk to the content: runs of text chunks become one
// text content, runs of other payloads one text content of JSON lines,
// media its own content.
func (b *resultBuilder) addChunk(f frame.Frame) {
	if f.Payload != nil {
		b.addPayload(f.Payload) // its media is looked at even when the text is dropped
	}
	if f.Media == nil {
		return
	}
	b.text, b.lines = b.closeRun(b.text), b.closeRun(b.lines)
	switch m := f.Media.(type) {
	case *frame.InlineMedia:
		b.addMedia(f.Sequence, m)
	case *frame.BlobMedia:
		// Skulk passes blobs on and never resolves them; neither does the
		// bridge: the link names the blob, reading it gives not found.
		size := m.SizeBytes
		b.content = append(b.content, &mcp.ResourceLink{
			URI: "skulk-blob:" + m.BlobID, Name: m.BlobID, MIMEType: m.MediaType, Size: &size,
			Meta: mcp.Meta{MetaSequence: f.Sequence, "skulk/sha256": m.SHA256},
		})
	}
}

// closeRun ends an open run of text as one text content.
func (b *resultBuilder) closeRun(run *strings.Builder) *strings.Builder {
	if run != nil && run.Len() > 0 {
		b.content = append(b.content, &mcp.TextContent{Text: run.String()})
	}
	return nil
}

// addMedia adds inline media: image or audio content (by media type), or
// an embedded resource, while the result's inline budget lasts; past it,
// a resource link the server serves.
func (b *resultBuilder) addMedia(seq uint64, m *frame.InlineMedia) {
	meta := mediaMeta(seq, m)
	if b.inline+len(m.Data) <= b.s.opts.InlineMax {
		b.inline += len(m.Data)
		typ := strings.ToLower(strings.TrimSpace(strings.SplitN(m.MediaType, ";", 2)[0]))
		switch {
		case strings.HasPrefix(typ, "image/"):
			b.content = append(b.content, &mcp.ImageContent{Data: m.Data, MIMEType: m.MediaType, Meta: meta})
		case strings.HasPrefix(typ, "audio/"):
			b.content = append(b.content, &mcp.AudioContent{Data: m.Data, MIMEType: m.MediaType, Meta: meta})
		default:
			b.content = append(b.content, &mcp.EmbeddedResource{Meta: meta, Resource: &mcp.ResourceContents{
				URI: fmt.Sprintf("skulk://call/%s/%d", b.call.ID(), seq), MIMEType: m.MediaType, Blob: m.Data,
			}})
		}
		return
	}
	uri, ok := b.s.links.put(m.Data, m.MediaType)
	if !ok {
		b.dropped++
		return
	}
	size := int64(len(m.Data))
	b.content = append(b.content, &mcp.ResourceLink{
		URI: uri, Name: fmt.Sprintf("media-%06d", seq), MIMEType: m.MediaType, Size: &size, Meta: meta,
	})
}

// mediaMeta keeps what MCP content has no field for.
func mediaMeta(seq uint64, m *frame.InlineMedia) mcp.Meta {
	meta := mcp.Meta{MetaSequence: seq}
	if m.Codec != "" {
		meta["skulk/codec"] = m.Codec
	}
	if m.SampleRate > 0 {
		meta["skulk/sample_rate"] = m.SampleRate
	}
	if m.Channels > 0 {
		meta["skulk/channels"] = m.Channels
	}
	if m.TimestampSeconds != nil {
		meta["skulk/timestamp_seconds"] = *m.TimestampSeconds
	}
	if m.DurationSeconds != nil {
		meta["skulk/duration_seconds"] = *m.DurationSeconds
	}
	return meta
}

// result is the MCP result of the call: the content accumulated, then the
// completed payload as structured content (and its JSON as text), or the
// failure as a tool error.
func (b *resultBuilder) result() *mcp.CallToolResult {
	b.text, b.lines = b.closeRun(b.text), b.closeRun(b.lines)
	r := &mcp.CallToolResult{}
	meta := mcp.Meta{MetaCallID: b.call.ID(), MetaTree: b.call.Tree()}
	f := b.terminal
	switch f.Kind {
	case frame.KindCompleted:
		if f.Payload != nil && b.mcp {
			// The server's content came as chunks; its structured
			// content is the payload ({"value": v} when not an object).
			r.StructuredContent = json.RawMessage(compactJSON(f.Payload))
		} else if f.Payload != nil {
			b.content = append(b.content, &mcp.TextContent{Text: compactJSON(f.Payload)})
			r.StructuredContent = json.RawMessage(compactJSON(f.Payload))
		}
	case frame.KindFailed, frame.KindCancelled:
		r.IsError = true
		var code frame.Code
		var msg string
		if f.Error != nil {
			code, msg = f.Error.Code, f.Error.Message
			meta[MetaCode] = code.String()
		}
		meta[MetaSynthetic] = f.Synthetic
		text := failureText(f.Kind, code, msg, f.Synthetic)
		if f.Synthetic && b.stderr != "" {
			text += "\n" + stderrTailText(b.stderr)
		}
		b.content = append(b.content, &mcp.TextContent{Text: text})
	default:
		r.IsError = true
		b.content = append(b.content, &mcp.TextContent{Text: "the call's output ended without a terminal"})
	}
	if f.Kind != 0 {
		meta[MetaKind] = f.Kind.String()
	}
	if b.dropped > 0 {
		meta[MetaTruncated] = true
		b.content = append(b.content, &mcp.TextContent{Text: fmt.Sprintf(
			"[%d of %d chunks left out of this result: over its size bounds; progress notifications and a journal carry them]", b.dropped, b.chunks)})
	}
	if b.journalErr != nil {
		r.IsError = true
		meta["skulk/journal"] = "end not confirmed"
		text := "the journal did not confirm the call's end"
		if !errors.Is(b.journalErr, calllog.ErrJournalEnd) {
			text = "reading the call's output failed"
		}
		b.content = append(b.content, &mcp.TextContent{Text: text + ": " + b.journalErr.Error()})
	}
	if b.content == nil {
		b.content = []mcp.Content{}
	}
	r.Content, r.Meta = b.content, meta
	return r
}
