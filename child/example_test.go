package child_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
)

// Example writes a provider with one tool and plays the host by hand to
// call it. A real provider's main function is just
//
//	os.Exit(child.Run(child.Options{Tools: []child.Tool{greet}}))
func Example() {
	greet := child.Tool{
		ID:              "greet",
		Description:     "Greets every name the caller streams.",
		ArgumentsSchema: map[string]any{"type": "object", "additionalProperties": false},
		InputSchema: map[string]any{"type": "object", "required": []any{"text"},
			"properties": map[string]any{"text": map[string]any{"type": "string"}}},
		Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
			n := 0
			for f, err := range s.Input() {
				if err != nil {
					return nil, err // cancelled: the child writes the terminal
				}
				name, _ := f.Payload.Text()
				if err := s.Send(frame.MustPayload(map[string]any{"text": "hello, " + name}), nil); err != nil {
					return nil, err
				}
				n++
			}
			return frame.MustPayload(map[string]any{"greeted": n}), nil
		},
	}

	// The host's side: a control connection and a stream listener.
	dir, _ := os.MkdirTemp("", "example-")
	defer os.RemoveAll(dir)
	streams, _ := net.Listen("unix", filepath.Join(dir, "streams.sock"))
	hostEnd, childEnd := net.Pipe()
	served := make(chan error, 1)
	go func() {
		ln := child.NewListener(streams.Accept, streams.Close)
		served <- child.Serve(context.Background(), childEnd, ln, child.Options{Tools: []child.Tool{greet}})
	}()

	hello, _ := read(hostEnd)
	fmt.Println("tools:", hello.(*wire.Hello).Tools[0].ID)
	write(hostEnd, &wire.Startup{Protocol: 1, ChildID: "example", CancelGraceMS: 1000, IngressQueue: 8})

	conn, _ := net.Dial("unix", filepath.Join(dir, "streams.sock"))
	write(conn, &wire.Invoke{CallID: "c1", ToolID: "greet", Arguments: frame.MustPayload(map[string]any{})})
	started, _ := frame.NewStarted("c1", frame.CallerToProvider)
	chunk, _ := frame.NewChunk("c1", frame.CallerToProvider, 1, frame.MustPayload(map[string]any{"text": "Ada"}), nil)
	done, _ := frame.NewCompleted("c1", frame.CallerToProvider, 2, nil)
	for _, f := range []frame.Frame{started, chunk, done} {
		write(conn, &wire.Frame{Frame: f})
	}
	for {
		p, err := read(conn)
		if err != nil {
			break
		}
		if f, ok := p.(*wire.Frame); ok {
			out, _ := f.Payload.MarshalJSON()
			fmt.Println(f.Sequence, f.Kind, string(out))
			continue
		}
		if _, ok := p.(*wire.End); ok {
			fmt.Println("end")
		}
		break
	}
	conn.Close()
	hostEnd.Close() // the host goes away: Serve returns
	fmt.Println("serve:", <-served)
	// Output:
	// tools: greet
	// 1 chunk {"text":"hello, Ada"}
	// 2 completed {"greeted":1}
	// end
	// serve: <nil>
}

// write writes one packet: its prefix and header, then its attachment.
func write(c net.Conn, p wire.Packet) {
	hdr, att, _ := wire.AppendPacket(nil, p, wire.Limits{})
	c.Write(append(hdr, att...))
}

// read reads one packet: the 8-byte prefix gives the lengths of the header
// and the attachment that follow it, checked against the default limits
// before anything is allocated.
func read(c net.Conn) (wire.Packet, error) {
	b := make([]byte, 8)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, err
	}
	h, a := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
	if h > 64<<10 || a > 16<<20 {
		return nil, wire.ErrTooLarge
	}
	b = append(b, make([]byte, int(h)+int(a))...)
	if _, err := io.ReadFull(c, b[8:]); err != nil {
		return nil, err
	}
	return wire.Decode(b, wire.Limits{})
}
