package child

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
	"go.opentelemetry.io/otel/trace"
)

// Handler serves one call of a tool. It runs on a goroutine of its own while
// the child goes on answering health checks and serving other calls.
//
// The handler reads the caller's chunks from s.Input, sends its own chunks
// with s.Send, and ends the call by returning: a nil error makes the returned
// payload (nil for none) the provider's completed frame; a non-nil error
// makes a failed frame (a *frame.Error keeps its code and message, any other
// error becomes provider_error with the error's text, sanitized). A handler
// may also end the call early with s.Complete or s.Fail and go on cleaning
// up; what it returns afterwards is then ignored.
//
// ctx is cancelled when the call must stop (the caller cancelled, the host
// sent cancel, the deadline passed, an invalid caller frame arrived, the
// connection closed, the child is draining or the host is gone);
// context.Cause(ctx) says why (ErrCallerCancelled, ErrTimeout, ...). The
// child then writes the terminal for that cause itself, so a cancelled
// handler should simply return promptly; what it returns is ignored. A
// handler still running cancel_grace_ms after its cancellation is reported
// stuck to the host. An invoke's timeout_ms is ctx's deadline: once it
// passed, ctx.Err() is context.DeadlineExceeded and the cause ErrTimeout
// (contexts derived from ctx report context.Canceled, with that cause).
//
// The child writes the call's end only after the handler has returned, as
// its promise that the handler holds nothing of the call any more: a handler
// must not keep s, or start goroutines that use it, past its return.
//
// A panic in a handler is recovered: the call fails with provider_error and a
// fixed message, and the stack goes to the Options.Logger only.
type Handler func(ctx context.Context, s *Stream) (frame.Payload, error)

// Tool is one tool a provider offers: its descriptor (sent to the host in
// hello) and the Handler that serves its calls.
type Tool struct {
	// ID names the tool: 1 to 128 characters, unique within a provider.
	ID string
	// Version changes whenever the descriptor or the provider's build
	// changes. Empty means derived by the child: a digest of the
	// descriptor and of the provider's build (its VCS revision and module
	// version from runtime/debug, or, when the build carries no clean VCS
	// revision, the Go build ID the linker writes into the executable,
	// which changes with its contents; the executable's bytes when there
	// is no such ID).
	Version string
	// Description says what the tool does, for people; empty means none.
	Description string
	// ArgumentsSchema is the JSON Schema (2020-12), as a decoded JSON
	// object, of the invoke's arguments; nil means any object. The host validates arguments and
	// fills in its defaults before the call reaches the child.
	ArgumentsSchema map[string]any
	// InputSchema is the JSON Schema of caller chunk payloads; nil means
	// any object.
	InputSchema map[string]any
	// OutputSchema is the JSON Schema of provider chunk payloads; nil
	// means any object.
	OutputSchema map[string]any
	// ResultSchema is the JSON Schema of the completed frame's payload;
	// nil means any object.
	ResultSchema map[string]any
	// InputMedia says every caller chunk must carry media, which no
	// schema can say (a media-only chunk skips InputSchema): the host
	// refuses a caller chunk without media before it is sent. false: a
	// chunk may carry media or not.
	InputMedia bool
	// NoInput says the handler reads no caller input. The host does not
	// enforce it; the MCP bridge, which has no input stream, leaves its
	// note about input out of such a tool's description. false: the
	// handler may read input.
	NoInput bool
	// Handler serves the tool's calls; required.
	Handler Handler
}

// maxVersionChars bounds Tool.Version (docs/protocol.md §3, tool descriptor).
const maxVersionChars = 128

// Defaults of Options' zero values.
const (
	// defaultSDK is the sdk string sent in hello when Options.SDK is empty.
	defaultSDK = "skulk-go/1"
	// defaultMaxStreams is max_streams when Options.MaxStreams is 0.
	defaultMaxStreams = 4096
	// defaultStartupTimeout is how long the child waits for startup when
	// Options.StartupTimeout is 0 (docs/protocol.md §5 item 3).
	defaultStartupTimeout = 10 * time.Second
)

// Options configure a child. The zero value of each field has a documented
// meaning; only Tools is required.
type Options struct {
	// Tools are the tools the child offers, in hello's order; at least one.
	Tools []Tool
	// SDK names the SDK in hello; empty means "skulk-go/1".
	SDK string
	// MaxStreams is how many calls the host may run at once (hello's
	// max_streams); 0 means 4096. The host enforces it.
	MaxStreams int
	// MaxHeader and MaxAttachment bound, in bytes, the header and the
	// attachment of every packet the child reads and writes; 0 means the
	// protocol's default (64 KiB and 16 MiB), and values above the
	// protocol's ceilings (1 MiB and 256 MiB) mean the ceilings. The
	// effective limits are the smaller of these and the host's startup's.
	MaxHeader, MaxAttachment uint32
	// Logger receives the child's logs (handler panics with their stacks,
	// protocol errors of the host). nil means discard for Serve, and a text
	// handler on stderr for Run.
	Logger *slog.Logger
	// StartupTimeout is how long to wait for startup after hello; 0 means
	// 10 s.
	StartupTimeout time.Duration
	// TracerProvider gives the tracer of the child's spans: a server span
	// around each handler, a child of the host's client span when the
	// invoke carries W3C trace context. nil means no spans (not the global
	// provider: package otel links package net, which the SDK keeps out of
	// providers); a handler's context still carries the invoke's remote
	// span context and baggage, for the handler's own spans.
	TracerProvider trace.TracerProvider
	// ToolUpdates, when not nil, changes the child's tools while it
	// serves: each list received from it replaces the tools (the handlers
	// of new calls come from it; calls already started keep theirs) and
	// is sent to the host in a tools packet, so the host checks new calls
	// against it (docs/protocol.md §3). The child receives from the
	// channel from startup until it stops serving; a send blocks until
	// then, so send with a select on a context of yours, or through a
	// buffered channel. A list Serve would refuse (a tool without a
	// handler, a duplicate id; more than 4,096 tools) is logged and
	// dropped, and so is every list when the host's startup did not offer
	// tools_updates: the child then
	// keeps the tools of its hello, as the host does. An empty list offers
	// no tools. nil: the tools of Tools, for the child's whole life.
	ToolUpdates <-chan []Tool
}

// ErrOptions is matched by the error Serve returns (and Run reports, with
// exit status 2) for invalid Options, before it reads or writes anything:
// no tools, a tool without a handler, an invalid or duplicate tool id, a
// version that is too long, a negative number. The message names the
// first problem.
var ErrOptions = errors.New("child: invalid options")

// validate reports the first problem with o (see ErrOptions).
func (o *Options) validate() error {
	if len(o.Tools) == 0 {
		return fmt.Errorf("%w: no tools", ErrOptions)
	}
	if err := validateTools(o.Tools); err != nil {
		return err
	}
	if o.MaxStreams < 0 {
		return fmt.Errorf("%w: max streams is negative", ErrOptions)
	}
	if o.StartupTimeout < 0 {
		return fmt.Errorf("%w: startup timeout is negative", ErrOptions)
	}
	return nil
}

// validateTools reports the first problem with a tool list: a tool
// without a handler, an invalid or duplicate tool id, a version that is
// too long, more tools than a packet carries.
func validateTools(tools []Tool) error {
	if len(tools) > maxTools {
		return fmt.Errorf("%w: more than %d tools", ErrOptions, maxTools)
	}
	seen := make(map[string]bool, len(tools))
	for i := range tools {
		t := &tools[i]
		if err := protocol.CheckCallID(t.ID); err != nil {
			return fmt.Errorf("%w: tool %d: id must be 1 to 128 characters of UTF-8", ErrOptions, i)
		}
		if seen[t.ID] {
			return fmt.Errorf("%w: tool %d: duplicate id", ErrOptions, i)
		}
		seen[t.ID] = true
		if t.Handler == nil {
			return fmt.Errorf("%w: tool %d: no handler", ErrOptions, i)
		}
		if !utf8.ValidString(t.Version) || utf8.RuneCountInString(t.Version) > maxVersionChars {
			return fmt.Errorf("%w: tool %d: version longer than %d characters", ErrOptions, i, maxVersionChars)
		}
	}
	return nil
}

// maxTools bounds a tool list: what hello and a tools packet carry
// (docs/protocol.md §3).
const maxTools = 4096

func (o *Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// limits returns the packet limits o asks for.
func (o *Options) limits() wire.Limits {
	return wire.Limits{MaxHeader: o.MaxHeader, MaxAttachment: o.MaxAttachment}
}

// descriptor returns t's wire descriptor with its version filled in.
func (t *Tool) descriptor() wire.Tool {
	d := wire.Tool{
		ID: t.ID, Version: t.Version, Description: t.Description,
		ArgumentsSchema: t.ArgumentsSchema, InputSchema: t.InputSchema,
		OutputSchema: t.OutputSchema, ResultSchema: t.ResultSchema,
		InputMedia: t.InputMedia, NoInput: t.NoInput,
	}
	if d.Version == "" {
		d.Version = deriveVersion(d)
	}
	return d
}

// deriveVersion returns the version the child gives a tool whose Version is
// empty: 24 hex digits of a SHA-256 over the descriptor d (its Version
// ignored) in the wire's canonical encoding (a tools packet of d alone,
// map keys sorted) and the running provider's build (see Tool.Version). Equal
// descriptors in the same build get the same version.
func deriveVersion(d wire.Tool) string {
	d.Version = ""
	h := sha256.New()
	enc, _, err := wire.AppendPacket(nil, &wire.Tools{Tools: []wire.Tool{d}}, wire.Limits{})
	if err != nil {
		// A descriptor the wire cannot encode never reaches a hello; fall
		// back on the id so the version still changes with the build.
		enc = []byte(d.ID)
	}
	h.Write(enc)
	io.WriteString(h, buildID())
	return hex.EncodeToString(h.Sum(nil))[:24]
}

// buildID identifies the running provider's build; computed once.
var buildID = sync.OnceValue(func() string {
	h := sha256.New()
	clean := false
	if bi, ok := debug.ReadBuildInfo(); ok {
		fmt.Fprintf(h, "%s %s %s\n", bi.Main.Path, bi.Main.Version, bi.Main.Sum)
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		fmt.Fprintf(h, "%s %s\n", rev, modified)
		clean = rev != "" && modified == "false"
	}
	if !clean {
		// No VCS revision, or a dirty tree: the executable identifies the
		// build. Its Go build ID says which executable it is without
		// reading it whole (hashing a 5 MB binary tripled the time to
		// hello); only without one are its bytes hashed.
		if exe, err := os.Executable(); err == nil {
			if id, ok := goBuildID(exe); ok {
				fmt.Fprintf(h, "go build id %s\n", id)
			} else if f, err := os.Open(exe); err == nil {
				io.Copy(h, f)
				f.Close()
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))
})
