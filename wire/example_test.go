package wire_test

import (
	"errors"
	"fmt"
	"net"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
)

// A child writes a chunk and an end on its stream connection; the host
// reads them.
func Example() {
	child, host := net.Pipe()
	defer host.Close()

	w := wire.NewWriter(child, wire.Limits{})
	done := make(chan error, 1)
	go func() { // stopped once both packets are written
		chunk, err := frame.NewChunk("call-1", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"text": "hi"}), nil)
		if err == nil {
			err = w.WritePacket(&wire.Frame{Frame: chunk})
		}
		if err == nil {
			err = w.WritePacket(&wire.End{CallID: "call-1"})
		}
		child.Close()
		done <- err
	}()

	r := wire.NewReader(host, wire.Limits{})
	for {
		p, err := r.ReadPacket()
		if err != nil {
			break // io.EOF once the child closed its end
		}
		switch p := p.(type) {
		case *wire.Frame:
			text, _ := p.Payload.Text()
			fmt.Println(p.Type(), p.Kind, p.Sequence, text)
		case *wire.End:
			fmt.Println(p.Type(), p.CallID)
		}
	}
	if err := <-done; err != nil {
		fmt.Println(err)
	}
	// Output:
	// frame chunk 1 hi
	// end call-1
}

func ExampleEncode() {
	b, err := wire.Encode(&wire.Ping{Nonce: 7}, wire.Limits{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("% x\n", b)
	// Output: 00 00 00 0f 00 00 00 00 82 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 07
}

func ExampleDecode_errors() {
	// A frame whose kind is unknown: it parses, but it is an invalid frame.
	bad := []byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}
	h := []byte("\x86\xa1t\xa5frame\xa7call_id\xa2c1\xa9direction\xb2provider_to_caller\xa8sequence\x01\xa4kind\xa5chonk\xa7payload\x80")
	bad[3] = byte(len(h))
	bad = append(bad, h...)

	_, err := wire.Decode(bad, wire.Limits{})
	var inv *wire.InvalidError
	if errors.As(err, &inv) {
		fmt.Println("invalid frame of", inv.CallID+":", inv.Err)
	}

	// A header length of 0: a protocol error; close the connection.
	_, err = wire.Decode([]byte{0, 0, 0, 0, 0, 0, 0, 0}, wire.Limits{})
	fmt.Println(errors.Is(err, wire.ErrProtocol), errors.Is(err, wire.ErrHeaderLength))
	// Output:
	// invalid frame of c1: frame: kind: unknown value
	// true true
}
