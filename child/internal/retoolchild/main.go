// Command retoolchild is a provider for tests of a live tool list: it
// serves the demo tools (with their test tools) and retool, which replaces
// the child's tools while it runs (child.Options.ToolUpdates).
//
// retool's arguments: "keep", the ids of the demo tools to keep offering
// (absent: none), and "alias", an id under which echo is offered too
// (absent: none). retool itself is always offered. It completes with
// {"tools": n}, the number of tools of the new list, once the child has
// taken the list.
package main

import (
	"context"
	"os"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/child/demotools"
	"github.com/skulkrt/skulk/frame"
)

func main() {
	// Size 0: retool's handler waits until the child has taken its list.
	updates := make(chan []child.Tool)
	demo := demotools.Tools(demotools.Options{TestTools: true, Exit: os.Exit})
	tools := append(demo, retool(demo, updates))
	os.Exit(child.Run(child.Options{SDK: "retoolchild/1", Tools: tools, ToolUpdates: updates}))
}

func retool(demo []child.Tool, updates chan<- []child.Tool) child.Tool {
	t := child.Tool{
		ID:          "retool",
		Description: "Replaces the child's tools: the demo tools named in keep, echo again as alias, and retool.",
		ArgumentsSchema: map[string]any{"type": "object", "properties": map[string]any{
			"keep":  map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
			"alias": map[string]any{"type": "string"},
		}},
		NoInput: true,
	}
	t.Handler = func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		var args struct {
			Keep  []string `json:"keep"`
			Alias string   `json:"alias"`
		}
		if err := s.Arguments().Decode(&args); err != nil {
			return nil, err
		}
		var next []child.Tool
		for _, d := range demo {
			for _, id := range args.Keep {
				if d.ID == id {
					next = append(next, d)
				}
			}
			if d.ID == "echo" && args.Alias != "" {
				alias := d
				alias.ID, alias.Version = args.Alias, ""
				next = append(next, alias)
			}
		}
		next = append(next, t)
		select {
		case updates <- next:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return frame.MustPayload(map[string]any{"tools": len(next)}), nil
	}
	return t
}
