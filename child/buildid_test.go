package child

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGoBuildID: the ID read from the ELF note is the one the go command
// reports for the same executable; a file that is not ELF has none.
func TestGoBuildID(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	id, ok := goBuildID(exe)
	require.True(t, ok, "the test binary carries a Go build ID")
	out, err := exec.Command("go", "tool", "buildid", exe).Output()
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(out)), id)

	notELF := filepath.Join(t.TempDir(), "script")
	require.NoError(t, os.WriteFile(notELF, []byte("#!/bin/sh\nexit 0\n"), 0o755))
	_, ok = goBuildID(notELF)
	require.False(t, ok)
	_, ok = goBuildID(filepath.Join(t.TempDir(), "missing"))
	require.False(t, ok)
}

// synthELF returns a minimal ELF file of the given class (1: 32-bit, 2:
// 64-bit) and byte order whose one PT_NOTE segment holds notes.
func synthELF(class byte, bo binary.ByteOrder, notes []byte) []byte {
	const phoff = 64
	ehdr := make([]byte, 64)
	copy(ehdr, "\x7fELF")
	ehdr[4], ehdr[5] = class, 1
	if bo == binary.BigEndian {
		ehdr[5] = 2
	}
	var ph []byte
	noteOff := uint64(phoff + 2*56) // after two program headers of the larger size
	if class == 1 {
		bo.PutUint32(ehdr[28:], phoff)
		bo.PutUint16(ehdr[42:], 32)
		bo.PutUint16(ehdr[44:], 2)
		ph = make([]byte, 64)
		bo.PutUint32(ph[0:], 1) // PT_LOAD, skipped
		bo.PutUint32(ph[32:], 4)
		bo.PutUint32(ph[36:], uint32(noteOff))
		bo.PutUint32(ph[48:], uint32(len(notes)))
	} else {
		bo.PutUint64(ehdr[32:], phoff)
		bo.PutUint16(ehdr[54:], 56)
		bo.PutUint16(ehdr[56:], 2)
		ph = make([]byte, 112)
		bo.PutUint32(ph[0:], 1)
		bo.PutUint32(ph[56:], 4)
		bo.PutUint64(ph[56+8:], noteOff)
		bo.PutUint64(ph[56+32:], uint64(len(notes)))
	}
	out := append(ehdr, ph...)
	out = append(out, make([]byte, int(noteOff)-len(out))...)
	return append(out, notes...)
}

// note encodes one ELF note, name and descriptor padded to 4 bytes.
func note(bo binary.ByteOrder, name string, typ uint32, desc string) []byte {
	b := make([]byte, 12)
	bo.PutUint32(b, uint32(len(name)))
	bo.PutUint32(b[4:], uint32(len(desc)))
	bo.PutUint32(b[8:], typ)
	b = append(b, name...)
	b = append(b, make([]byte, (4-len(name)%4)%4)...)
	b = append(b, desc...)
	return append(b, make([]byte, (4-len(desc)%4)%4)...)
}

// TestGoBuildIDLayouts: the note is found in 32- and 64-bit files of
// either byte order, after another note in the same segment; a file whose
// notes are cut short, or that has none named Go, has no ID.
func TestGoBuildIDLayouts(t *testing.T) {
	for _, class := range []byte{1, 2} {
		for _, bo := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
			gnu := note(bo, "GNU\x00", 3, "0123456789abcdef0123")
			goID := note(bo, "Go\x00\x00", 4, "abc/def/ghi/jkl1") // 16 bytes
			id, ok := elfGoBuildID(bytes.NewReader(synthELF(class, bo, append(gnu, goID...))))
			require.True(t, ok, "class %d, %v", class, bo)
			require.Equal(t, "abc/def/ghi/jkl1", id)

			odd := note(bo, "Go\x00\x00", 4, "a/b/c") // padded descriptor
			id, ok = elfGoBuildID(bytes.NewReader(synthELF(class, bo, odd)))
			require.True(t, ok)
			require.Equal(t, "a/b/c", id)

			cut := append(gnu, goID...)
			_, ok = elfGoBuildID(bytes.NewReader(synthELF(class, bo, cut[:len(cut)-4])))
			require.False(t, ok, "a note cut short")
			_, ok = elfGoBuildID(bytes.NewReader(synthELF(class, bo, note(bo, "Go\x00\x00", 3, "x"))))
			require.False(t, ok, "a Go note of another type")
			_, ok = elfGoBuildID(bytes.NewReader(synthELF(class, bo, gnu)))
			require.False(t, ok, "no Go note")
		}
	}
}

// FuzzGoBuildID: any bytes give an ID or none, never a panic; an ID read is
// a part of the input.
func FuzzGoBuildID(f *testing.F) {
	f.Add(synthELF(2, binary.LittleEndian, note(binary.LittleEndian, "Go\x00\x00", 4, "abc/def")))
	f.Add(synthELF(1, binary.BigEndian, note(binary.BigEndian, "Go\x00\x00", 4, "x")))
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		id, ok := elfGoBuildID(bytes.NewReader(data))
		if ok {
			require.NotEmpty(t, id)
			require.True(t, bytes.Contains(data, []byte(id)))
		}
	})
}
