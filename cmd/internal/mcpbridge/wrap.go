package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/protocol"
)

// Errors of the Wrapper, to match with errors.Is.
var (
	// ErrServerStart: the MCP server could not be started, or its
	// handshake or tools/list failed.
	ErrServerStart = errors.New("mcpbridge: the MCP server did not start")
	// ErrServerExited: the MCP server's connection ended (it exited or
	// closed its stdout, or wrote on stdout a line that is not a JSON-RPC
	// message and may be an answer, which ends it: errServerOutput) while
	// the wrapper was serving.
	ErrServerExited = errors.New("mcpbridge: the MCP server exited")
	// ErrCallerInput: a Skulk caller sent input chunks to a wrapped tool;
	// MCP has no caller input, so the call fails with invalid_frame.
	ErrCallerInput = errors.New("mcpbridge: MCP tools take no caller input")
)

// terminateGrace is how long closing the MCP server waits after closing its
// stdin before SIGTERM, and after SIGTERM before SIGKILL: short, so a
// wrapper whose host went away exits within the second docs/protocol.md §5
// (item 6) allows.
const terminateGrace = 300 * time.Millisecond

// serverGoneWait bounds how long a call whose server died waits for the
// wrapper to stop serving (it then fails the call itself).
const serverGoneWait = 5 * time.Second

// WrapOptions configure Wrap.
type WrapOptions struct {
	// Command is the MCP stdio server to run, looked up in PATH when it
	// has no slash; Args its arguments. Required.
	Command string
	Args    []string
	// Stderr receives the MCP server's stderr; nil means os.Stderr (under
	// a host: the host's log and the stderr tail of a call that fails
	// because the child died). A Stderr that is not an *os.File is copied
	// to, and the copy ends 300 ms after the server exited, so that a
	// process the server started and left holding its stderr does not
	// hold the wrapper: what comes later is not copied.
	Stderr io.Writer
	// Sampling and Elicitation declare those client capabilities to the
	// MCP server: its sampling/createMessage and elicitation/create
	// requests become calls of the host tools mcp/sampling and
	// mcp/elicitation, made from the one running call they can belong to
	// (skulk-host mcp serve offers those tools, and sets
	// EnvClientRequests, which RunHosted reads when both are false).
	Sampling, Elicitation bool
	// Logger receives the wrapper's own events (a changed tool list
	// among them), its warnings of what Skulk cannot carry (fields of
	// tools and results), and the MCP server's log notifications; nil
	// means discard.
	Logger *slog.Logger
}

// Wrapper is a running MCP stdio server, seen as Skulk tools. The server
// runs in the wrapper's process group (it is not given one of its own), so
// the host's signals to the child's group reach it too. Create it with
// Wrap; Close stops the server.
type Wrapper struct {
	cmd    *exec.Cmd
	server *commandTransport // cmd's transport: its input is the one wait for cmd's exit
	sess   *mcp.ClientSession
	tools  []child.Tool
	logger *slog.Logger

	// relist says the server's tool list changed (tools/list_changed):
	// size 1, a full channel already says so. relister lists the tools
	// again and puts them in updates: size 1, the older list replaced by
	// the newer (only the latest list matters). relistDone is closed when
	// relister returned.
	relist     chan struct{}
	updates    chan []child.Tool
	relistDone chan struct{}

	done     chan struct{} // closed when the session with the server ended
	doneErr  error         // why; written before done is closed
	closing  atomic.Bool   // Close began: the end is not the server's doing
	waitDone chan struct{} // closed when the watcher goroutine returned

	tokens       atomic.Uint64
	logLevelMeta bool // set before serving: every tools/call carries logLevel in its _meta
	// lateProgress counts the progress notifications dropped because
	// their call's result had come (see deliverProgress).
	lateProgress atomic.Uint64
	mu           sync.Mutex
	calls        map[string]*wrappedCall // progress token → running call

	lmu      sync.Mutex    // held while a notification is sent to listener
	listener *child.Stream // the open notifyTool call, nil when none
}

// wrappedCall is one running call's route for progress notifications.
type wrappedCall struct {
	mu sync.Mutex // held while a notification is sent, so none is sent after ended
	s  *child.Stream
	// ended: the call's result came (or the handler returned), so the
	// stream is the result's; a notification from then on is dropped.
	ended  bool
	failed error // the first Send error
	// progressMeta: a notification sent as a chunk had a _meta of the
	// server's own, which the chunk has no field for. Written under mu
	// before ended, read by the handler after end.
	progressMeta bool
}

// end marks the call ended and returns the first error of sending its
// progress. Once it returned no progress chunk is sent, so the result's
// chunks are not interleaved with a late notification.
func (wc *wrappedCall) end() error {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	wc.ended = true
	return wc.failed
}

// Wrap starts the MCP server, completes the MCP handshake and lists its
// tools. Errors match ErrServerStart. ctx bounds the start only.
func Wrap(ctx context.Context, opts WrapOptions) (*Wrapper, error) {
	if opts.Command == "" {
		return nil, fmt.Errorf("%w: no command", ErrServerStart)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Wrapper{
		logger: opts.Logger, calls: make(map[string]*wrappedCall),
		done: make(chan struct{}), waitDone: make(chan struct{}),
		relist: make(chan struct{}, 1), updates: make(chan []child.Tool, 1), relistDone: make(chan struct{}),
	}
	w.cmd = exec.Command(opts.Command, opts.Args...)
	// A process that outlives the server and holds its stderr (a daemon
	// it started) must not hold the wait for its exit, when Stderr is no
	// file and exec copies it.
	w.cmd.WaitDelay = terminateGrace
	w.cmd.Stderr = opts.Stderr
	if w.cmd.Stderr == nil {
		w.cmd.Stderr = os.Stderr
	}
	copts := &mcp.ClientOptions{
		// No roots; sampling and elicitation when the host carries them
		// (clientRequest).
		Capabilities: &mcp.ClientCapabilities{},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			w.logger.Info("mcp server log", "level", string(req.Params.Level), "logger", req.Params.Logger, "data", req.Params.Data)
			w.notify("notifications/message", req.Params)
		},
		// Setting them also subscribes to the notifications
		// (subscriptions/listen) from protocol version 2026-07-28 on, where
		// a server sends them only to subscribers.
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case w.relist <- struct{}{}:
			default: // a listing is due already
			}
		},
		ResourceListChangedHandler: func(_ context.Context, req *mcp.ResourceListChangedRequest) {
			w.notify("notifications/resources/list_changed", req.Params)
		},
		PromptListChangedHandler: func(_ context.Context, req *mcp.PromptListChangedRequest) {
			w.notify("notifications/prompts/list_changed", req.Params)
		},
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			w.notify("notifications/resources/updated", req.Params)
		},
	}
	if opts.Sampling {
		copts.CreateMessageHandler = func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			var res mcp.CreateMessageResult
			return &res, w.clientRequest(ctx, samplingTool, req.Params, &res)
		}
	}
	if opts.Elicitation {
		copts.ElicitationHandler = func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			var res mcp.ElicitResult
			return &res, w.clientRequest(ctx, elicitationTool, req.Params, &res)
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "skulk-mcp", Version: "1"}, copts)
	w.server = &commandTransport{cmd: w.cmd, grace: terminateGrace, log: w.logger}
	t := &progressTransport{inner: w.server, w: w}
	var sopts *mcp.ClientSessionOptions
	if opts.Sampling || opts.Elicitation {
		// A server asks its client in the middle of a call only up to
		// this version.
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: ClientRequestsProtocol}
	}
	sess, err := client.Connect(ctx, t, sopts)
	if err != nil {
		w.reap()
		return nil, fmt.Errorf("%w: %s: %v", ErrServerStart, opts.Command, err)
	}
	w.sess = sess
	if res := sess.InitializeResult(); res != nil && res.Capabilities != nil && res.Capabilities.Logging != nil {
		w.setLogLevel(ctx)
	}
	var tools []*mcp.Tool
	for tool, err := range sess.Tools(ctx, nil) {
		if err != nil {
			_ = sess.Close()
			return nil, fmt.Errorf("%w: tools/list: %v", ErrServerStart, err)
		}
		tools = append(tools, tool)
	}
	w.tools = w.withOwnTools(w.skulkTools(tools, nil))
	go w.watch()    // stopped by the session ending: the server exits, or Close
	go w.relister() // stopped by the session ending (done)
	return w, nil
}

// withOwnTools adds the wrapper's own tools to the server's: its other
// requests (resources, prompts, completions, logging) go through one more
// tool, which mcp serve uses (requestTool), and its notifications through
// another (notifyTool).
func (w *Wrapper) withOwnTools(tools []child.Tool) []child.Tool {
	return append(tools, w.requestHandler(), w.notifyHandler())
}

// relistWait bounds one tools/list of a server whose list changed.
const relistWait = 30 * time.Second

// relister lists the server's tools again after each tools/list_changed
// and offers the new list on updates, until the session ends.
func (w *Wrapper) relister() {
	defer close(w.relistDone)
	// known: the names of the latest list, whose losses are logged
	// already; replaced with each list, so bounded by its length.
	known := map[string]bool{}
	for _, t := range w.tools {
		known[t.ID] = true
	}
	for {
		select {
		case <-w.done:
			return
		case <-w.relist:
		}
		// A session that ends fails the listing at once.
		ctx, cancel := context.WithTimeout(context.Background(), relistWait)
		var tools []*mcp.Tool
		var err error
		for tool, lerr := range w.sess.Tools(ctx, nil) {
			if lerr != nil {
				err = lerr
				break
			}
			tools = append(tools, tool)
		}
		cancel()
		if err != nil {
			w.logger.Warn(msgToolsRelist, "err", err)
			continue
		}
		list := w.withOwnTools(w.skulkTools(tools, known))
		known = map[string]bool{}
		for _, t := range list {
			known[t.ID] = true
		}
		w.logger.Info(msgToolsChanged, "tools", len(list)-2)
		select {
		case <-w.updates: // not taken yet: the new list replaces it
		default:
		}
		w.updates <- list
	}
}

// ToolUpdates returns the server's tool lists from its tools/list_changed
// on, each a whole list as Tools gives it, for child.Options.ToolUpdates.
// A list not taken yet is replaced by the next one.
func (w *Wrapper) ToolUpdates() <-chan []child.Tool { return w.updates }

// Messages of the wrapper's log lines that say what Skulk could not carry
// (docs/mcp.md, "What cannot be mapped, and how it shows"). They name
// fields, never their values.
const (
	// msgToolLoss, once per tool when first listed, with attributes tool
	// and fields.
	msgToolLoss = "MCP tool fields not carried by Skulk"
	// msgResultLoss, once per call, with attributes call_id, tool and
	// fields.
	msgResultLoss = "MCP result fields not carried by Skulk"
	// msgToolsChanged, on each notifications/tools/list_changed once the
	// tools are listed again, with attribute tools (how many).
	msgToolsChanged = "the MCP server's tool list changed; its tools are offered anew"
	// msgToolsRelist, when listing them again failed (attribute err); the
	// tools stay as they were until the next change.
	msgToolsRelist = "the MCP server's tool list changed, and listing it again failed"
)

// lostFields names, in the order first met, the fields of an MCP tool or
// result that Skulk has no place for. It holds names only, never values;
// its length is bounded by the fixed set of names the wrapper adds (at
// most 7).
type lostFields []string

func (l *lostFields) add(field string) {
	if !slices.Contains(*l, field) {
		*l = append(*l, field)
	}
}

// content adds what a content's annotations and _meta lose.
func (l *lostFields) content(a *mcp.Annotations, m mcp.Meta) {
	if a != nil {
		l.add("content.annotations")
	}
	if ownMeta(m) {
		l.add("content._meta")
	}
}

func (l lostFields) String() string { return strings.Join(l, ",") }

// ownMeta reports whether m has a key that is the server's own. MCP
// reserves the _meta prefixes with a label "modelcontextprotocol" or "mcp"
// (such as the SDK's io.modelcontextprotocol/serverInfo on every result):
// they carry the protocol, not the server's data, and are not counted.
// Nor are Skulk's own keys (prefix "skulk/", which skulk-host mcp serve
// puts on its tools and results: docs/mcp.md): a server that is Skulk
// served through MCP describes a Skulk call, which the wrapper's own call
// describes again.
func ownMeta(m mcp.Meta) bool {
	for k := range m {
		if !reservedMetaKey(k) {
			return true
		}
	}
	return false
}

func reservedMetaKey(k string) bool {
	prefix, _, ok := strings.Cut(k, "/")
	if !ok {
		return false
	}
	if prefix == "skulk" {
		return true
	}
	for label := range strings.SplitSeq(prefix, ".") {
		if label == "modelcontextprotocol" || label == "mcp" {
			return true
		}
	}
	return false
}

// logLevel is the level the wrapper asks a server that declares logging
// for: what the wrapper's log should show.
const logLevel mcp.LoggingLevel = "info"

// setLogLevel makes a server that declares logging send its log
// notifications: a server sends none until its client sets a level. Up to
// protocol version 2025-11-25 the level is the session's (logging/setLevel,
// set here); from 2026-07-28 on it rides on each request (its _meta, which
// handler sets on every tools/call once logLevelMeta is true). Logging is
// deprecated from 2026-07-28 on, and still served.
func (w *Wrapper) setLogLevel(ctx context.Context) {
	w.logLevelMeta = true
	if err := w.sess.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: logLevel}); err != nil { //nolint:staticcheck // see above
		w.logger.Debug("logging/setLevel refused; the level goes with each call", "err", err)
	}
}

// reap kills and waits for a server whose connection never came up,
// through the one wait for its exit (serverInput.Close), which the
// go-sdk's connection, if it got that far, runs as it closes.
func (w *Wrapper) reap() {
	if w.server.input != nil {
		_ = w.cmd.Process.Kill()
		_ = w.server.input.Close()
	}
}

// watch waits for the session's end and records why.
func (w *Wrapper) watch() {
	defer close(w.waitDone)
	err := w.sess.Wait()
	if !w.closing.Load() {
		w.doneErr = fmt.Errorf("%w: %v", ErrServerExited, errOrEOF(err))
		if errors.Is(err, errServerOutput) {
			w.doneErr = fmt.Errorf("%w: %w", ErrServerExited, err) // why it was ended, not how it exited
		} else if w.cmd.ProcessState != nil {
			w.doneErr = fmt.Errorf("%w: %s", ErrServerExited, w.cmd.ProcessState)
		}
	}
	close(w.done)
}

func errOrEOF(err error) error {
	if err == nil {
		return io.EOF
	}
	return err
}

// serverGone reports whether the session ended because the server went
// away, waiting a moment for the end to be seen: a call's error can come
// just before the session's end does.
func (w *Wrapper) serverGone() bool {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-w.done:
		return w.doneErr != nil
	case <-t.C:
		return false
	}
}

// Tools returns the server's tools at start as Skulk tools, for
// child.Options (ToolUpdates gives the later lists).
func (w *Wrapper) Tools() []child.Tool { return w.tools }

// Done is closed when the session with the server ended; Err then says why.
func (w *Wrapper) Done() <-chan struct{} { return w.done }

// Err returns why the session ended: an error matching ErrServerExited
// when the server went away by itself, nil after Close or while it runs.
func (w *Wrapper) Err() error {
	select {
	case <-w.done:
		return w.doneErr
	default:
		return nil
	}
}

// Close ends the session and stops the server: its stdin is closed, then
// SIGTERM, then SIGKILL, a short grace apart; the process is reaped. It is
// idempotent and waits for the wrapper's goroutine.
func (w *Wrapper) Close() error {
	w.closing.Store(true)
	err := w.sess.Close()
	<-w.waitDone
	<-w.relistDone
	var ee *exec.ExitError
	if errors.As(err, &ee) || errors.Is(err, exec.ErrWaitDelay) {
		// A server stopped by a signal is what Close asked for, and so is
		// one whose stderr a process it started still held.
		err = nil
	}
	return err
}

// skulkTools describes the MCP tools as Skulk tools. A tool Skulk cannot
// name is left out, and the log says so; so does it, once per tool not in
// known, when a tool has fields a Skulk tool has no place for
// (msgToolLoss).
func (w *Wrapper) skulkTools(tools []*mcp.Tool, known map[string]bool) []child.Tool {
	var out []child.Tool
	for _, t := range tools {
		if t.Name == requestTool || t.Name == notifyTool {
			w.logger.Warn("MCP tool left out: its name is the id of the wrapper's own request tool", "tool", requestTool)
			continue
		}
		if protocol.CheckCallID(t.Name) != nil {
			w.logger.Warn("MCP tool left out: its name is not a valid Skulk tool id (1 to 128 characters of UTF-8)", "length", len(t.Name))
			continue
		}
		var lost lostFields
		desc := t.Description
		switch {
		case desc == "":
			desc = t.Title
		case t.Title != "":
			lost.add("title")
		}
		ct := child.Tool{
			ID:              t.Name,
			Description:     desc,
			ArgumentsSchema: schemaOf(t.InputSchema),
		}
		switch rs := schemaOf(t.OutputSchema); {
		case rs == nil:
		case rs["type"] == "object":
			ct.ResultSchema = rs
		default:
			lost.add("outputSchema") // a result_schema is an object's
		}
		if t.Annotations != nil {
			lost.add("annotations")
		}
		if len(t.Icons) > 0 {
			lost.add("icons")
		}
		if ownMeta(t.Meta) {
			lost.add("_meta")
		}
		if len(lost) > 0 && !known[t.Name] {
			w.logger.Warn(msgToolLoss, "tool", t.Name, "fields", lost.String())
		}
		ct.Handler = w.handler(t.Name, ct.ResultSchema != nil)
		out = append(out, ct)
	}
	return out
}

// schemaOf returns a schema the client SDK decoded (a map), or nil.
func schemaOf(v any) map[string]any {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return nil
	}
	return m
}

// clientRequest carries one of the MCP server's requests to its client:
// a call of the host tool tool, with params as its arguments, from the
// running call the request belongs to; its result decodes into res.
// stdio links no request to the call it serves, so the call is the one
// running (ErrNoRunningCall when none or several run: asking the client
// of another call could show one client's data to another).
func (w *Wrapper) clientRequest(ctx context.Context, tool string, params any, res any) error {
	w.mu.Lock()
	var wc *wrappedCall
	n := 0
	for _, c := range w.calls {
		wc = c
		n++
	}
	w.mu.Unlock()
	if n != 1 {
		return ErrNoRunningCall
	}
	b, err := json.Marshal(params)
	if err != nil {
		return err
	}
	args, err := frame.PayloadOf(json.RawMessage(b))
	if err != nil {
		return err
	}
	call, err := wc.s.Call(ctx, tool, args)
	if err != nil {
		return fmt.Errorf("mcpbridge: the host does not carry %s: %w", tool, err)
	}
	_ = call.CloseSend()
	p, err := call.Wait()
	if err != nil {
		return err
	}
	return p.Decode(res)
}

// handler makes the Skulk handler of the MCP tool name.
func (w *Wrapper) handler(name string, objectResult bool) child.Handler {
	return func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		// An MCP call is a request: its whole input is its arguments. Wait
		// for the caller's half-close (at once for a plain request) and
		// refuse any chunk, rather than drop it.
		for _, err := range s.Input() {
			if err != nil {
				return nil, err
			}
			return nil, &frame.Error{Code: frame.CodeInvalidFrame, Message: ErrCallerInput.Error()}
		}
		token := "skulk-" + strconv.FormatUint(w.tokens.Add(1), 10)
		wc := &wrappedCall{s: s}
		w.mu.Lock()
		w.calls[token] = wc
		w.mu.Unlock()
		defer func() {
			wc.end()
			w.mu.Lock()
			delete(w.calls, token)
			w.mu.Unlock()
		}()
		args := map[string]any{}
		if err := s.Arguments().Decode(&args); err != nil {
			return nil, &frame.Error{Code: frame.CodeInvalidFrame, Message: "arguments: " + err.Error()}
		}
		p := &mcp.CallToolParams{Name: name, Arguments: args}
		p.SetProgressToken(token)
		if w.logLevelMeta {
			p.Meta[mcp.MetaKeyLogLevel] = logLevel
		}
		// ctx's cancellation (a Skulk cancel, the deadline, a drain) makes
		// the SDK send notifications/cancelled and return at once.
		res, err := w.sess.CallTool(ctx, p)
		if err != nil {
			if ctx.Err() == nil && w.serverGone() {
				// The server died under the call: leave the terminal to
				// the host, which sees its child exit (RunHosted ends
				// Serve, whose cancellation writes no terminal) and makes
				// up a synthetic unreachable, as for any dead child.
				t := time.NewTimer(serverGoneWait)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, fmt.Errorf("mcp tools/call: %w", err)
		}
		// The result came: from here the stream carries its chunks, and a
		// notification the server sends after its result is dropped
		// (deliverProgress) rather than sent between them.
		if err := wc.end(); err != nil {
			return nil, err
		}
		var lost lostFields
		if wc.progressMeta {
			lost.add("progress._meta")
		}
		result, err := w.resultFrames(s, res, objectResult, &lost)
		if len(lost) > 0 {
			w.logger.Warn(msgResultLoss, "call_id", s.CallID(), "tool", name, "fields", lost.String())
		}
		return result, err
	}
}

// resultFrames sends the result's content as chunks and returns its
// structured content as the completed payload, or its error. It adds to
// lost what the result has that no chunk or terminal carries.
func (w *Wrapper) resultFrames(s *child.Stream, res *mcp.CallToolResult, objectResult bool, lost *lostFields) (frame.Payload, error) {
	var errText []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok && res.IsError {
			lost.content(t.Annotations, t.Meta)
			errText = append(errText, t.Text)
			continue
		}
		payload, media, err := contentFrame(c, lost)
		if err != nil {
			return nil, err
		}
		if err := s.Send(payload, media); err != nil {
			return nil, err
		}
	}
	if ownMeta(res.Meta) {
		lost.add("_meta")
	}
	if res.IsError {
		if res.StructuredContent != nil {
			lost.add("structuredContent") // a failed terminal has no payload
		}
		msg := strings.Join(errText, "\n")
		if msg == "" {
			msg = "the MCP tool reported an error"
		}
		return nil, errors.New(msg)
	}
	if res.StructuredContent == nil {
		return nil, nil
	}
	if m, ok := res.StructuredContent.(map[string]any); ok {
		return frame.PayloadOf(m)
	}
	if objectResult {
		return nil, errors.New("the MCP tool's structured content is not an object")
	}
	return frame.PayloadOf(map[string]any{"value": res.StructuredContent})
}

// contentFrame maps one MCP content to a chunk: text as {"text"}, image
// and audio as inline media, an embedded resource as media or text with
// its uri, a resource link as {"resource_link"} (not fetched), anything
// else as {"content": its JSON}. What the plain shape has no place for
// (annotations, _meta, icons, an embedded resource's exact form) rides in
// the payload's "mcp" key (contentExtras), from which mcp serve rebuilds
// the content as it was.
func contentFrame(c mcp.Content, _ *lostFields) (frame.Payload, frame.Media, error) {
	v := map[string]any{}
	var media frame.Media
	switch c := c.(type) {
	case *mcp.TextContent:
		v["text"] = c.Text
	case *mcp.ImageContent:
		media = &frame.InlineMedia{Data: c.Data, MediaType: mediaTypeOr(c.MIMEType)}
	case *mcp.AudioContent:
		media = &frame.InlineMedia{Data: c.Data, MediaType: mediaTypeOr(c.MIMEType)}
	case *mcp.EmbeddedResource:
		if c.Resource == nil {
			return nil, nil, errors.New("the MCP tool's embedded resource has no contents")
		}
		r := c.Resource
		v["uri"] = r.URI
		if r.Blob != nil {
			media = &frame.InlineMedia{Data: r.Blob, MediaType: mediaTypeOr(r.MIMEType)}
		} else {
			v["text"], v["mime_type"] = r.Text, r.MIMEType
		}
	case *mcp.ResourceLink:
		link := map[string]any{"uri": c.URI, "name": c.Name}
		for k, v := range map[string]string{"title": c.Title, "description": c.Description, "mime_type": c.MIMEType} {
			if v != "" {
				link[k] = v
			}
		}
		if c.Size != nil {
			link["size"] = *c.Size
		}
		v["resource_link"] = link
	default:
		b, err := json.Marshal(c)
		if err != nil {
			return nil, nil, fmt.Errorf("the MCP tool's content has no JSON form: %w", err)
		}
		var j any
		if err := json.Unmarshal(b, &j); err != nil {
			return nil, nil, err
		}
		v["content"] = j
	}
	if extras := contentExtras(c); extras != nil {
		v["mcp"] = extras
	}
	if len(v) == 0 {
		return nil, media, nil
	}
	p, err := frame.PayloadOf(v)
	return p, media, err
}

func mediaTypeOr(t string) string {
	if t == "" {
		return "application/octet-stream"
	}
	return t
}

// deliverProgress sends a progress notification of a running call as its
// chunk {"progress", "total", "message"}. It runs on the connection's read
// loop, before the SDK sees anything read after it, so every notification
// the server sent before its result is a chunk before the terminal; while
// the host does not take the chunk, the loop does not read (backpressure to
// the server). A notification that comes after its call's result (the
// server sent it late, or it was read while the result's chunks were being
// sent) is dropped, counted and logged. It reports whether the notification
// was one of ours.
func (w *Wrapper) deliverProgress(params json.RawMessage) bool {
	var p mcp.ProgressNotificationParams
	if err := json.Unmarshal(params, &p); err != nil {
		return false
	}
	token, ok := p.ProgressToken.(string)
	if !ok {
		return false
	}
	w.mu.Lock()
	wc := w.calls[token]
	w.mu.Unlock()
	if wc == nil {
		if !strings.HasPrefix(token, "skulk-") {
			return false
		}
		w.dropLate() // a late one of an ended call
		return true
	}
	v := map[string]any{"progress": p.Progress}
	if p.Total != 0 {
		v["total"] = p.Total
	}
	if p.Message != "" {
		v["message"] = p.Message
	}
	payload, err := frame.PayloadOf(v)
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if wc.ended {
		w.dropLate()
		return true
	}
	if wc.failed != nil {
		return true
	}
	if ownMeta(p.Meta) {
		wc.progressMeta = true
	}
	if err == nil {
		err = wc.s.Send(payload, nil)
	}
	if err != nil {
		wc.failed = err
	}
	return true
}

// dropLate counts and logs a progress notification that came after its
// call's result.
func (w *Wrapper) dropLate() {
	n := w.lateProgress.Add(1)
	w.logger.Info("mcp progress notification after its call's result dropped", "dropped_total", n)
}

// progressTransport wraps the server's transport so that progress
// notifications are handed to their call as they are read (see
// deliverProgress), not queued behind the SDK's handler queue, where the
// call's result could overtake them.
type progressTransport struct {
	inner mcp.Transport
	w     *Wrapper
}

func (t *progressTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &progressConn{Connection: c, w: t.w}, nil
}

type progressConn struct {
	mcp.Connection
	w *Wrapper
}

func (c *progressConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		m, err := c.Connection.Read(ctx)
		if err != nil {
			return m, err
		}
		if req, ok := m.(*jsonrpc.Request); ok && !req.IsCall() && req.Method == "notifications/progress" && c.w.deliverProgress(req.Params) {
			continue
		}
		if req, ok := m.(*jsonrpc.Request); ok && !req.IsCall() && req.Method == "notifications/message" && c.w.deliverLog(req.Params) {
			continue
		}
		return m, nil
	}
}
