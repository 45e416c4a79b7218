package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/cmd/internal/termsafe"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/protocol"
)

// maxInputLine bounds one line of --input; a longer line fails the command.
const maxInputLine = 1 << 20

// callOptions are the parsed flags of the call command.
type callOptions struct {
	tool      string
	args      frame.Payload
	input     string
	media     string // --input-media: a file sent as one inline media chunk
	mediaType string
	timeout   time.Duration
	json      bool
	escape    bool // --escape: the provider's text is escaped too, wherever stdout goes
	raw       bool // --raw: the provider's text is written as it came, even to a terminal
	saveMedia string
	journal   string
	redact    redactFlag
	offer     offerFlag // --offer: tools the child may call through the host
	via       string    // --via: a service on NATS instead of a child
	child     []string
	childFlags
	telemetryFlags
}

func parseCall(args []string) (*callOptions, error) {
	o := &callOptions{}
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	argsJSON := fs.String("args", "{}", "")
	fs.StringVar(&o.input, "input", "", "")
	fs.StringVar(&o.media, "input-media", "", "")
	fs.StringVar(&o.mediaType, "media-type", "", "")
	fs.DurationVar(&o.timeout, "timeout", 0, "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.BoolVar(&o.escape, "escape", false, "")
	fs.BoolVar(&o.raw, "raw", false, "")
	fs.StringVar(&o.saveMedia, "save-media", "", "")
	fs.StringVar(&o.journal, "journal", "", "")
	fs.Var(&o.redact, "redact", "")
	fs.Var(&o.offer, "offer", "")
	fs.StringVar(&o.via, "via", "", "")
	o.childFlags.register(fs)
	o.telemetryFlags.register(fs)
	pos, child, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	switch {
	case len(pos) == 0:
		return nil, usageErr("missing TOOL: name the tool to call, e.g. skulk-host call count --args '{\"n\": 3}' -- ./skulk-child")
	case len(pos) > 1:
		return nil, usageErr("unexpected argument after the tool name: the child's command line goes after --")
	}
	if o.via != "" {
		switch {
		case len(child) > 0:
			return nil, usageErr("--via calls a service on NATS: no child command line after --")
		case o.journal != "" || len(o.offer) > 0:
			return nil, usageErr("--journal and --offer go with a child of this host, not with --via")
		}
	} else if err := needChild(child); err != nil {
		return nil, err
	}
	if err := checkRedact(o.redact, o.journal); err != nil {
		return nil, err
	}
	o.tool, o.child = pos[0], child
	if o.args, err = frame.PayloadOf(json.RawMessage([]byte(*argsJSON))); err != nil {
		return nil, usageErr("--args must be a JSON object, e.g. --args '{\"n\": 3}'")
	}
	if o.timeout < 0 {
		return nil, usageErr("--timeout must not be negative")
	}
	if o.raw && (o.escape || o.json) {
		return nil, usageErr("--raw goes with human output and without --escape: it writes the provider's text as it came")
	}
	if o.metricsAddr != "" {
		if err := checkMetricsAddr(o.metricsAddr); err != nil {
			return nil, err
		}
	}
	switch {
	case o.mediaType != "" && o.media == "":
		return nil, usageErr("--media-type goes with --input-media FILE")
	case o.media != "" && o.mediaType == "":
		o.mediaType = "application/octet-stream"
	}
	return o, nil
}

func runCall(ctx context.Context, args []string, env Env) error {
	o, err := parseCall(args)
	if err != nil {
		return err
	}
	var input io.Reader
	switch o.input {
	case "":
	case "-":
		input = env.Stdin
	default:
		f, err := os.Open(o.input)
		if err != nil {
			return statusErr(ExitFailure, "cannot read --input: %v", err)
		}
		defer f.Close()
		input = f
	}
	var media *frame.InlineMedia
	if o.media != "" {
		data, err := readMedia(o.media, protocol.HardMaxAttachment)
		if err != nil {
			return statusErr(ExitFailure, "cannot read --input-media: %v", err)
		}
		media = &frame.InlineMedia{Data: data, MediaType: o.mediaType}
	}
	if o.saveMedia != "" {
		if err := os.MkdirAll(o.saveMedia, 0o755); err != nil {
			return statusErr(ExitFailure, "cannot create --save-media directory: %v", err)
		}
	}
	if o.via != "" {
		return runCallVia(ctx, o, env, input, media)
	}
	cfg := o.config(o.child, env)
	cfg.Calls.Tools = o.offer
	if o.journal != "" {
		j, err := openCallJournal(o.journal)
		if err != nil {
			return err
		}
		defer j.close() // after closeHost: every call's end is recorded and kept by then
		cfg.CallLog = j.log
		cfg.CallLog.Redact = o.redact
	}
	tel, err := startTelemetry(&o.telemetryFlags, &cfg, env)
	if err != nil {
		return err
	}
	defer tel.close() // after closeHost: every span ended by then
	h, err := startHost(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeHost(h)
	tel.watch(h)

	callCtx, cancel := ctx, context.CancelFunc(func() {})
	if o.timeout > 0 {
		callCtx, cancel = context.WithTimeout(ctx, o.timeout)
	}
	defer cancel()
	var copts []host.CallOption
	if input == nil && media == nil {
		copts = append(copts, host.WithInput()) // no input: a plain request, completed with its invoke
	}
	c, err := h.Call(callCtx, o.tool, o.args, copts...)
	if errors.Is(err, calllog.ErrJournalStart) {
		return journalRefusal(err)
	}
	// The tree the journal keeps the call in, a refused one's too.
	var tree string
	if re := (*host.RefusedError)(nil); errors.As(err, &re) {
		tree = re.Tree
	} else if err == nil {
		tree = c.Tree()
	}
	if o.journal != "" && tree != "" {
		fmt.Fprintf(env.Stderr, "skulk-host call: journal: tree %s in %s\n", tree, o.journal)
	}
	if err != nil {
		return refusal(o.tool, err)
	}
	// The provider's text is escaped where a person reads it: on a
	// terminal unless --raw, anywhere with --escape.
	escape := o.escape || env.StdoutTerminal && !o.raw
	r := &callRun{opts: o, env: env, call: c, media: media, escape: escape}
	if !o.json && env.StderrTerminal {
		r.progress = startProgress(env.Stderr)
	}
	return r.run(ctx, input)
}

// callRun is one call of the call command: a sender goroutine feeding the
// input, and the receive loop on the command's goroutine.
type callRun struct {
	opts     *callOptions
	env      Env
	call     streamCall
	progress *progress          // nil when stderr is not a terminal
	media    *frame.InlineMedia // --input-media, sent before the input's lines; nil without
	escape   bool               // the provider's text is escaped (termsafe.Lines)

	terminal atomic.Bool // the provider's terminal was received
	sendErr  error       // set by the sender before it returns; read only once done is closed
}

func (r *callRun) run(ctx context.Context, input io.Reader) error {
	sendCtx, stopSend := context.WithCancel(ctx)
	defer stopSend()
	done := make(chan struct{}) // closed when the sender returns
	go func() {                 // stopped by stopSend or the end of input; see the note below
		defer close(done)
		r.sendErr = r.send(sendCtx, input)
	}()

	start := time.Now()
	status, frames, bytes, last, recvErr := r.receive()
	elapsed := time.Since(start) // the call's, not the wait for the sender below
	r.progress.finish()
	stopSend()
	// The sender stops promptly unless it is blocked reading input that
	// cannot be interrupted (a terminal on stdin): the call is over, so
	// the command does not wait for it; the process exits right after.
	var sendErr error
	select {
	case <-done:
		sendErr = r.sendErr
	case <-time.After(100 * time.Millisecond):
	}
	if recvErr != nil {
		if errors.Is(recvErr, calllog.ErrJournalEnd) && last.Kind.IsTerminal() && !r.opts.json {
			// The outcome stands: it is printed before the journal's
			// failure, as docs/cli.md says.
			r.printStatus(last, frames, bytes, elapsed)
		}
		return statusErr(ExitFailure, "%v", recvErr)
	}
	if sendErr != nil {
		return sendErr
	}
	if !r.opts.json {
		r.printStatus(last, frames, bytes, elapsed)
	}
	return quiet(status)
}

// send writes the --input-media chunk, then the input's lines as caller
// chunks, then half-closes the call. Without input it half-closes at once.
func (r *callRun) send(ctx context.Context, input io.Reader) error {
	line := 0
	if r.media != nil {
		if err := r.call.Send(ctx, nil, r.media); err != nil {
			return r.sendFailed(ctx, "--input-media", err)
		}
	}
	if input != nil {
		br := bufio.NewReaderSize(input, 64*1024)
		for {
			text, err := readLine(br)
			if text != "" {
				line++
				p, perr := inputPayload(text)
				if perr != nil {
					return r.abort(statusErr(ExitFailure, "input line %d: %v", line, perr))
				}
				if serr := r.call.Send(ctx, p, nil); serr != nil {
					return r.sendFailed(ctx, fmt.Sprintf("input line %d", line), serr)
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if errors.Is(err, errLineTooLong) {
				return r.abort(statusErr(ExitFailure, "input line %d is longer than %d bytes", line+1, maxInputLine))
			}
			if err != nil {
				return r.abort(statusErr(ExitFailure, "cannot read --input: %v", err))
			}
		}
	}
	var ce *frame.Error
	if err := r.call.CloseSend(); err != nil && !errors.Is(err, host.ErrSendClosed) && !errors.As(err, &ce) {
		return r.abort(statusErr(ExitFailure, "cannot half-close the call: %v", err))
	}
	return nil
}

// errLineTooLong: an input line longer than maxInputLine.
var errLineTooLong = errors.New("input line too long")

// readLine reads one line of br with its line ending ("\n" or "\r\n"), or
// the last line without one; at the end of the input it returns what is
// left and io.EOF. A line over maxInputLine gives errLineTooLong.
func readLine(br *bufio.Reader) (string, error) {
	var b []byte
	for {
		part, err := br.ReadSlice('\n')
		if len(b)+len(part) > maxInputLine {
			return "", errLineTooLong
		}
		b = append(b, part...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return string(b), err
	}
}

// sendFailed classifies an error of Send: the call's own end (the child
// died, stopped reading past the deadline, broke the protocol: Send's
// *frame.Error or ErrSendClosed), the provider's terminal or the
// command's own cancellation is no error of the input: the exit status is
// the call's outcome, which receive reads.
func (r *callRun) sendFailed(ctx context.Context, what string, err error) error {
	var se *host.SchemaError
	var ce *frame.Error
	switch {
	case errors.As(err, &se):
		return r.abort(statusErr(ExitRefused, "%s refused: %v", what, err))
	case errors.Is(err, host.ErrSendClosed), errors.As(err, &ce), ctx.Err() != nil, r.terminal.Load():
		return nil
	}
	return r.abort(statusErr(ExitFailure, "cannot send %s: %v", what, err))
}

// abort cancels the call because of err (a host-side failure) and returns
// err.
func (r *callRun) abort(err error) error {
	if !r.terminal.Load() {
		r.call.Cancel()
	}
	return err
}

// inputPayload turns one input line, with its line ending, into a caller
// chunk's payload: a JSON object as that object, any other line as
// {"text": line}, its line ending kept.
func inputPayload(line string) (frame.Payload, error) {
	if t := strings.TrimSpace(line); strings.HasPrefix(t, "{") {
		if p, err := frame.PayloadOf(json.RawMessage([]byte(t))); err == nil {
			return p, nil
		}
	}
	return frame.PayloadOf(map[string]any{"text": line})
}

// receive prints the provider's frames until the end of the call and
// returns the exit status of its terminal.
func (r *callRun) receive() (status int, frames, bytes int64, last frame.Frame, err error) {
	var enc *lineEncoder
	if r.opts.json {
		enc = newLineEncoder(r.env.Stdout)
	}
	var saveErr error
	// Recv is not bound by the command's context: Ctrl-C cancels the call
	// (the host sends cancel), and the cancelled terminal still arrives.
	for {
		f, err := r.call.Recv(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, calllog.ErrJournalEnd) {
			return ExitFailure, frames, bytes, last, fmt.Errorf("the journal did not confirm the call's end (the outcome above stands; 'skulk-host replay' shows what was kept): %w", err)
		}
		if err != nil {
			return ExitFailure, frames, bytes, last, fmt.Errorf("reading the call's output: %w", err)
		}
		n := frameBytes(f)
		frames++
		bytes += n
		r.progress.add(1, n)
		saved := ""
		if m, ok := f.Media.(*frame.InlineMedia); ok && r.opts.saveMedia != "" && saveErr == nil {
			saved, saveErr = saveMedia(r.opts.saveMedia, f.Sequence, m)
			if saveErr != nil {
				r.abort(nil)
			}
		}
		if enc != nil {
			if err := enc.encode(f, saved); err != nil {
				return ExitFailure, frames, bytes, last, err
			}
		} else {
			r.progress.above(func() { printHuman(r.env.Stdout, f, saved, r.escape) })
		}
		if f.Kind.IsTerminal() {
			r.terminal.Store(true)
			last = f
		}
	}
	if saveErr != nil {
		return ExitFailure, frames, bytes, last, saveErr
	}
	if !last.Kind.IsTerminal() {
		return ExitFailure, frames, bytes, last, errors.New("the call's output ended without a terminal frame")
	}
	return ExitForTerminal(last), frames, bytes, last, nil
}

// frameBytes is the size of a frame's payload and inline media data.
func frameBytes(f frame.Frame) int64 {
	n := int64(len(f.Payload))
	if m, ok := f.Media.(*frame.InlineMedia); ok {
		n += int64(len(m.Data))
	}
	return n
}

// printHuman prints one provider frame for people. Started and terminal
// frames print nothing here: the status line reports the outcome. A text
// payload is the call's output and is escaped when escape is set
// (termsafe.Lines: on a terminal unless --raw, or with --escape), else
// written as the provider sent it; everything else the child chose (JSON
// payloads, media types, blob ids) is escaped always.
func printHuman(w io.Writer, f frame.Frame, saved string, escape bool) {
	if f.Kind != frame.KindChunk {
		return
	}
	if f.Payload != nil {
		if text, ok := f.Payload.Text(); ok {
			if escape {
				text = termsafe.Lines(text)
			}
			if !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
			_, _ = io.WriteString(w, text)
		} else {
			fmt.Fprintln(w, termsafe.Escape(compactJSON(f.Payload)))
		}
	}
	switch m := f.Media.(type) {
	case *frame.InlineMedia:
		fmt.Fprintln(w, mediaSummary(f.Sequence, m, saved))
	case *frame.BlobMedia:
		fmt.Fprintf(w, "[blob %s %s, %s, sha256 %s]\n", termsafe.Escape(m.BlobID), termsafe.Escape(m.MediaType), formatBytes(m.SizeBytes), termsafe.Escape(m.SHA256))
	}
}

// mediaSummary is the one line that stands for an inline media chunk.
func mediaSummary(seq uint64, m *frame.InlineMedia, saved string) string {
	s := fmt.Sprintf("[media #%d %s, %s, sha256 %s", seq, termsafe.Escape(m.MediaType), formatBytes(int64(len(m.Data))), sha256Hex(m.Data)[:16])
	if saved != "" {
		s += ", saved to " + saved
	}
	return s + "]"
}

// mediaExt maps common media types, in lower case (media types are not
// case-sensitive), to file extensions; others get .bin.
var mediaExt = map[string]string{
	"application/json": ".json", "text/plain": ".txt", "audio/wav": ".wav", "audio/x-wav": ".wav",
	"audio/pcm": ".pcm", "audio/l16": ".pcm", "audio/mpeg": ".mp3", "audio/ogg": ".ogg",
	"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp",
	"video/mp4": ".mp4", "application/pdf": ".pdf",
}

// saveMedia writes m's data to dir and returns the file's path.
func saveMedia(dir string, seq uint64, m *frame.InlineMedia) (string, error) {
	ext := mediaExt[strings.ToLower(strings.TrimSpace(strings.SplitN(m.MediaType, ";", 2)[0]))]
	if ext == "" {
		ext = ".bin"
	}
	path := filepath.Join(dir, fmt.Sprintf("media-%06d%s", seq, ext))
	if err := os.WriteFile(path, m.Data, 0o644); err != nil {
		return "", fmt.Errorf("--save-media: %w", err)
	}
	return path, nil
}

// statusWords is how the status line names a terminal: its kind, its
// error's code and message, each said once. A code named as the kind
// (cancelled, cancelled) is left out, and so is the kind when the message
// starts with it: "cancelled by the host", not "cancelled: cancelled:
// cancelled by the host".
func statusWords(last frame.Frame) string {
	kind := last.Kind.String()
	if last.Error == nil {
		return kind
	}
	msg := termsafe.Escape(oneLine(last.Error.Message))
	if code := last.Error.Code.String(); code != kind {
		kind += ": " + code
	} else if strings.HasPrefix(msg, kind+" ") {
		return msg
	}
	if msg == "" {
		return kind
	}
	return kind + ": " + msg
}

// printStatus prints the final status line on stderr.
func (r *callRun) printStatus(last frame.Frame, frames, bytes int64, elapsed time.Duration) {
	var b strings.Builder
	b.WriteString(statusWords(last))
	if last.Synthetic {
		b.WriteString(" (synthetic: made up by the host)")
	}
	if last.Kind == frame.KindCompleted && last.Payload != nil {
		b.WriteString(" " + termsafe.Escape(compactJSON(last.Payload)))
	}
	fmt.Fprintf(&b, " — %s frames, %s in %s", formatCount(frames), formatBytes(bytes), formatDuration(elapsed))
	if bytes >= 1e6 {
		b.WriteString(" (" + formatRate(bytes, elapsed) + ")")
	}
	fmt.Fprintln(r.env.Stderr, b.String())
}

// errMediaTooLarge: an --input-media file larger than any child takes.
var errMediaTooLarge = errors.New("file larger than the protocol's largest attachment")

// readMedia reads the --input-media file, reading no more than max bytes
// of it (protocol.HardMaxAttachment: a larger file could never be sent).
func readMedia(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > max {
		return nil, errMediaTooLarge
	}
	return data, nil
}

// offerFlag is --offer, repeatable: tool ids the child may call through
// the host (host.Config.Calls.Tools).
type offerFlag []string

func (f *offerFlag) String() string { return strings.Join(*f, ",") }

func (f *offerFlag) Set(v string) error {
	if protocol.CheckCallID(v) != nil {
		return errors.New("--offer takes a tool id")
	}
	*f = append(*f, v)
	return nil
}
