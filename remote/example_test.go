package remote_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/remote"
)

// A host serves its pool as "tools" on NATS; it runs until Close.
func ExampleServe() {
	ctx := context.Background()
	h, err := host.Start(ctx, host.Config{Command: "./skulk-child"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close(ctx)
	nc, err := nats.Connect("nats://127.0.0.1:4222", nats.MaxReconnects(-1))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	srv, err := remote.Serve(nc, "tools", h, remote.ServeOptions{ID: "a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second) // running calls may finish meanwhile
		defer cancel()
		_ = srv.Close(cctx)
	}()
	// ... until the host should stop serving.
}

// A caller anywhere calls a tool of "tools": the call goes to one of the
// hosts serving it.
func ExampleClient_Call() {
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	cl, err := remote.Dial(nc, "tools", remote.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call, err := cl.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 3}), remote.WithInput())
	if err != nil {
		fmt.Println(err) // a refusal: unknown tool, arguments that break the schema, no tool list
		return
	}
	for f, err := range call.Frames() {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(f.Kind, f.Payload, f.Synthetic)
	}
}
