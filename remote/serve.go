package remote

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/skulkrt/skulk/remote/internal/message"

	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/recorder"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/sequence"
	"github.com/skulkrt/skulk/wire"
)

// ServeOptions configure Serve. The zero value serves with the defaults.
type ServeOptions struct {
	Options
	// ID names this serving host among the hosts of the name: it is in
	// the subjects of its calls and in its $SRV answers. "" means a new
	// random id (a NUID).
	ID string
	// Version is the service's version in $SRV answers (semantic
	// versioning); "" means "1.0.0".
	Version string
	// MaxCalls bounds the calls this host serves at once, running or
	// waiting for a slot of its pool; 0 means 1,024. An open past it is
	// refused at once: the caller's call ends with a synthetic
	// unreachable ("the serving host is full"). Each call holds at most a
	// window (Options.Window) of its caller's input, so MaxCalls × Window
	// bounds what callers can make a serving host hold.
	MaxCalls int
}

// defaultMaxCalls is ServeOptions.MaxCalls' default.
const defaultMaxCalls = 1024

// errServerFull refuses an open past ServeOptions.MaxCalls.
var errServerFull = &linkError{frame.CodeUnreachable, "the serving host is full"}

// Server serves one host's pool as a NATS service: see Serve.
//
// Close stops it; its methods are safe for concurrent use.
type Server struct {
	nc   *nats.Conn
	h    *host.Host
	name string
	id   string
	opts Options
	// maxCalls is ServeOptions.MaxCalls: open refuses past it. Opens run
	// one at a time on the endpoint's subscription, so its count-then-add
	// cannot overshoot.
	maxCalls int
	frag     int
	svc      micro.Service
	sub      *nats.Subscription // the links' messages: skulk.NAME.h.ID.*
	links    table

	stop      chan struct{}  // closed by Close: stops beat
	wg        sync.WaitGroup // beat and every serveCall
	closeOnce sync.Once
	closeErr  error
}

// Serve registers h's pool as the NATS service name on nc: a micro
// service (found with $SRV.PING, $SRV.INFO and $SRV.STATS) whose call
// endpoint, skulk.NAME.call, is in the queue group NAME, so the calls of
// every host serving name are spread across them by the servers. Each
// call runs as an h.Call; its frames travel as docs/protocol.md §10 says.
//
// nc stays the caller's: Serve neither drains nor closes it. The Server
// must be closed (Close) before h is.
//
// Errors: ErrName for a name or ID outside its rule, ErrOptions, and
// the NATS client's for a subscription that fails.
func Serve(nc *nats.Conn, name string, h *host.Host, opts ServeOptions) (*Server, error) {
	if !validName(name) {
		return nil, fmt.Errorf("%w: the service name", ErrName)
	}
	if opts.ID == "" {
		opts.ID = nuid.Next()
	}
	if !validName(opts.ID) {
		return nil, fmt.Errorf("%w: ServeOptions.ID", ErrName)
	}
	if err := opts.Options.Validate(); err != nil {
		return nil, err
	}
	if opts.MaxCalls < 0 {
		return nil, fmt.Errorf("%w: ServeOptions.MaxCalls is negative", ErrOptions)
	}
	if opts.MaxCalls == 0 {
		opts.MaxCalls = defaultMaxCalls
	}
	if opts.Version == "" {
		opts.Version = "1.0.0"
	}
	s := &Server{nc: nc, h: h, name: name, id: opts.ID, opts: opts.Options.effective(), maxCalls: opts.MaxCalls, frag: fragmentFor(nc), stop: make(chan struct{})}
	sub, err := subscribeLinks(nc, hostPrefix(name, s.id), func(m *nats.Msg) {
		if l := s.links.get(lastToken(m.Subject)); l != nil {
			l.deliver(m.Data)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("remote: serve: %w", err)
	}
	s.sub = sub
	svc, err := micro.AddService(nc, micro.Config{
		Name: name, Version: opts.Version, QueueGroup: name,
		Description: "Skulk tools served by a host's pool",
		Metadata:    map[string]string{"host_id": s.id, "pid": strconv.Itoa(os.Getpid())},
	})
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("remote: serve: %w", err)
	}
	if err := svc.AddEndpoint("call", micro.HandlerFunc(s.open), micro.WithEndpointSubject(callSubject(name))); err == nil {
		err = svc.AddEndpoint("tools", micro.HandlerFunc(s.tools), micro.WithEndpointSubject(toolsSubject(name)))
	}
	if err != nil {
		_ = svc.Stop()
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("remote: serve: %w", err)
	}
	s.svc = svc
	s.wg.Add(1)
	go func() { // stopped by Close (s.stop)
		defer s.wg.Done()
		s.links.beat(s.stop, s.opts)
	}()
	return s, nil
}

// ID returns the serving host's id.
func (s *Server) ID() string { return s.id }

// Calls returns how many calls the server is running.
func (s *Server) Calls() int { return s.links.size() }

// errServerClosing ends the calls still running when Close gives up
// waiting for them.
var errServerClosing = &linkError{frame.CodeUnreachable, "the serving host is closing"}

// Close stops the server: the service leaves the queue group and $SRV
// at once (no new call comes here), running calls may finish until ctx
// is done, then they are cancelled and their callers get a synthetic
// unreachable. Close returns once every goroutine of the server has
// exited; it is idempotent and returns the first error.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closeErr = s.svc.Stop()
		for s.links.size() > 0 && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-waitTick():
			}
		}
		for _, l := range s.links.all(true) {
			l.abort(errServerClosing)
		}
		close(s.stop)
		s.wg.Wait()
		if err := s.sub.Unsubscribe(); err != nil && s.closeErr == nil && !errors.Is(err, nats.ErrConnectionClosed) {
			s.closeErr = err
		}
	})
	return s.closeErr
}

// tools answers a tools request: the pool's tools as a hello packet
// (docs/protocol.md §10).
func (s *Server) tools(req micro.Request) {
	b, err := packetio.Encode(&wire.Hello{Protocol: []int64{wire.ProtocolVersion}, SDK: "skulk-remote", PID: int64(os.Getpid()), MaxStreams: 1, Tools: s.h.Tools()}, toolsLimits)
	if err != nil || len(b) > int(s.nc.MaxPayload()) {
		_ = req.Error("500", "the tool list does not fit a message", nil)
		return
	}
	_ = req.Respond(b)
}

// toolsLimits bound a tools answer.
var toolsLimits = wire.Limits{MaxHeader: 1 << 20, MaxAttachment: 1}

// streamLimits bound the packets of a call's streams: the protocol's
// defaults (64 KiB headers, 16 MiB media).
var streamLimits = packetio.DefaultLimits()

// open takes a call's open: it answers with an accept and starts the
// call. It runs on the endpoint's subscription and never blocks.
func (s *Server) open(req micro.Request) {
	reply := req.Reply()
	if reply == "" {
		return
	}
	m, err := message.Parse(req.Data())
	if err == nil && m.Kind != message.KindOpen {
		err = &message.Error{Field: "kind", Reason: "the first message must be an open"}
	}
	token := nuid.Next()
	l := newLink(s.nc, token, uint64(s.opts.Window), s.frag)
	if err != nil {
		l.accepted(reply, 0, 0)
		l.abort(linkViolation(err))
		return
	}
	l.accepted(reply, m.Arg, 0)
	l.opened(m.Body)
	if s.links.count() >= s.maxCalls {
		l.abort(errServerFull)
		return
	}
	if !s.links.add(l, &s.wg) { // Close, which closes the table first, waits for serveCall
		l.abort(errServerClosing)
		return
	}
	if err := l.publish(message.KindAccept, uint64(s.opts.Window), []byte(hostPrefix(s.name, s.id)+"."+token)); err != nil {
		s.links.drop(l)
		s.wg.Done()
		return
	}
	go s.serveCall(l) // ends with its call; Close waits (wg)
}

// serveCall runs one call: the caller's invoke and started, then the host
// call with its input (pumpIn) and output (here) until the terminal, end
// and fin are written or the link failed.
func (s *Server) serveCall(l *link) {
	ctx, cancel := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		l.fail(errClosed) // stops pumpIn's read
		cancel()
		close(watchDone)
		wg.Wait()
		s.links.drop(l)
		s.wg.Done()
	}()
	wg.Add(1)
	go func() { // the link's failure cancels the host call; ends with serveCall
		defer wg.Done()
		select {
		case <-l.failed:
			cancel()
		case <-watchDone:
		}
	}()

	r := packetio.NewReader(l, streamLimits)
	inv, err := readInvoke(r)
	if err != nil {
		l.abort(readCause(err))
		return
	}
	out := ctx // the output's writes end with the link, not at the deadline: the child enforces that, and its terminal must reach the caller
	if inv.TimeoutMS > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, protocol.Millis(inv.TimeoutMS))
		defer c()
	}
	o := &output{l: l, id: inv.CallID}
	if inv.Tree != "" && inv.Parent != "" { // the caller's tree and call: this call's tree names them
		ctx = recorder.WithCaller(ctx, &calllog.Link{Tree: inv.Tree, Call: inv.Parent})
	}
	call, err := s.h.Call(ctx, inv.ToolID, inv.Arguments, host.WithTrace(inv.Trace))
	var re *host.RefusedError
	var je *calllog.JournalError
	switch { // the tree the call is recorded in, a refused one's too; a failed publish fails the link
	case err == nil:
		_ = l.publish(message.KindTree, 0, []byte(call.Tree()))
	case errors.As(err, &re) && re.Tree != "":
		_ = l.publish(message.KindTree, 0, []byte(re.Tree))
	case errors.As(err, &je) && je.Tree != "":
		_ = l.publish(message.KindTree, 0, []byte(je.Tree))
	}
	if err != nil {
		code, msg := refusal(err)
		f, _ := frame.NewFailed(inv.CallID, frame.ProviderToCaller, 1, code, msg)
		o.finish(out, f, true)
		return
	}
	l.setOnCancel(call.Cancel)
	wg.Add(1)
	go func() { // ends when the link fails or closes (deferred above)
		defer wg.Done()
		pumpIn(ctx, l, r, call, inv.CallID)
	}()
	for {
		f, err := call.Recv(context.Background()) // the call always ends: cancelling ctx cancels it
		if err != nil {
			return // io.EOF after the terminal; a journal's error is the serving host's to log
		}
		if f.Sequence == 0 {
			continue // the caller's client gives the provider's started itself
		}
		if f.Kind.IsTerminal() {
			o.finish(out, f, f.Synthetic)
			continue
		}
		o.frame(out, f)
		call.Recycle(f)
	}
}

// readInvoke reads a call's invoke and the caller's started.
func readInvoke(r *packetio.Reader) (*wire.Invoke, error) {
	p, err := r.ReadPacket()
	if err != nil {
		return nil, err
	}
	inv, ok := p.(*wire.Invoke)
	if !ok {
		return nil, errUnwanted
	}
	p, err = r.ReadPacket()
	if err != nil {
		return nil, err
	}
	if st, ok := p.(*wire.Frame); !ok || st.Kind != frame.KindStarted || st.CallID != inv.CallID || st.Direction != frame.CallerToProvider {
		return nil, errUnwanted
	}
	return inv, nil
}

// readCause is the link's end for err, an error reading a stream: the
// link's own cause, or a packet that broke the protocol.
func readCause(err error) *linkError {
	var le *linkError
	if errors.As(err, &le) {
		return le
	}
	if ie, ok := protocol.AsInvalid(err); ok {
		return &linkError{frame.CodeInvalidFrame, "a packet of the call broke the protocol: invalid " + ie.Err.Error()}
	}
	if errors.Is(err, wire.ErrProtocol) {
		return &linkError{frame.CodeInvalidFrame, "a packet of the call broke the protocol"}
	}
	return &linkError{frame.CodeInvalidFrame, "the stream ended before its terminal"}
}

// refusal is the terminal a call the host refused gets.
func refusal(err error) (frame.Code, string) {
	var ce *frame.Error
	var se *host.SchemaError
	switch {
	case errors.As(err, &ce):
		return ce.Code, ce.Message
	case errors.Is(err, host.ErrUnknownTool):
		return frame.CodeInvalidFrame, "unknown tool"
	case errors.As(err, &se):
		return frame.CodeInvalidFrame, se.Error()
	case errors.Is(err, host.ErrPoolDown), errors.Is(err, host.ErrClosed):
		return frame.CodeUnreachable, "the serving host's pool is down or closing"
	case errors.Is(err, context.DeadlineExceeded):
		return frame.CodeTimeout, "the call's deadline passed"
	case errors.Is(err, context.Canceled):
		return frame.CodeCancelled, "cancelled"
	}
	return frame.CodeUnreachable, "the serving host refused the call"
}

// output writes a call's provider frames to the caller's stream; owned
// by serveCall. After a failed write it writes nothing more.
type output struct {
	l      *link
	id     string
	buf    []byte
	broken bool
}

func (o *output) frame(ctx context.Context, f frame.Frame) {
	if o.broken {
		return
	}
	f.CallID, f.Synthetic = o.id, false
	hdr, att, err := wire.AppendPacket(o.buf[:0], &wire.Frame{Frame: f}, streamLimits)
	if err != nil {
		o.broken = true
		o.l.abort(&linkError{frame.CodeInvalidFrame, "the provider's frame cannot be sent on"})
		return
	}
	o.buf = hdr[:0]
	if err := o.l.write(ctx, hdr); err == nil && len(att) > 0 {
		err = o.l.write(ctx, att)
		if err != nil {
			o.broken = true
		}
	} else if err != nil {
		o.broken = true
	}
}

// finish writes the terminal, end and fin.
func (o *output) finish(ctx context.Context, f frame.Frame, synthetic bool) {
	o.frame(ctx, f)
	if o.broken {
		return
	}
	hdr, _, err := wire.AppendPacket(o.buf[:0], &wire.End{CallID: o.id}, streamLimits)
	if err == nil {
		err = o.l.write(ctx, hdr)
	}
	if err != nil {
		o.broken = true
		return
	}
	var flags uint64
	if synthetic {
		flags = message.FinSynthetic
	}
	_ = o.l.publish(message.KindFin, flags, nil)
}

// pumpIn passes the caller's frames to the host call: chunks to Send,
// completed to CloseSend, cancelled or failed to Cancel. A packet that
// breaks the rules fails the link (the caller gets a synthetic
// invalid_frame) and cancels the call.
func pumpIn(ctx context.Context, l *link, r *packetio.Reader, call *host.Call, id string) {
	fence := sequence.New(id, frame.CallerToProvider, 1)
	for {
		p, err := r.ReadPacket()
		if err != nil {
			if l.cause() == nil {
				l.abort(readCause(err))
			}
			call.Cancel()
			return
		}
		wf, ok := p.(*wire.Frame)
		if !ok {
			l.abort(errUnwanted)
			call.Cancel()
			return
		}
		f := wf.Frame
		if err := fence.Accept(&f); err != nil {
			l.abort(&linkError{frame.CodeInvalidFrame, "a caller frame broke the sequence fence"})
			call.Cancel()
			return
		}
		switch f.Kind {
		case frame.KindChunk:
			err = call.Send(ctx, f.Payload, f.Media)
			var se *host.SchemaError
			if errors.As(err, &se) || errors.Is(err, frame.ErrInvalid) {
				l.abort(&linkError{frame.CodeInvalidFrame, "a caller chunk was refused: " + err.Error()})
				call.Cancel()
				return
			}
		case frame.KindCompleted:
			_ = call.CloseSend()
		default: // cancelled, failed
			call.Cancel()
		}
	}
}
