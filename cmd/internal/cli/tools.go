package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/skulkrt/skulk/cmd/internal/termsafe"
	"github.com/skulkrt/skulk/wire"
)

func runTools(ctx context.Context, args []string, env Env) error {
	var cf childFlags
	fs := flag.NewFlagSet("tools", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	cf.register(fs)
	pos, child, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("unexpected argument: the child's command line goes after --")
	}
	if err := needChild(child); err != nil {
		return err
	}
	h, err := startHost(ctx, cf.config(child, env))
	if err != nil {
		return err
	}
	defer closeHost(h)
	tools := h.Tools()
	if *asJSON {
		return printToolsJSON(env.Stdout, tools)
	}
	printToolsHuman(env.Stdout, tools)
	return nil
}

func printToolsJSON(w io.Writer, tools []wire.Tool) error {
	if tools == nil {
		tools = []wire.Tool{}
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(tools); err != nil {
		return statusErr(ExitFailure, "cannot encode the tools as JSON: %v", err)
	}
	return nil
}

// printToolsHuman prints one block per tool: its id, version and
// description, then each schema it declares as compact JSON.
func printToolsHuman(w io.Writer, tools []wire.Tool) {
	if len(tools) == 0 {
		fmt.Fprintln(w, "the child offers no tools")
		return
	}
	for i, t := range tools {
		if i > 0 {
			fmt.Fprintln(w)
		}
		// Everything here is the child's: escaped, so that it shows and
		// does nothing else.
		head := termsafe.Escape(t.ID)
		if t.Version != "" {
			head += " (version " + termsafe.Escape(t.Version) + ")"
		}
		if t.Description != "" {
			head += " — " + termsafe.Escape(oneLine(t.Description))
		}
		fmt.Fprintln(w, head)
		for _, s := range []struct {
			name   string
			schema map[string]any
		}{{"arguments", t.ArgumentsSchema}, {"input", t.InputSchema}, {"output", t.OutputSchema}, {"result", t.ResultSchema}} {
			if s.schema != nil {
				fmt.Fprintf(w, "    %-10s %s\n", s.name, termsafe.Escape(schemaJSON(s.schema)))
			}
		}
	}
}

func schemaJSON(s map[string]any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return "<schema with no JSON form>"
	}
	return strings.TrimSpace(b.String())
}
