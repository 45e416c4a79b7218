package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

const mainHelp = `skulk-host starts Skulk provider processes ("children") and drives streaming
calls to them over Unix sockets.

Usage:

	skulk-host <command> [arguments] [-- CHILD [ARGS...]]

The commands are:
`

const mainHelpTail = `
Use "skulk-host help <command>" for more information about a command.
New here? Run: go run ./cmd/skulk-host demo
`

func printMainHelp(w io.Writer) {
	fmt.Fprint(w, mainHelp)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 4, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "\t%s\t%s\n", c.name, c.short)
	}
	_ = tw.Flush()
	fmt.Fprint(w, mainHelpTail)
}

func printCommandHelp(w io.Writer, c *command) {
	fmt.Fprintf(w, "usage: skulk-host %s\n\n%s", c.usage, strings.TrimLeft(c.long, "\n"))
}

func runHelp(args []string, env Env) int {
	switch len(args) {
	case 0:
		printMainHelp(env.Stdout)
		return ExitOK
	case 1:
		c := lookup(args[0])
		if c == nil {
			fmt.Fprintln(env.Stderr, unknownCommand("skulk-host help", args[0]))
			return ExitUsage
		}
		printCommandHelp(env.Stdout, c)
		return ExitOK
	default:
		fmt.Fprintln(env.Stderr, "skulk-host help: too many arguments (run 'skulk-host help [command]')")
		return ExitUsage
	}
}

// exitStatusHelp is the exit status table, shared by the help texts.
func exitStatusHelp() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	for _, e := range exitTable {
		fmt.Fprintf(tw, "\t%d\t%s\n", e.status, e.meaning)
	}
	_ = tw.Flush()
	return b.String()
}

// containHelp documents the flags of containFlags; every command that
// starts a child has them.
const containHelp = `	--memory-max SIZE
		the memory the child may use with everything it starts (512K,
		128M, 2G or bytes; default 0: no limit). Past it the kernel kills
		the child; its call fails as unreachable, saying the memory limit
		was reached.
	--pids-max N
		the processes and threads the child may have with everything it
		starts (default 0: no limit); a fork past it fails.
	--cpu-max PERCENT
		the CPU time of the child with everything it starts, in percent of
		one core (150% is one and a half cores; default 0: no limit).
	--user USER, --group GROUP
		run the child as USER (a name or uid; its supplementary groups
		dropped) and GROUP (default: USER's group); needs root.
	--no-new-privs
		start the child with no_new_privs: nothing it runs gains
		privileges from set-user-ID programs or file capabilities.
	--no-cgroups
		no cgroup per child, even where the host could make one (the
		limits then cannot be had).
	Limits need cgroups (Linux): a limit this machine cannot enforce
	fails the start (status 3) with the reason; see docs/operations.md,
	"Containment".
`

const helpHelp = `
Help shows the list of commands, or the help of one command.

Example:

	skulk-host help call
`

const demoUsage = "demo [-v]"

const demoHelp = `
Demo starts a real provider child (this binary, re-executed in a hidden
child mode that serves the demo tools echo, upper, count, media, sleep and
fail) and takes a short tour of what the host does, one line per step:

  1. a text stream arriving piece by piece (upper)
  2. an inline media transfer and its rate in MB/s (media)
  3. a deadline: sleep with a 300ms timeout ends with failed/timeout
  4. a cancellation: cancelling the context ends with cancelled
  5. kill -9 of the child in the middle of a call: the call ends with a
     synthetic failed/unreachable, the host restarts the child, and the
     next call succeeds on a new process

It needs no arguments and nothing installed beyond Go, and exits 0 when
every step behaved as described (1 when one did not, 3 when the child
could not be started).

The flags are:

	-v
		log the host's events to standard error too (the child's output
		is forwarded there always).

Example:

	go run ./cmd/skulk-host demo
`

const callUsage = "call TOOL [--args JSON] [--input FILE|-] [--input-media FILE [--media-type T]] [--timeout D] [--json] [--escape | --raw] [--save-media DIR] [--journal FILE [--redact KEY[,KEY]...]] [--metrics-addr ADDR] [--offer TOOL]... [--env NAME[=VALUE]]... " + containUsage + " [-v] -- CHILD [ARGS...]\n       skulk-host call TOOL --via nats://HOST:PORT[,HOST:PORT...]/NAME [--args JSON] [--input FILE|-] [--input-media FILE] [--timeout D] [--json] [--escape | --raw] [--save-media DIR]"

// containUsage lists the containFlags in a usage line.
const containUsage = "[--memory-max SIZE] [--pids-max N] [--cpu-max PERCENT] [--user USER] [--group GROUP] [--no-new-privs] [--no-cgroups]"

var callHelp = `
Call starts CHILD (a Skulk provider program and its arguments, after --),
makes one call of TOOL and streams the provider's output as it arrives.
The child is stopped (drain, then SIGTERM, then SIGKILL) when the call ends.

The flags are:

	--args JSON
		the call's arguments, a JSON object (default {}). Checked against
		the tool's arguments_schema before anything is sent.
	--via nats://HOST:PORT[,HOST:PORT...]/NAME
		call a host serving NAME on NATS ('skulk-host serve') instead of
		starting a child: no CHILD after --, no --journal or --offer. The
		arguments and input are checked against the tool's schemas as the
		serving hosts describe them. Credentials come from NATS_CREDS,
		NATS_NKEY, NATS_CERT/NATS_KEY, NATS_CA or the URL's creds=FILE,
		never from the command line. A host that dies or is cut off
		mid-call ends it with failed/unreachable (status 12) within 3.5 s.
	--input FILE|-
		send caller input from FILE, or from standard input with -. Each
		line becomes one caller chunk: a line that is a JSON object is sent
		as that object, any other line as {"text": line} with its line
		ending ("\n" or "\r\n") kept. The end of the input half-closes
		the call (the caller's completed frame): the provider's input ends,
		its output goes on. Without --input (or --input-media) the call is
		half-closed at once.
	--input-media FILE
		send FILE's bytes as one inline media chunk (a raw attachment,
		never base64) before any --input lines. At most the child's
		max_attachment (16 MiB by default); a larger one cancels the
		call and the command exits with status 1.
	--media-type T
		the media type of --input-media, such as audio/wav or image/png
		(default application/octet-stream).
	--timeout D
		the call's deadline, a Go duration such as 500ms, 30s or 2m (default
		0: none). It travels to the child as timeout_ms; a call still running
		then ends with failed/timeout.
	--json
		print exactly one JSON object per line for every provider frame,
		started and terminal included, with the keys call_id, direction,
		sequence, kind, synthetic, payload, media and error (null when
		absent). Inline media bytes are replaced by
		"data": {"size": n, "sha256": hex}. Nothing else goes to standard
		output. See docs/cli.md for the contract.
	--escape
		escape the provider's text output wherever standard output
		goes: control characters, escape sequences and bidirectional
		overrides show as \x1b, \r, \u202e and the like (line breaks
		and tabs are kept). On a terminal this is the default.
		Everything else the child chose (error messages, media types,
		JSON payloads) is escaped in human output always.
	--raw
		write the provider's text exactly as it came, even to a
		terminal (colours a trusted provider means to show). Not with
		--escape or --json.
	--save-media DIR
		write every inline media chunk to DIR/media-SEQUENCE.EXT (SEQUENCE
		is the frame's sequence, 6 digits; EXT comes from the media type,
		.bin when unknown). DIR is created if needed.
	--journal FILE
		keep the call's events (docs/events.md) in the SQLite file FILE
		(created if needed), as a required journal: the call is refused,
		nothing sent, if its start cannot be kept, and the command fails
		(status 1, after printing the outcome) if its end cannot be
		confirmed. Events keep full content (payloads and media), so the
		log can be replayed and exported later. The tree's id is printed on
		standard error, a refused call's too; 'skulk-host follow FILE' tails it live from another
		terminal, 'skulk-host replay FILE TREE' shows what was seen.
		FILE may be a JetStream store URL instead,
		nats://HOST:PORT/STREAM (tls:// for TLS; the stream is created on
		first use; docs/events.md): credentials come from the files named
		by NATS_CREDS, NATS_NKEY, NATS_CERT and NATS_KEY, NATS_CA (or the
		URL's creds=, nkey=, tls_cert=, tls_key=, tls_ca=), and a user and
		password from NATS_USER and NATS_PASSWORD; never from the command
		line (a URL with a user or password is refused). follow, replay,
		journal list, prune and takeover, asif export and mcp serve take
		the same URL.
	--redact KEY[,KEY]...
		with --journal: the journal never keeps the value of a payload key
		named here, at any depth of the arguments, chunks and value; it
		keeps "[redacted]" in its place and marks the payload "redacted"
		(docs/events.md, "Redaction"). Repeatable. Streamed argument
		fragments are then kept as their sizes only. What the command
		prints is not redacted: it is the caller's own data.
	--metrics-addr ADDR
		serve the host's metrics (docs/operations.md, "Metrics") in the
		Prometheus text format at http://ADDR/metrics while the command
		runs (ADDR is HOST:PORT; port 0 picks one). The address is printed
		on standard error.
	--offer TOOL
		let the child's handlers call TOOL, one of its own tools, through
		the host (repeatable; docs/protocol.md §8): each such call is a step
		of the call in the tree, in the journal and in --json's events.
	--env NAME or NAME=VALUE
		pass the host's variable NAME to the child, or set NAME to VALUE
		(repeatable). The child otherwise sees only PATH, HOME, USER, LANG,
		LC_ALL, TZ and TMPDIR from the host's environment, plus the SKULK_
		variables of the protocol.
` + containHelp + `	-v
		log the host's events to standard error too. The child's stdout
		and stderr are forwarded there always, line by line, tagged with
		the child's id and pid.

Traces: with OTEL_TRACES_EXPORTER=otlp (or console) in the environment,
the call's span is exported to the collector OTEL_EXPORTER_OTLP_ENDPOINT
names (or written to standard output as JSON), flushed before the command
exits; the other OTEL_EXPORTER_OTLP_* variables apply (docs/cli.md, "Trace
export"). The child gets them only with --env NAME.

Output without --json: a payload with a "text" string prints that text
(with a newline added when it has none), any other payload prints as
compact JSON, inline media as a one-line summary (type, size, sha256, and
the file when saved). A final status line goes to standard error, and when
standard error is a terminal a live progress line (frames, bytes, rate,
elapsed time) is drawn there during the call and erased at the end.
Interrupting (Ctrl-C) cancels the call.

Exit status:

` + exitStatusHelp() + `
Examples:

	go build -o skulk-child ./cmd/skulk-child
	skulk-host call count --args '{"n": 5}' -- ./skulk-child
	printf 'hello\nworld\n' | skulk-host call upper --input - -- ./skulk-child
	skulk-host call echo --input-media photo.png --media-type image/png -- ./skulk-child
	skulk-host call media --args '{"bytes": 10000000, "chunk": 1000000}' --save-media /tmp/m -- ./skulk-child
	skulk-host call sleep --args '{"ms": 5000}' --timeout 1s --json -- ./skulk-child
`

const toolsUsage = "tools [--json] [--env NAME[=VALUE]]... " + containUsage + " [-v] -- CHILD [ARGS...]"

const toolsHelp = `
Tools starts CHILD, prints the tools it offers with their descriptions and
JSON Schemas (arguments, input, output, result), and stops it.

The flags are:

	--json
		print the tool descriptors as one JSON array, with the keys of
		docs/protocol.md §3 (id, version, description, arguments_schema,
		input_schema, output_schema, result_schema).
	--env NAME or NAME=VALUE
		as for call.
	--memory-max, --pids-max, --cpu-max, --user, --group,
	--no-new-privs, --no-cgroups
		as for call: the child's limits and privileges.
	-v
		as for call: log the host's events to standard error too.

Exit status: 0, 2 for a usage error, 3 when the child cannot be started.

Example:

	go build -o skulk-child ./cmd/skulk-child
	skulk-host tools -- ./skulk-child --test-tools
`

const benchUsage = "bench [--json] [--frames N] [--media BYTES] [--calls N] [--streams N] [--metrics-addr ADDR] [--offer TOOL]... [--env NAME[=VALUE]]... " + containUsage + " [-v] -- CHILD [ARGS...]"

const benchHelp = `
Bench starts CHILD, which must offer the demo tools count and media (as
cmd/skulk-child and skulk-host's own demo child do), and measures:

	small frames     frames/s of one count call streaming --frames chunks
	inline media     MB/s of one media call of --media bytes in 1 MiB chunks
	latency          p50 and p99 of --calls sequential count calls of one
	                 chunk each, from Call to the terminal frame
	concurrency      frames/s of --streams count calls at once, sharing
	                 --frames chunks between them

MB is 1,000,000 bytes. Every call's terminal is checked; a call that does
not complete fails the benchmark (exit status 1).

The flags are:

	--json
		print one JSON object with the results instead of a table.
	--frames N
		small frames to stream (default 200000).
	--media BYTES
		inline media bytes to transfer (default 268435456, 256 MiB).
	--calls N
		calls for the latency measurement (default 1000).
	--streams N
		concurrent calls (default 32).
	--metrics-addr ADDR
		as for call: serve the host's metrics at http://ADDR/metrics
		while the benchmark runs. Its call counting is an observer of
		the call log, so the measures then include that cost.
	--env NAME or NAME=VALUE
		as for call.
	--memory-max, --pids-max, --cpu-max, --user, --group,
	--no-new-privs, --no-cgroups
		as for call: the child's limits and privileges.
	-v
		as for call: log the host's events to standard error too.

Example:

	go build -o skulk-child ./cmd/skulk-child
	skulk-host bench -- ./skulk-child
	skulk-host bench --json --frames 50000 --media 67108864 -- ./skulk-child
`
