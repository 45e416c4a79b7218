package wire_test

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
)

// A child encodes a chunk and the end of its stream; the host splits the
// bytes into packets by their prefixes and decodes them.
func Example() {
	chunk, err := frame.NewChunk("call-1", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"text": "hi"}), nil)
	if err != nil {
		panic(err)
	}
	var stream []byte
	for _, p := range []wire.Packet{&wire.Frame{Frame: chunk}, &wire.End{CallID: "call-1"}} {
		hdr, att, err := wire.AppendPacket(stream, p, wire.Limits{})
		if err != nil {
			panic(err)
		}
		stream = append(hdr, att...)
	}

	for len(stream) > 0 {
		// The prefix: header length and attachment length, uint32 big-endian.
		n := 8 + int(binary.BigEndian.Uint32(stream)) + int(binary.BigEndian.Uint32(stream[4:]))
		p, err := wire.Decode(stream[:n], wire.Limits{})
		if err != nil {
			panic(err)
		}
		stream = stream[n:]
		switch p := p.(type) {
		case *wire.Frame:
			text, _ := p.Payload.Text()
			fmt.Println("frame", p.Kind, p.Sequence, text)
		case *wire.End:
			fmt.Println("end", p.CallID)
		}
	}
	// Output:
	// frame chunk 1 hi
	// end call-1
}

func ExampleAppendPacket() {
	b, att, err := wire.AppendPacket(nil, &wire.Ping{Nonce: 7}, wire.Limits{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("% x\n%d bytes of attachment\n", b, len(att))
	// Output:
	// 00 00 00 0f 00 00 00 00 82 a1 74 a4 70 69 6e 67 a5 6e 6f 6e 63 65 07
	// 0 bytes of attachment
}

func ExampleDecode_errors() {
	// A frame whose kind is unknown: it parses, but it is an invalid frame.
	bad := []byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}
	h := []byte("\x86\xa1t\xa5frame\xa7call_id\xa2c1\xa9direction\xb2provider_to_caller\xa8sequence\x01\xa4kind\xa5chonk\xa7payload\x80")
	bad[3] = byte(len(h))
	bad = append(bad, h...)

	_, err := wire.Decode(bad, wire.Limits{})
	var fe *frame.FieldError
	if errors.Is(err, frame.ErrInvalid) && errors.As(err, &fe) {
		fmt.Println("invalid frame:", fe)
	}
	// The packet and its call id, to answer with a failed invalid_frame.
	var inv interface{ InvalidPacket() (string, string) }
	if errors.As(err, &inv) {
		typ, callID := inv.InvalidPacket()
		fmt.Println("answer", typ, callID)
	}

	// A header length of 0: a protocol error; close the connection.
	_, err = wire.Decode([]byte{0, 0, 0, 0, 0, 0, 0, 0}, wire.Limits{})
	fmt.Println(errors.Is(err, wire.ErrProtocol), errors.Is(err, wire.ErrTooLarge))

	// A header longer than max_header: too large, and a protocol error.
	_, err = wire.Decode([]byte{0, 0, 0, 9, 0, 0, 0, 0}, wire.Limits{MaxHeader: 8})
	fmt.Println(errors.Is(err, wire.ErrProtocol), errors.Is(err, wire.ErrTooLarge))
	// Output:
	// invalid frame: frame: kind: unknown value
	// answer frame c1
	// true false
	// true true
}

// A reader of a connection checks each packet's prefix before it reads
// anything more, decodes the header with one Decoder for the whole
// connection, and reads the attachment into a buffer of its own.
func ExampleDecoder() {
	chunk, err := frame.NewChunk("call-1", frame.ProviderToCaller, 1, nil, &frame.InlineMedia{MediaType: "audio/pcm", Data: []byte{1, 2, 3}})
	if err != nil {
		panic(err)
	}
	var conn []byte // what the connection carries
	for _, p := range []wire.Packet{&wire.Frame{Frame: chunk}, &wire.End{CallID: "call-1"}} {
		hdr, att, err := wire.AppendPacket(nil, p, wire.Limits{})
		if err != nil {
			panic(err)
		}
		conn = append(append(conn, hdr...), att...)
	}

	const maxHeader, maxAttachment = 64 << 10, 16 << 20 // the default limits
	var dec wire.Decoder
	for len(conn) > 0 {
		h, a := binary.BigEndian.Uint32(conn), binary.BigEndian.Uint32(conn[4:])
		if h == 0 || h > maxHeader || a > maxAttachment {
			_, err := wire.Decode(conn[:8], wire.Limits{}) // the lengths' protocol error
			panic(err)                                     // close the connection
		}
		p, err := dec.DecodeHeader(conn[8:8+h], a, "")
		if err != nil {
			panic(err)
		}
		att := conn[8+h : 8+h+a]
		conn = conn[8+h+a:]
		switch p := p.(type) {
		case *wire.Frame:
			if m, ok := p.Media.(*frame.InlineMedia); ok {
				m.Data = append([]byte(nil), att...)
				fmt.Println("frame", p.Kind, m.MediaType, m.Data)
			}
		case *wire.End:
			fmt.Println("end", p.CallID)
		}
	}
	// Output:
	// frame chunk audio/pcm [1 2 3]
	// end call-1
}
