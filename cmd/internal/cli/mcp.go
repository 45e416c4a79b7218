package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skulkrt/skulk/cmd/internal/mcpbridge"
	"github.com/skulkrt/skulk/host"
)

// httpShutdownGrace bounds the wait for open HTTP requests (a client's
// event stream stays open) when mcp serve --http stops.
const httpShutdownGrace = time.Second

// handlerWait bounds the wait for tool handlers still running once mcp
// serve --http's HTTP server closed: their calls are cancelled, so they end
// within the child's cancel grace (1 s by default) and a margin.
const handlerWait = 5 * time.Second

const mcpUsage = "mcp serve [--child NAME=COMMAND [ARG]...]... [--config FILE] [--http ADDR [--token-file FILE] [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]] [--sse-poll D]] [--journal FILE [--redact KEY[,KEY]...]] [--timeout D] [--inline-max BYTES] [--pool N] [--metrics-addr ADDR] [--env NAME[=VALUE]]... " + containUsage + " [-v] [-- CHILD [ARGS...]]"

const mcpHelp = `
Mcp serve starts CHILD (a Skulk provider) under supervision, as call does
(health checks, restarts, journals), and serves its tools as an MCP server:
over standard input and output by default, or over MCP's streamable HTTP
transport with --http. It runs until the client closes standard input (or,
with --http, until interrupted), then stops the child.

A tool's arguments schema is its MCP input schema, its result schema the
output schema. A call's chunks become progress notifications when the
client sent a progress token; text chunks add up to text content, other
payloads to JSON lines; media becomes image or audio content by media
type, an embedded resource otherwise, or, past --inline-max bytes in one
result, a resource link the server serves (resources/read). A failure is a
tool error result with the code and the message, and says "synthetic" when
the host made it up (the child died, say), with the exit status or signal
and the end of the child's stderr. An MCP cancellation cancels the call
(the cancelled request gets no response, on stdio or over HTTP).

In front of an MCP server run by skulk-mcp (mcp serve -- skulk-mcp --
SERVER) it is that server as far as a client can tell: its capabilities,
resources, prompts, completions, log level and notifications go through,
and its contents arrive as it sent them. After the child restarts its
tools are listed again and clients get tools/list_changed. MCP carries no deadline: a request's _meta "skulk/timeout_ms" (or
--timeout) is the call's timeout_ms. docs/mcp.md has the whole mapping.

One gateway, many servers: --child NAME=COMMAND [ARG]... (repeated) or
--config FILE starts several children at once, any mix of Skulk providers
and MCP servers under skulk-mcp, each on a host of its own. Their tools
and prompts are offered as NAME/TOOL and NAME/PROMPT; their resources keep
their URIs and are read from the child that listed them. A child whose
host gives up restarting it (a crash loop) has its tools withdrawn
(tools/list_changed) while a new host is started with backoff, and offered
again once it is up. docs/mcp.md describes the config file.

Traces: with OTEL_TRACES_EXPORTER=otlp in the environment, each call's
span is exported as for call (docs/cli.md, "Trace export"), flushed before
the command exits; a request's _meta "traceparent" (and "tracestate",
"baggage") is the span's parent, so the MCP client's trace goes on.

The flags are:

	--child NAME=COMMAND [ARG]...
		a child of the gateway, named NAME (1 to 64 letters, digits,
		'_' or '-'); the command line is split at spaces (use --config
		for arguments with spaces). Repeat it for more children.
	--config FILE
		the children, as JSON: {"children": [{"name", "command", "args",
		"env", "pool", "restart": {"max_restarts", "window",
		"backoff_min", "backoff_max", "retry_min", "retry_max"}}]};
		with --child, its children come after theirs.
	--http ADDR
		serve streamable HTTP on ADDR (such as 127.0.0.1:8080; port 0
		picks one) instead of stdio. The address is printed on standard
		error: "skulk-host mcp serve: listening on http://ADDR". The
		path /healthz reports each child's state as JSON (200 when one
		is ready, 503 when none is), behind the same guard.
	--token-file FILE
		with --http: every request must carry "Authorization: Bearer
		TOKEN", TOKEN being FILE's content (its first line, without
		surrounding space). SKULK_MCP_TOKEN in the environment does the
		same without a file. The token is never taken from the command
		line, where other users of the machine can read it.
	--tls-cert FILE, --tls-key FILE
		with --http: serve HTTPS with this certificate and key.
	--tls-client-ca FILE
		with --tls-cert: require a client certificate signed by a CA of
		FILE (PEM). An --http address that is not loopback (127.0.0.1,
		::1, localhost) is refused unless a token (--token-file or
		SKULK_MCP_TOKEN) or client certificates (--tls-client-ca) are
		configured: a served child runs commands for whoever reaches
		the port. DNS rebinding protection (a loopback request naming
		another host is refused) holds either way.
	--sse-poll D
		with --http: close the event stream of a request still running
		after D (such as 30s) with an SSE retry hint of D, so a long
		call does not hold its POST open; the client reconnects with
		Last-Event-ID and gets the rest of the call, its result among
		it (SSE polling). Sessions at protocol version 2025-11-25 only
		(older ones cannot resume every stream). Default 0: off.
	--journal FILE
		keep every call's events in the journal FILE, as call --journal
		does: a SQLite file (created if needed) or a JetStream store URL,
		nats://HOST:PORT/STREAM, with credentials from the environment as
		for call. Each result's _meta names its "skulk/tree".
	--redact KEY[,KEY]...
		with --journal: the journal keeps "[redacted]" in place of the
		value of every payload key named here, as call --redact does.
	--timeout D
		the deadline of a call whose request has no _meta
		"skulk/timeout_ms" (default 0: none).
	--inline-max BYTES
		the media bytes one result carries inline (default 4194304);
		media past it become resource links.
	--pool N
		processes to run of each child (default 1).
	--metrics-addr ADDR
		as for call: serve the host's metrics at http://ADDR/metrics
		until the command ends.
	--env NAME or NAME=VALUE
		as for call.
	--memory-max, --pids-max, --cpu-max, --user, --group,
	--no-new-privs, --no-cgroups
		as for call: the children's limits and privileges.
	-v
		as for call: log the host's events to standard error too.

Standard output carries MCP alone (stdio mode); the child's output and the
host's log go to standard error.

Example:

	go build -o skulk-child ./cmd/skulk-child
	skulk-host mcp serve -- ./skulk-child
	skulk-host mcp serve --http 127.0.0.1:8080 --journal calls.db -- ./skulk-child
`

type mcpOptions struct {
	http       string
	tokenFile  string
	tlsCert    string
	tlsKey     string
	clientCA   string
	journal    string
	timeout    time.Duration
	ssePoll    time.Duration // --sse-poll
	inlineMax  int
	pool       int
	metrics    string // --metrics-addr
	redact     redactFlag
	child      []string
	children   childFlag // --child, then --config's
	configFile string    // --config
	childFlags
}

func parseMCP(args []string) (*mcpOptions, error) {
	o := &mcpOptions{}
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.StringVar(&o.http, "http", "", "")
	fs.StringVar(&o.journal, "journal", "", "")
	fs.StringVar(&o.tokenFile, "token-file", "", "")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "")
	fs.StringVar(&o.tlsKey, "tls-key", "", "")
	fs.StringVar(&o.clientCA, "tls-client-ca", "", "")
	fs.DurationVar(&o.timeout, "timeout", 0, "")
	fs.DurationVar(&o.ssePoll, "sse-poll", 0, "")
	fs.IntVar(&o.inlineMax, "inline-max", mcpbridge.DefaultInlineMax, "")
	fs.IntVar(&o.pool, "pool", 1, "")
	fs.StringVar(&o.metrics, "metrics-addr", "", "")
	fs.Var(&o.redact, "redact", "")
	fs.Var(&o.children, "child", "")
	fs.StringVar(&o.configFile, "config", "", "")
	o.register(fs)
	pos, child, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	switch {
	case len(pos) == 0:
		return nil, usageErr("missing the subcommand: skulk-host mcp serve -- CHILD")
	case pos[0] != "serve":
		return nil, usageErr("unknown mcp subcommand (the one there is: serve)")
	case len(pos) > 1:
		return nil, usageErr("unexpected argument after serve: the child's command line goes after --")
	case o.timeout < 0:
		return nil, usageErr("--timeout must not be negative")
	case o.inlineMax < 0:
		return nil, usageErr("--inline-max must not be negative")
	case o.ssePoll < 0 || o.ssePoll > 0 && o.ssePoll < time.Millisecond:
		return nil, usageErr("--sse-poll must be 0 (off) or at least 1ms")
	case o.http == "" && o.ssePoll != 0:
		return nil, usageErr("--sse-poll goes with --http")
	case o.http == "" && (o.tokenFile != "" || o.tlsCert != "" || o.tlsKey != "" || o.clientCA != ""):
		return nil, usageErr("--token-file and --tls-* go with --http")
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return nil, usageErr("--tls-cert and --tls-key go together")
	case o.clientCA != "" && o.tlsCert == "":
		return nil, usageErr("--tls-client-ca needs --tls-cert and --tls-key")
	case o.pool < 1:
		return nil, usageErr("--pool must be at least 1")
	case o.metrics != "":
		if err := checkMetricsAddr(o.metrics); err != nil {
			return nil, err
		}
	}
	if o.configFile != "" {
		more, err := readGatewayConfig(o.configFile)
		if err != nil {
			return nil, err
		}
		o.children = append(o.children, more...)
	}
	switch {
	case len(o.children) > 0 && len(child) > 0:
		return nil, usageErr("give the children with --child or --config, or one child after --, not both")
	case len(o.children) > 0:
		if err := checkGatewayChildren(o.children); err != nil {
			return nil, err
		}
	default:
		if err := needChild(child); err != nil {
			return nil, err
		}
	}
	if err := checkRedact(o.redact, o.journal); err != nil {
		return nil, err
	}
	o.child = child
	return o, nil
}

func runMCP(ctx context.Context, args []string, env Env) error {
	o, err := parseMCP(args)
	if err != nil {
		return err
	}
	var guard *httpGuard
	if o.http != "" {
		// Refused before the child starts.
		if guard, err = o.httpGuard(); err != nil {
			return err
		}
	}
	children := []gatewayChild(o.children)
	if len(children) == 0 {
		children = []gatewayChild{{Command: o.child[0], Args: o.child[1:]}} // unnamed: its names as they are
	}
	cfg := o.config([]string{children[0].Command}, env)
	cfg.PoolSize = o.pool
	// An MCP server under skulk-mcp asks this server's MCP client for
	// sampling and elicitation through these host tools.
	clients := mcpbridge.NewClients()
	cfg.Calls.HostTools = append(cfg.Calls.HostTools, clients.HostTools()...)
	cfg.ExtraEnv = append(cfg.ExtraEnv, clients.Env())
	if o.journal != "" {
		j, err := openCallJournal(o.journal)
		if err != nil {
			return err
		}
		defer j.close() // after srv.Close, which closes the hosts
		cfg.CallLog = j.log
		cfg.CallLog.Redact = o.redact
	}
	// On stdio, standard output is MCP's: console spans go to stderr.
	tenv := env
	if o.http == "" {
		tenv.Stdout = env.Stderr
	}
	tel, err := startTelemetry(&telemetryFlags{metricsAddr: o.metrics}, &cfg, tenv)
	if err != nil {
		return err
	}
	defer tel.close() // after srv.Close: every span ended by then
	gw := make([]mcpbridge.Child, len(children))
	for i, c := range children {
		ccfg := childConfig(cfg, c)
		gc := mcpbridge.Child{Name: c.Name, Start: func(ctx context.Context) (*host.Host, error) {
			h, err := startHost(ctx, ccfg)
			if err == nil && i == 0 {
				tel.watch(h) // the metrics report the first child's pool
			}
			return h, err
		}}
		if r := c.Restart; r != nil {
			gc.RetryMin, gc.RetryMax = time.Duration(r.RetryMin), time.Duration(r.RetryMax)
		}
		gw[i] = gc
	}
	inlineMax := o.inlineMax
	if inlineMax == 0 {
		inlineMax = -1 // every media chunk a link
	}
	srv, err := mcpbridge.NewGateway(ctx, gw, mcpbridge.ServerOptions{
		Name: "skulk-host", Timeout: o.timeout, InlineMax: inlineMax, Logger: cfg.Logger,
		Clients: clients, SSEPoll: o.ssePoll,
	})
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if len(children) == 1 {
				return ee // the lone child's own words, as call gives them
			}
			return statusErr(ee.status, "%v", err)
		}
		return statusErr(ExitFailure, "%v", err)
	}
	defer closeServer(srv)
	if o.http != "" {
		return serveMCPHTTP(ctx, srv, o.http, guard, env)
	}
	in, ok := env.Stdin.(io.ReadCloser)
	if !ok {
		in = io.NopCloser(env.Stdin)
	}
	err = srv.MCP().Run(ctx, mcpbridge.StdioTransport(mcpbridge.LineTransport(in, nopWriteCloser{env.Stdout}, cfg.Logger), closeTimeout))
	if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) && !errors.Is(err, mcp.ErrConnectionClosed) {
		return statusErr(ExitFailure, "serving MCP on stdio: %v", err)
	}
	return nil
}

// closeServer closes the gateway's hosts, as closeHost does one.
func closeServer(srv *mcpbridge.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	_ = srv.Close(ctx) // the command's outcome is already decided; -v logs the details
}

// nopWriteCloser keeps the command's stdout open when the MCP session
// closes its writer.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// serveMCPHTTP serves srv over streamable HTTP on addr until ctx is done.
func serveMCPHTTP(ctx context.Context, srv *mcpbridge.Server, addr string, guard *httpGuard, env Env) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return statusErr(ExitFailure, "cannot listen on --http address: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle(mcpbridge.HealthPath, srv.HealthHandler())
	mux.Handle("/", srv.HTTPHandler())
	var handler http.Handler = mux
	if guard.token != "" {
		handler = auth.RequireBearerToken(guard.verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(handler)
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, TLSConfig: guard.tls}
	scheme := "http"
	if guard.tls != nil {
		scheme = "https"
	}
	fmt.Fprintf(env.Stderr, "skulk-host mcp serve: listening on %s://%s\n", scheme, ln.Addr())
	served := make(chan error, 1) // one value, from the goroutine below
	go func() {                   // stopped by Shutdown or Close below
		if guard.tls != nil {
			served <- hs.ServeTLS(ln, "", "")
			return
		}
		served <- hs.Serve(ln)
	}()
	select {
	case err := <-served:
		return statusErr(ExitFailure, "serving MCP over HTTP: %v", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), httpShutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close() // event streams still open: cut them
	}
	<-served
	// The HTTP server is closed, but tool handlers can still be running
	// (their requests gone, so their calls cancelled): let them end before
	// the caller closes the host under them.
	wctx, wcancel := context.WithTimeout(context.Background(), handlerWait)
	defer wcancel()
	if err := srv.Wait(wctx); err != nil {
		fmt.Fprintf(env.Stderr, "skulk-host mcp serve: tool calls still running %v after the HTTP server closed; closing the host ends them\n", handlerWait)
	}
	return nil
}
