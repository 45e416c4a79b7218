// Package rawbench is the kernel baseline of the benchmarks: a child that
// dials a Unix socket the driver listens on and answers commands with plain
// bytes, one write syscall per message, and the driver's side of it.
//
// A command is 13 bytes: op (1 byte), n (uint64 big-endian), size (uint32
// big-endian). The child runs commands one after another until EOF.
package rawbench

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// Ops of a command.
const (
	// OpStream: the child writes n messages, each a uint32 big-endian
	// length and size bytes, each with one write.
	OpStream byte = 1
	// OpCopy: the child writes n bytes in writes of size bytes.
	OpCopy byte = 2
	// OpEcho: the child reads n messages of size bytes and writes each
	// back with one write.
	OpEcho byte = 3
)

// CommandLen is the length of a command.
const CommandLen = 13

// MaxSize bounds a command's size: 16 MiB.
const MaxSize = 16 << 20

// ErrCommand is returned for a command with an unknown op or a size over
// MaxSize.
var ErrCommand = errors.New("rawbench: malformed command")

// Command encodes a command.
func Command(op byte, n uint64, size uint32) []byte {
	b := make([]byte, CommandLen)
	b[0] = op
	binary.BigEndian.PutUint64(b[1:], n)
	binary.BigEndian.PutUint32(b[9:], size)
	return b
}

// Serve runs commands read from conn until EOF (nil) or an error.
func Serve(conn net.Conn) error {
	br := bufio.NewReaderSize(conn, 64<<10)
	cmd := make([]byte, CommandLen)
	for {
		if _, err := io.ReadFull(br, cmd); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		op, n, size := cmd[0], binary.BigEndian.Uint64(cmd[1:]), binary.BigEndian.Uint32(cmd[9:])
		if size > MaxSize || size == 0 {
			return ErrCommand
		}
		var err error
		switch op {
		case OpStream:
			err = stream(conn, n, size)
		case OpCopy:
			err = copyOut(conn, n, size)
		case OpEcho:
			err = echo(br, conn, n, size)
		default:
			return fmt.Errorf("%w: op %d", ErrCommand, op)
		}
		if err != nil {
			return err
		}
	}
}

func stream(w io.Writer, n uint64, size uint32) error {
	msg := make([]byte, 4+size)
	binary.BigEndian.PutUint32(msg, size)
	for i := uint64(0); i < n; i++ {
		if size >= 8 {
			binary.LittleEndian.PutUint64(msg[4:], i)
		}
		if _, err := w.Write(msg); err != nil { // one write syscall per message
			return err
		}
	}
	return nil
}

func copyOut(w io.Writer, n uint64, size uint32) error {
	buf := make([]byte, size)
	for n > 0 {
		k := min(n, uint64(size))
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func echo(r io.Reader, w io.Writer, n uint64, size uint32) error {
	buf := make([]byte, size)
	for i := uint64(0); i < n; i++ {
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	return nil
}
