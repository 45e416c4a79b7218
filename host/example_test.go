package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// Start a pool running cmd/skulk-child, stream text through its upper tool
// and read the output as it comes.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.Start(ctx, host.Config{
		Command: os.Getenv("SKULK_TEST_CHILD"), // the path of cmd/skulk-child
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close(ctx)

	c, err := h.Call(ctx, "upper", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range []string{"hello", "world"} {
		if err := c.Send(ctx, frame.MustPayload(map[string]any{"text": s}), nil); err != nil {
			fmt.Println(err)
			return
		}
	}
	c.CloseSend() // the handler's input ends; its output goes on
	for f, err := range c.Frames() {
		if err != nil {
			fmt.Println(err)
			return
		}
		switch f.Kind {
		case frame.KindChunk:
			text, _ := f.Payload.Text()
			fmt.Println(f.Sequence, text)
		case frame.KindCompleted:
			fmt.Println("completed")
		case frame.KindFailed, frame.KindCancelled:
			fmt.Println("ended:", f.Error)
		}
	}
	// Output:
	// 1 HELLO
	// 2 WORLD
	// completed
}

// A call whose arguments break the tool's arguments_schema is refused
// before anything is sent; the refusal names the field and the keyword,
// never the value.
func ExampleSchemaError() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.Start(ctx, host.Config{Command: os.Getenv("SKULK_TEST_CHILD")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close(ctx)

	_, err = h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": -1}))
	var se *host.SchemaError
	if errors.As(err, &se) {
		fmt.Println(se.Schema, se.Field, se.Keyword, se.Value)
	}
	// Output:
	// arguments /n minimum integer
}

// A call whose context's deadline passes ends with a *frame.Error that also
// matches context.DeadlineExceeded, as any context-bound Go call does; a
// call whose context is cancelled matches context.Canceled likewise.
func ExampleCall_Wait_deadline() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.Start(ctx, host.Config{Command: os.Getenv("SKULK_TEST_CHILD")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close(ctx)

	callCtx, callCancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer callCancel()
	c, err := h.Call(callCtx, "sleep", frame.MustPayload(map[string]any{"ms": 60000}))
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = c.Wait()
	var ce *frame.Error
	fmt.Println(errors.Is(err, context.DeadlineExceeded), errors.As(err, &ce) && ce.Code == frame.CodeTimeout)
	// Output:
	// true true
}
