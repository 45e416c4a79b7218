package child_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

func TestHandlerPanic(t *testing.T) {
	tool := child.Tool{ID: "panics", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		panic("secret-token-123")
	}}
	var logs testnet.Buffer
	opts := demoOptions(tool)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	srv := serveChild(t, config{}, opts)
	h := srv.host
	_, err := h.Handshake(ctxT(t), nil)
	require.NoError(t, err)
	s := dial(t, h)
	begin(t, s, "pa1", "panics", nil)
	res := readCall(t, s, "pa1")
	requireTerminal(t, res, frame.KindFailed, frame.CodeProviderError)
	require.NotContains(t, res.Terminal.Error.Message, "secret")
	// The provider's own log has the value and the stack; the caller not.
	require.Contains(t, logs.String(), `panic=secret-token-123`)
	require.Contains(t, logs.String(), "stack=")
	// It names the call and its tree (the call's own id: no tree given)
	// with the keys the host uses too.
	require.Contains(t, logs.String(), "call_id=pa1 tree_id=pa1 ")
	// The child goes on.
	_, _, err = h.Ping(ctxT(t), 1)
	require.NoError(t, err)
}

func TestHandlerContract(t *testing.T) {
	type report struct {
		second, afterTerminal error
		callerResult          frame.Payload
		input                 int
	}
	reports := make(chan report, 1)
	tool := child.Tool{ID: "twice", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		var r report
		for _, err := range s.Input() {
			if err != nil {
				return nil, err
			}
			r.input++
		}
		r.callerResult = s.CallerResult()
		// Output goes on after the caller's half-close.
		if err := s.Send(payload(map[string]any{"n": 1}), nil); err != nil {
			return nil, err
		}
		if err := s.Complete(payload(map[string]any{"first": true})); err != nil {
			return nil, err
		}
		r.second = s.Complete(payload(map[string]any{"second": true}))
		r.afterTerminal = s.Send(payload(map[string]any{"n": 2}), nil)
		reports <- r
		return nil, errors.New("ignored: the terminal was written")
	}}
	h, _ := startServe(t, config{extra: []child.Tool{tool}})
	s := dial(t, h)
	begin(t, s, "tw1", "twice", nil)
	require.NoError(t, s.Chunk("tw1", 1, payload(map[string]any{"a": 1}), nil))
	require.NoError(t, s.Complete("tw1", 2, payload(map[string]any{"final": true})))
	res := readCall(t, s, "tw1")
	requireTerminal(t, res, frame.KindCompleted, 0)
	require.Len(t, res.Frames, 2)
	require.Equal(t, true, decode(t, res.Terminal.Payload)["first"])
	r := <-reports
	require.ErrorIs(t, r.second, child.ErrTerminated)
	require.ErrorIs(t, r.afterTerminal, child.ErrTerminated)
	require.Equal(t, 1, r.input)
	require.Equal(t, true, decode(t, r.callerResult)["final"])
}

func TestHandlerSeesCause(t *testing.T) {
	causes := make(chan error, 1)
	tool := child.Tool{ID: "waits", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		<-ctx.Done()
		// A frame after cancellation is refused with the cause.
		err := s.Send(payload(map[string]any{"late": true}), nil)
		causes <- err
		return payload(map[string]any{"ignored": true}), nil
	}}
	h, _ := startServe(t, config{extra: []child.Tool{tool}})
	s := dial(t, h)
	begin(t, s, "hc1", "waits", nil)
	require.NoError(t, s.CancelCall("hc1", 1))
	res := readCall(t, s, "hc1")
	requireTerminal(t, res, frame.KindCancelled, 0)
	require.Len(t, res.Frames, 1)
	require.ErrorIs(t, <-causes, child.ErrCallerCancelled)

	s2 := dial(t, h)
	require.NoError(t, s2.Invoke("hc2", "waits", nil, 50*time.Millisecond))
	require.NoError(t, s2.Started("hc2"))
	requireTerminal(t, readCall(t, s2, "hc2"), frame.KindFailed, frame.CodeTimeout)
	require.ErrorIs(t, <-causes, child.ErrTimeout)
}

func TestHandlerErrors(t *testing.T) {
	sendErr := make(chan error, 1)
	tools := []child.Tool{
		{ID: "coded", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			return nil, &frame.Error{Code: frame.CodeUnreachable, Message: "backend down"}
		}},
		{ID: "cancels", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			return nil, &frame.Error{Code: frame.CodeCancelled}
		}},
		{ID: "huge", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			// A chunk whose header exceeds max_header is refused to the
			// handler, and a result that does not fit fails the call.
			big := payload(map[string]any{"pad": strings.Repeat("x", 70_000)})
			sendErr <- s.Send(big, nil)
			return big, nil
		}},
		{ID: "empty", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			return nil, s.Send(nil, nil)
		}},
	}
	h, _ := startServe(t, config{extra: tools})
	call := func(id, tool string) *frame.Frame {
		s := dial(t, h)
		begin(t, s, id, tool, nil)
		require.NoError(t, s.Complete(id, 1, nil))
		res := readCall(t, s, id)
		require.NotNil(t, res.Terminal)
		return res.Terminal
	}
	f := call("he1", "coded")
	require.Equal(t, frame.CodeUnreachable, f.Error.Code)
	require.Equal(t, "backend down", f.Error.Message)
	require.Equal(t, frame.KindCancelled, call("he2", "cancels").Kind)
	f = call("he3", "huge")
	require.ErrorIs(t, <-sendErr, wire.ErrTooLarge)
	require.Equal(t, frame.KindFailed, f.Kind)
	require.Equal(t, frame.CodeProviderError, f.Error.Code)
	require.Equal(t, uint64(1), f.Sequence)
	f = call("he4", "empty")
	require.Equal(t, frame.KindFailed, f.Kind)
	require.Contains(t, f.Error.Message, "payload")
}

// TestInvalidPayloadRefused: a chunk or a terminal whose payload bytes are
// not a JSON object, or a chunk with neither payload nor media, is refused
// with an error matching frame.ErrInvalid and sends nothing; the sequence
// and the terminal stay free for the next.
func TestInvalidPayloadRefused(t *testing.T) {
	type report struct{ chunk, complete, trailing, empty error }
	reports := make(chan report, 1)
	tool := child.Tool{ID: "badpayload", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		var r report
		r.chunk = s.Send(frame.Payload{0x81, 0xa1, 'k', 0xc1}, nil) // a never-used byte as the value
		r.complete = s.Complete(frame.Payload{0xa1, 'x'})           // a string, not an object
		r.trailing = s.Send(frame.Payload{0x80, 0xc0}, nil)         // bytes after the object
		r.empty = s.Send(nil, nil)                                  // a chunk of nothing
		reports <- r
		if err := s.Send(payload(map[string]any{"n": 1}), nil); err != nil {
			return nil, err
		}
		return payload(map[string]any{"done": true}), nil
	}}
	h, _ := startServe(t, config{extra: []child.Tool{tool}})
	s := dial(t, h)
	begin(t, s, "bp1", "badpayload", nil)
	res := readCall(t, s, "bp1")
	r := <-reports
	for name, err := range map[string]error{"chunk": r.chunk, "complete": r.complete, "trailing": r.trailing, "empty": r.empty} {
		require.ErrorIs(t, err, frame.ErrInvalid, name)
	}
	requireTerminal(t, res, frame.KindCompleted, 0)
	require.Len(t, res.Frames, 2, "only the valid chunk and the terminal are sent")
	require.Equal(t, uint64(1), res.Frames[0].Sequence)
	require.Equal(t, uint64(2), res.Frames[1].Sequence)
}

// goroutineID returns the id of the calling goroutine, from its stack
// trace's first line ("goroutine N [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// TestConnectionRunnerRunsEveryCall: the handlers of one connection's calls
// run one after the other on the same goroutine (no goroutine start per
// call), a handler's panic does not end that runner, and another
// connection has a runner of its own.
func TestConnectionRunnerRunsEveryCall(t *testing.T) {
	ids := make(chan string, 8) // more than the calls below
	tool := child.Tool{ID: "whoami", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		ids <- goroutineID()
		var a struct {
			Panic bool `json:"panic"`
		}
		if err := s.Arguments().Decode(&a); err != nil {
			return nil, err
		}
		if a.Panic {
			panic("asked to")
		}
		return nil, nil
	}}
	h, _ := startServe(t, config{extra: []child.Tool{tool}})
	s := dial(t, h)
	var seen []string
	for i, panics := range []bool{false, true, false} {
		id := fmt.Sprintf("who%d", i)
		// The handler starts before the caller's terminal is sent, so
		// that the call goes to the runner (a plain request, whose
		// terminal came with its invoke, runs on the reader instead).
		begin(t, s, id, "whoami", map[string]any{"panic": panics})
		seen = append(seen, <-ids)
		require.NoError(t, s.Complete(id, 1, nil))
		res := readCall(t, s, id)
		if panics {
			requireTerminal(t, res, frame.KindFailed, frame.CodeProviderError)
		} else {
			requireTerminal(t, res, frame.KindCompleted, 0)
		}
	}
	require.NotEmpty(t, seen[0])
	require.Equal(t, []string{seen[0], seen[0], seen[0]}, seen, "calls of one connection, a panic between them")

	other := dial(t, h)
	begin(t, other, "who-other", "whoami", nil)
	require.NotEqual(t, seen[0], <-ids, "another connection's runner")
	require.NoError(t, other.Complete("who-other", 1, nil))
	requireTerminal(t, readCall(t, other, "who-other"), frame.KindCompleted, 0)
}

// TestHandlerErrorWithoutCode: a *frame.Error with no valid code fails the
// call with provider_error and the error's own message (or "failed"), not
// the text of an unknown code.
func TestHandlerErrorWithoutCode(t *testing.T) {
	for _, tc := range []struct {
		err  *frame.Error
		want string
	}{
		{&frame.Error{Message: "disk full"}, "disk full"},
		{&frame.Error{}, "failed"},
	} {
		tool := child.Tool{ID: "nocode", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			return nil, tc.err
		}}
		h, _ := startServe(t, config{extra: []child.Tool{tool}})
		s := dial(t, h)
		begin(t, s, "nc1", "nocode", nil)
		res := readCall(t, s, "nc1")
		requireTerminal(t, res, frame.KindFailed, frame.CodeProviderError)
		require.Equal(t, tc.want, res.Terminal.Error.Message)
	}
}

// TestHandlerDeadline: a handler's context carries the invoke's
// timeout_ms as its deadline, and once it passed reports
// context.DeadlineExceeded with cause ErrTimeout; a context derived from
// it is done too, with the same cause.
func TestHandlerDeadline(t *testing.T) {
	type seen struct {
		deadline time.Time
		ok       bool
		err      error
		cause    error
		derived  error
	}
	seenCh := make(chan seen, 1)
	tool := child.Tool{ID: "waits", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		d, ok := ctx.Deadline()
		derived, cancel := context.WithCancel(ctx)
		defer cancel()
		<-derived.Done()
		seenCh <- seen{deadline: d, ok: ok, err: ctx.Err(), cause: context.Cause(ctx), derived: context.Cause(derived)}
		return nil, nil
	}}
	h, _ := startServe(t, config{extra: []child.Tool{tool}})
	s := dial(t, h)
	before := time.Now()
	require.NoError(t, s.Invoke("hd1", "waits", nil, 100*time.Millisecond))
	require.NoError(t, s.Started("hd1"))
	requireTerminal(t, readCall(t, s, "hd1"), frame.KindFailed, frame.CodeTimeout)
	got := <-seenCh
	require.True(t, got.ok)
	require.False(t, got.deadline.Before(before.Add(100*time.Millisecond)))
	require.True(t, got.deadline.Before(time.Now()))
	require.ErrorIs(t, got.err, context.DeadlineExceeded)
	require.ErrorIs(t, got.cause, child.ErrTimeout)
	require.ErrorIs(t, got.derived, child.ErrTimeout)
}

// TestDeadlinesOutOfOrder: the child's one deadline timer serves calls
// whose deadlines come in any order. A short deadline that arrives after a
// long one still ends its call on time, and a call that ended before its
// deadline holds up none that come after it.
func TestDeadlinesOutOfOrder(t *testing.T) {
	tool := child.Tool{ID: "waits", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		<-ctx.Done()
		return nil, nil
	}}
	h, _ := startServe(t, config{extra: []child.Tool{tool}})
	long, short, quick := dial(t, h), dial(t, h), dial(t, h)
	require.NoError(t, long.Invoke("do1", "waits", nil, time.Hour))
	require.NoError(t, long.Started("do1"))
	pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 1 })

	// A call with an earlier deadline than the one the timer waits for,
	// then one with an earlier deadline still that completes long before
	// it: the timer, armed for that one, finds nothing due and waits on.
	start := time.Now()
	require.NoError(t, short.Invoke("do2", "waits", nil, 200*time.Millisecond))
	require.NoError(t, short.Started("do2"))
	require.NoError(t, quick.Invoke("do3", "echo", nil, 50*time.Millisecond))
	require.NoError(t, quick.Started("do3"))
	require.NoError(t, quick.Complete("do3", 1, nil))
	requireTerminal(t, readCall(t, quick, "do3"), frame.KindCompleted, 0)
	requireTerminal(t, readCall(t, short, "do2"), frame.KindFailed, frame.CodeTimeout)
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 200*time.Millisecond)
	require.Less(t, took, 1200*time.Millisecond, "the short deadline waited for the long one")

	// Two more, the later one added second: once the first fired, the
	// timer is armed again for the second (new connections: the caller
	// never completed do2).
	first, second := dial(t, h), dial(t, h)
	start = time.Now()
	require.NoError(t, first.Invoke("do4", "waits", nil, 100*time.Millisecond))
	require.NoError(t, first.Started("do4"))
	require.NoError(t, second.Invoke("do5", "waits", nil, 300*time.Millisecond))
	require.NoError(t, second.Started("do5"))
	requireTerminal(t, readCall(t, first, "do4"), frame.KindFailed, frame.CodeTimeout)
	requireTerminal(t, readCall(t, second, "do5"), frame.KindFailed, frame.CodeTimeout)
	took = time.Since(start)
	require.GreaterOrEqual(t, took, 300*time.Millisecond)
	require.Less(t, took, 1300*time.Millisecond)

	// The long call is still running: its deadline is an hour away.
	require.Equal(t, int64(1), pingUntil(t, h, func(p *wire.Pong) bool { return true }).Streams)
	require.NoError(t, long.CancelCall("do1", 1))
	requireTerminal(t, readCall(t, long, "do1"), frame.KindCancelled, 0)
}
