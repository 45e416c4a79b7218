package compare

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skulkrt/skulk/bench/internal/skulkbench"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/wire"
)

// The nested workload: calls both ways. The host calls a child's tool
// that itself calls, through its host, a host-side Go function (a Skulk
// HostTool; go-plugin: a host service the plugin calls over the
// GRPCBroker) or another child's tool (Skulk: a tool of the pool's other
// child, routed by the host; go-plugin: a host service that calls a
// second plugin), and answers with what that call returned, in the unary
// shape (a value in, a value out), so that the unary row of the same run
// is its baseline. Each is timed twice: the host's call, from its start
// to its answer (a host-made call with the nested call inside it), and
// the nested call alone, from the handler's call to its terminal, as the
// handler (the nested call's caller) sees it.
var (
	mNestHost50     = metricSpec{"nested-host-p50", "call whose handler makes a nested small call to a host-side function p50 (go-plugin: GRPCBroker callback)", "µs", false}
	mNestHost99     = metricSpec{"nested-host-p99", "call whose handler makes a nested small call to a host-side function p99 (go-plugin: GRPCBroker callback)", "µs", false}
	mNestHostOwn50  = metricSpec{"nested-host-own-p50", "the nested call to a host-side function alone p50, timed by the handler that makes it", "µs", false}
	mNestHostOwn99  = metricSpec{"nested-host-own-p99", "the nested call to a host-side function alone p99, timed by the handler that makes it", "µs", false}
	mNestChild50    = metricSpec{"nested-child-p50", "call whose handler makes a nested small call to another child's tool p50 (go-plugin: broker callback forwarded to a second plugin)", "µs", false}
	mNestChild99    = metricSpec{"nested-child-p99", "call whose handler makes a nested small call to another child's tool p99 (go-plugin: broker callback forwarded to a second plugin)", "µs", false}
	mNestChildOwn50 = metricSpec{"nested-child-own-p50", "the nested call to another child's tool alone p50, timed by the handler that makes it", "µs", false}
	mNestChildOwn99 = metricSpec{"nested-child-own-p99", "the nested call to another child's tool alone p99, timed by the handler that makes it", "µs", false}
	cNestHost       = cpuSpec{metricSpec{"nested-host-cpu", "CPU per call with a nested call to a host-side function, host + children", "µs/call", false}, mNestHost50.id, time.Microsecond}
	cNestChild      = cpuSpec{metricSpec{"nested-child-cpu", "CPU per call with a nested call to another child's tool, host + children", "µs/call", false}, mNestChild50.id, time.Microsecond}
)

// nester is a session whose child calls through its host.
type nester interface {
	session
	// nestedHost makes one call whose handler calls a host-side function
	// and returns how long that nested call took as the handler saw it.
	nestedHost(ctx context.Context) (time.Duration, error)
	// nestedChild makes one call whose handler calls another child's tool
	// and returns how long that nested call took as the handler saw it.
	nestedChild(ctx context.Context) (time.Duration, error)
}

// nestingSystem is a system that can open a nester.
type nestingSystem interface {
	openNested(ctx context.Context) (nester, error)
}

// naNester stands in for a system without calls both ways, or whose
// nested session did not start: every method returns e.
type naNester struct{ e error }

func (n naNester) err() error                             { return n.e }
func (n naNester) smallStream(context.Context, int) error { return n.err() }
func (n naNester) media(context.Context, int, int) error  { return n.err() }
func (n naNester) echo(context.Context, int) error        { return n.err() }
func (n naNester) call(context.Context) error             { return n.err() }
func (n naNester) unary(context.Context) error            { return n.err() }
func (n naNester) close() error                           { return nil }
func (n naNester) nestedHost(context.Context) (time.Duration, error) {
	return 0, n.err()
}
func (n naNester) nestedChild(context.Context) (time.Duration, error) {
	return 0, n.err()
}

// nested runs the nested workload: a session per system, opened for it
// and closed after it.
func (r *runner) nested(ctx context.Context) {
	sessions := make([]session, len(r.systems))
	for i, s := range r.systems {
		ns, ok := s.(nestingSystem)
		if !ok {
			sessions[i] = naNester{e: notApplicable("no calls from a child through its host")}
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, r.p.timeout)
		n, err := ns.openNested(sctx)
		cancel()
		if err != nil {
			if !errors.Is(err, errNotApplicable) {
				err = fmt.Errorf("start: %w", err)
			}
			sessions[i] = naNester{e: err}
			continue
		}
		sessions[i] = n
	}
	defer func() {
		for _, s := range sessions {
			s.close()
		}
	}()
	r.timedCalls(ctx, sessions, callRows{m50: mNestHost50, m99: mNestHost99, cpu: cNestHost, own50: mNestHostOwn50, own99: mNestHostOwn99},
		func(s session, ctx context.Context) (time.Duration, error) { return s.(nester).nestedHost(ctx) })
	r.timedCalls(ctx, sessions, callRows{m50: mNestChild50, m99: mNestChild99, cpu: cNestChild, own50: mNestChildOwn50, own99: mNestChildOwn99},
		func(s session, ctx context.Context) (time.Duration, error) { return s.(nester).nestedChild(ctx) })
}

// hostReply is the Skulk host-side function: it completes with its
// arguments, as the bench child's reply tool does.
var hostReply = host.HostTool{
	Tool: wire.Tool{ID: "host_reply", Description: "Completes with its arguments as its value.",
		ArgumentsSchema: map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}, "required": []any{"text"}}},
	Run: func(ctx context.Context, c *host.ToolCall) (frame.Payload, error) { return c.Arguments, nil },
}

// skulkNester is a host with two bench children that offers them
// host_reply and the children's reply tool.
type skulkNester struct {
	*skulkSession
	viaHost, viaChild frame.Payload // nest's arguments
}

func (s *skulkSystem) openNested(ctx context.Context) (nester, error) {
	h, err := host.Start(ctx, host.Config{Command: s.bin, ExtraEnv: s.env, TempDir: s.dir, TracerProvider: s.tp, PoolSize: 2,
		Calls: host.Calls{Tools: []string{"reply"}, HostTools: []host.HostTool{hostReply}}})
	if err != nil {
		return nil, fmt.Errorf("skulk: start: %w", err)
	}
	ss := &skulkSession{h: h}
	hasNest := false
	for _, t := range h.Tools() {
		hasNest = hasNest || t.ID == "nest"
	}
	if !hasNest {
		ss.close()
		return nil, notApplicable("the child has no nest tool")
	}
	var text map[string]any
	if err := smallPayload.Decode(&text); err != nil {
		ss.close()
		return nil, err
	}
	return &skulkNester{skulkSession: ss,
		viaHost:  frame.MustPayload(map[string]any{"tool": "host_reply", "args": text}),
		viaChild: frame.MustPayload(map[string]any{"tool": "reply", "args": text}),
	}, nil
}

func (sn *skulkNester) nestedHost(ctx context.Context) (time.Duration, error) {
	return sn.nest(ctx, sn.viaHost)
}

func (sn *skulkNester) nestedChild(ctx context.Context) (time.Duration, error) {
	return sn.nest(ctx, sn.viaChild)
}

// nest calls nest with args, unary-shaped, checks the nested call's
// value and returns how long the nested call took in the handler.
func (sn *skulkNester) nest(ctx context.Context, args frame.Payload) (time.Duration, error) {
	c, err := sn.h.Call(ctx, "nest", args, host.WithInput())
	if err != nil {
		return 0, err
	}
	p, err := c.Wait()
	if err != nil {
		return 0, err
	}
	took, v, err := skulkbench.ParseNestReply(p)
	if err != nil {
		return 0, err
	}
	if len(v) != len(smallPayload) {
		return 0, fmt.Errorf("skulk: nested: got %d bytes, want %d", len(v), len(smallPayload))
	}
	return took, nil
}

// grpcNester is two plugins: the first is offered a host service over
// its GRPCBroker that answers itself (mode 0) or calls the second plugin
// (mode 1).
type grpcNester struct {
	*grpcSession
	other *grpcSession
	id    uint32 // the host service's broker id
}

func (s *grpcSystem) openNested(ctx context.Context) (nester, error) {
	a, err := s.start()
	if err != nil {
		return nil, err
	}
	b, err := s.start()
	if err != nil {
		a.close()
		return nil, err
	}
	gn := &grpcNester{grpcSession: a, other: b}
	gn.id = a.bench.ServeHost(func(ctx context.Context, req []byte) ([]byte, error) {
		if len(req) < 1 {
			return nil, errors.New("go-plugin: empty host request")
		}
		if req[0] == 0 {
			return req[1:], nil
		}
		return b.bench.Call(ctx, req[1:])
	})
	return gn, nil
}

func (gn *grpcNester) nestedHost(ctx context.Context) (time.Duration, error) {
	return gn.nest(ctx, 0)
}

func (gn *grpcNester) nestedChild(ctx context.Context) (time.Duration, error) {
	return gn.nest(ctx, 1)
}

func (gn *grpcNester) nest(ctx context.Context, mode byte) (time.Duration, error) {
	req := make([]byte, 1+payloadSize)
	req[0] = mode
	out, took, err := gn.bench.Nest(ctx, gn.id, req)
	if err != nil {
		return 0, err
	}
	if len(out) != payloadSize {
		return 0, fmt.Errorf("go-plugin: nested reply of %d bytes", len(out))
	}
	return took, nil
}

func (gn *grpcNester) pids() []int { return []int{gn.pid, gn.other.pid} }

func (gn *grpcNester) close() error {
	gn.other.close()
	return gn.grpcSession.close()
}
