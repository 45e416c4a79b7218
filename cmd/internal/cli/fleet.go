package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skulkrt/skulk/cmd/internal/termsafe"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/remote"
)

// streamCall is what the call command drives: a local host.Call, or a
// remote.Call (--via).
type streamCall interface {
	Send(ctx context.Context, payload frame.Payload, media frame.Media) error
	CloseSend() error
	Cancel()
	Recv(ctx context.Context) (frame.Frame, error)
}

// serviceURL is a parsed --nats or --via URL:
// nats://HOST:PORT[,HOST:PORT...]/NAME[?creds=FILE|nkey=FILE|tls_ca=FILE|tls_cert=FILE&tls_key=FILE].
type serviceURL struct {
	servers []string
	name    string
	opts    []nats.Option
}

// parseServiceURL parses raw; its errors name the part at fault, never
// echo it. A user or password in the URL is refused: credentials come
// from files (the query's, or the NATS_* variables), never from the
// command line.
func parseServiceURL(flagName, raw string) (serviceURL, error) {
	var u serviceURL
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || (scheme != "nats" && scheme != "tls") {
		return u, usageErr("--%s: the scheme must be nats:// or tls://, e.g. nats://127.0.0.1:4222/tools", flagName)
	}
	rest, query, _ := strings.Cut(rest, "?")
	hosts, name, ok := strings.Cut(rest, "/")
	if !ok || name == "" {
		return u, usageErr("--%s: the path must name the service (nats://HOST:PORT/NAME)", flagName)
	}
	u.name = name
	for _, h := range strings.Split(hosts, ",") {
		if strings.Contains(h, "@") {
			return u, usageErr("--%s: a user or password in the URL is refused; use NATS_CREDS, NATS_NKEY or creds=FILE", flagName)
		}
		if h == "" {
			return u, usageErr("--%s: a server address is empty", flagName)
		}
		u.servers = append(u.servers, scheme+"://"+h)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return u, usageErr("--%s: the query cannot be parsed", flagName)
	}
	var cert, key string
	for k, vals := range q {
		v := vals[len(vals)-1]
		switch k {
		case "creds":
			u.opts = append(u.opts, nats.UserCredentials(v))
		case "nkey":
			opt, err := nats.NkeyOptionFromSeed(v)
			if err != nil {
				return u, statusErr(ExitFailure, "--%s: nkey: the seed file cannot be read: %v", flagName, err)
			}
			u.opts = append(u.opts, opt)
		case "tls_ca":
			u.opts = append(u.opts, nats.RootCAs(v))
		case "tls_cert":
			cert = v
		case "tls_key":
			key = v
		default:
			return u, usageErr("--%s: unknown parameter (want creds, nkey, tls_ca, tls_cert, tls_key)", flagName)
		}
	}
	if (cert == "") != (key == "") {
		return u, usageErr("--%s: tls_cert and tls_key go together", flagName)
	}
	if cert != "" {
		u.opts = append(u.opts, nats.ClientCert(cert, key))
	}
	return u, nil
}

// connect connects to u's servers with the environment's credentials
// (natsOptions) and u's own.
func (u serviceURL) connect(clientName string) (*nats.Conn, error) {
	env, err := natsOptions()
	if err != nil {
		return nil, err
	}
	opts := append([]nats.Option{nats.Name(clientName), nats.Timeout(natsConnectTimeout),
		nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}, env...)
	opts = append(opts, u.opts...)
	nc, err := nats.Connect(strings.Join(u.servers, ","), opts...)
	if err != nil {
		return nil, statusErr(ExitUnreachable, "cannot connect to the NATS servers: %v", err)
	}
	return nc, nil
}

const serveUsage = "serve --nats nats://HOST:PORT[,HOST:PORT...]/NAME [--id ID] [--journal FILE] [flags] -- CHILD [ARGS...]"

const serveHelp = `Start a host with the child and serve its tools on NATS as the service
NAME, until interrupted (Ctrl-C or SIGTERM). Every host serving one NAME
joins one queue group: the NATS servers spread the calls across them, and
'nats micro list' finds them. Call them with
'skulk-host call TOOL --via nats://…/NAME'.

Credentials are never taken from the command line: the NATS_CREDS,
NATS_NKEY, NATS_CERT/NATS_KEY, NATS_CA, NATS_USER/NATS_PASSWORD
variables, or the URL's creds=FILE, nkey=FILE, tls_ca=FILE,
tls_cert=FILE&tls_key=FILE. docs/operations.md ("A fleet") gives the
subject permissions a serving host needs.

The flags are:
  --nats URL       the NATS servers and the service name (required)
  --id ID          this host's id among the hosts of NAME (default: random)
  --heartbeat D    how often an idle call pings its caller (default 1s)
  --dead-after D   a call silent this long ends (default 3s; > --heartbeat)
  --journal FILE   keep the calls served in the journal FILE, as call
                   --journal does: each call a tree of its own, whose first
                   event names its caller's tree and call when the caller
                   sent them. Give callers and serving hosts one JetStream
                   store (nats://HOST:PORT/STREAM) to follow the links
                   ('skulk-host replay FILE TREE --follow-links').
  --redact KEYS    as for call, with --journal
  --env, --memory-max, --pids-max, --cpu-max, --user, --group,
  --no-new-privs, --no-cgroups, -v   as for call

Exit status: 0 after a clean stop; 1 when the journal cannot be opened,
the NATS credential variables cannot be used, or the service could not be
stopped cleanly; 2 for a usage error (the service name or --id included);
3 when the child cannot be started; 12 when the NATS servers cannot be
reached, refuse the credentials, or do not take or confirm the service;
13 when interrupted while the child was starting.
`

// serveOptions are the parsed flags of serve.
type serveOptions struct {
	url     serviceURL
	id      string
	journal string
	redact  redactFlag
	opts    remote.Options
	child   []string
	childFlags
}

func parseServe(args []string) (*serveOptions, error) {
	o := &serveOptions{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	rawURL := fs.String("nats", "", "")
	fs.StringVar(&o.id, "id", "", "")
	fs.DurationVar(&o.opts.HeartbeatInterval, "heartbeat", 0, "")
	fs.DurationVar(&o.opts.HeartbeatTimeout, "dead-after", 0, "")
	fs.StringVar(&o.journal, "journal", "", "")
	fs.Var(&o.redact, "redact", "")
	o.childFlags.register(fs)
	pos, child, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, usageErr("unexpected argument: the child's command line goes after --")
	}
	if *rawURL == "" {
		return nil, usageErr("missing --nats: name the servers and the service, e.g. --nats nats://127.0.0.1:4222/tools")
	}
	if err := needChild(child); err != nil {
		return nil, err
	}
	if o.url, err = parseServiceURL("nats", *rawURL); err != nil {
		return nil, err
	}
	if err := o.opts.Validate(); err != nil {
		return nil, usageErr("--heartbeat must be shorter than --dead-after, neither negative")
	}
	if err := checkRedact(o.redact, o.journal); err != nil {
		return nil, err
	}
	o.child = child
	return o, nil
}

func runServe(ctx context.Context, args []string, env Env) error {
	o, err := parseServe(args)
	if err != nil {
		return err
	}
	cfg := o.config(o.child, env)
	if o.journal != "" {
		j, err := openCallJournal(o.journal)
		if err != nil {
			return err
		}
		defer j.close() // after closeHost: every call's end is recorded and kept by then
		cfg.CallLog = j.log
		cfg.CallLog.Redact = o.redact
	}
	h, err := startHost(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeHost(h)
	nc, err := o.url.connect("skulk-host serve")
	if err != nil {
		return err
	}
	defer nc.Close()
	srv, err := remote.Serve(nc, o.url.name, h, remote.ServeOptions{Options: o.opts, ID: o.id})
	if errors.Is(err, remote.ErrName) || errors.Is(err, remote.ErrOptions) {
		return statusErr(ExitUsage, "%v", err)
	}
	if err != nil { // the service's subscriptions, on the NATS connection
		return statusErr(ExitUnreachable, "%v", err)
	}
	if err := nc.Flush(); err != nil {
		_ = srv.Close(context.Background())
		return statusErr(ExitUnreachable, "the NATS servers did not confirm the service: %v", err)
	}
	fmt.Fprintf(env.Stderr, "skulk-host serve: serving %d tools as %s (host %s); Ctrl-C stops\n", len(h.Tools()), o.url.name, srv.ID())
	<-ctx.Done()
	cctx, cancel := context.WithTimeout(context.Background(), serveCloseGrace)
	defer cancel()
	if err := srv.Close(cctx); err != nil {
		return statusErr(ExitFailure, "stopping the service: %v", err)
	}
	fmt.Fprintln(env.Stderr, "skulk-host serve: stopped")
	return nil
}

// serveCloseGrace is how long serve lets running calls finish once
// interrupted, before it cancels them.
const serveCloseGrace = 10 * time.Second

// dialVia connects to the service --via names.
func dialVia(raw string) (*nats.Conn, *remote.Client, error) {
	u, err := parseServiceURL("via", raw)
	if err != nil {
		return nil, nil, err
	}
	nc, err := u.connect("skulk-host call")
	if err != nil {
		return nil, nil, err
	}
	cl, err := remote.Dial(nc, u.name, remote.Options{})
	if err != nil {
		nc.Close()
		return nil, nil, statusErr(ExitUsage, "--via: %v", err)
	}
	return nc, cl, nil
}

// runCallVia is the call command with --via: the call goes to a host
// serving the name on NATS.
func runCallVia(ctx context.Context, o *callOptions, env Env, input io.Reader, media *frame.InlineMedia) error {
	nc, cl, err := dialVia(o.via)
	if err != nil {
		return err
	}
	defer nc.Close()
	defer cl.Close()
	callCtx, cancel := ctx, context.CancelFunc(func() {})
	if o.timeout > 0 {
		callCtx, cancel = context.WithTimeout(ctx, o.timeout)
	}
	defer cancel()
	var copts []remote.CallOption
	if input == nil && media == nil {
		copts = append(copts, remote.WithInput())
	}
	c, err := cl.Call(callCtx, o.tool, o.args, copts...)
	if errors.Is(err, remote.ErrNoTools) {
		return statusErr(ExitUnreachable, "no host serving the name answered: %v", err)
	}
	if err != nil {
		return refusal(o.tool, err)
	}
	escape := o.escape || env.StdoutTerminal && !o.raw
	r := &callRun{opts: o, env: env, call: c, media: media, escape: escape}
	if !o.json && env.StderrTerminal {
		r.progress = startProgress(env.Stderr)
	}
	err = r.run(ctx, input)
	if tree := c.Tree(); tree != "" {
		// The serving host's tree of the call: in its journal, if it keeps one (serve --journal).
		fmt.Fprintf(env.Stderr, "skulk-host call: remote tree %s (host %s)\n", termsafe.Escape(tree), termsafe.Escape(c.Host()))
	}
	return err
}
