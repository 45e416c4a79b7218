package child

import (
	"encoding/binary"
	"io"
	"os"
)

// maxBuildIDNote bounds the note segment read by goBuildID; the Go note
// holds a name and an ID of four base64 hashes, about 100 bytes, and may
// share its segment with the GNU build-id note.
const maxBuildIDNote = 4 << 10

// maxProgHeaders bounds the program headers goBuildID looks through; a Go
// executable has about ten.
const maxProgHeaders = 64

// goBuildID returns the Go build ID of the ELF executable at path, from its
// note: the linker's hash of the executable's inputs and contents, which
// changes whenever the executable does. It reads only the ELF header, the
// program headers and the note segments, a few hundred bytes at the start
// of the file. ok is false for anything else: not ELF, no such note (built
// with -buildid= or by another toolchain), a malformed one.
//
// It reads the file itself rather than with debug/elf, which would add
// compress/zlib, debug/dwarf and their package inits to every provider's
// start, for a lookup this small.
func goBuildID(path string) (id string, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	return elfGoBuildID(f)
}

// elfGoBuildID is goBuildID on an open file.
func elfGoBuildID(r io.ReaderAt) (string, bool) {
	var ident [64]byte
	if _, err := r.ReadAt(ident[:], 0); err != nil || string(ident[:4]) != "\x7fELF" {
		return "", false
	}
	var bo binary.ByteOrder
	switch ident[5] {
	case 1:
		bo = binary.LittleEndian
	case 2:
		bo = binary.BigEndian
	default:
		return "", false
	}
	// The program header table: where it is, the size of an entry and
	// how many, then each entry's type, offset and size in the file.
	var phoff uint64
	var phentsize, phnum int
	var entry func(ph []byte) (typ uint32, off, size uint64)
	switch ident[4] {
	case 1: // 32-bit
		phoff = uint64(bo.Uint32(ident[28:]))
		phentsize, phnum = int(bo.Uint16(ident[42:])), int(bo.Uint16(ident[44:]))
		entry = func(ph []byte) (uint32, uint64, uint64) {
			return bo.Uint32(ph), uint64(bo.Uint32(ph[4:])), uint64(bo.Uint32(ph[16:]))
		}
		if phentsize < 32 {
			return "", false
		}
	case 2: // 64-bit
		phoff = bo.Uint64(ident[32:])
		phentsize, phnum = int(bo.Uint16(ident[54:])), int(bo.Uint16(ident[56:]))
		entry = func(ph []byte) (uint32, uint64, uint64) {
			return bo.Uint32(ph), bo.Uint64(ph[8:]), bo.Uint64(ph[32:])
		}
		if phentsize < 56 {
			return "", false
		}
	default:
		return "", false
	}
	if phnum == 0 || phnum > maxProgHeaders || phentsize > 256 || phoff > 1<<40 {
		return "", false
	}
	phs := make([]byte, phnum*phentsize)
	if _, err := r.ReadAt(phs, int64(phoff)); err != nil {
		return "", false
	}
	const ptNote = 4
	for i := range phnum {
		typ, off, size := entry(phs[i*phentsize:])
		if typ != ptNote || size > maxBuildIDNote || off > 1<<40 {
			continue
		}
		seg := make([]byte, size)
		if _, err := r.ReadAt(seg, int64(off)); err != nil {
			continue
		}
		if id, ok := goNote(seg, bo); ok {
			return id, true
		}
	}
	return "", false
}

// goNote finds the Go build-ID note in a note segment: notes of namesz,
// descsz and type (4 bytes each), then the name and the descriptor, each
// padded to 4 bytes. The Go note is named "Go\x00\x00" and has type 4.
func goNote(seg []byte, bo binary.ByteOrder) (string, bool) {
	const goBuildIDNoteType = 4
	for len(seg) >= 12 {
		nameSize, descSize, typ := uint64(bo.Uint32(seg)), uint64(bo.Uint32(seg[4:])), bo.Uint32(seg[8:])
		seg = seg[12:]
		namePad, descPad := (nameSize+3)&^3, (descSize+3)&^3
		if namePad > uint64(len(seg)) || descPad > uint64(len(seg))-namePad {
			return "", false
		}
		name, desc := seg[:nameSize], seg[namePad:namePad+descSize]
		if typ == goBuildIDNoteType && string(name) == "Go\x00\x00" && descSize > 0 {
			return string(desc), true
		}
		seg = seg[namePad+descPad:]
	}
	return "", false
}
