// Package termsafe makes text a peer chose safe to show on a terminal.
//
// A terminal acts on some characters instead of showing them: C0 controls
// (ESC starts the sequences that move the cursor, clear the screen, set the
// window title or change colours; CR returns to the start of the line, so
// that what follows overwrites it), DEL, C1 controls (U+009B is a one-
// character CSI on many terminals), the bidirectional overrides and
// isolates (which reorder what is shown, so that the text read is not the
// text written) and the line and paragraph separators. Escape replaces each
// of them, and every byte that is not valid UTF-8 (a lone 0x9B is a CSI on
// a terminal that is not in UTF-8 mode), by a visible escape of plain
// ASCII, so the text shows as written and can do nothing else:
//
//	"\t" "\n" "\r"        → `\t` `\n` `\r`
//	other C0, DEL         → `\x1b`, `\x7f` (two lower-case hex digits)
//	C1, bidi, separators  → `\u009b`, `\u202e`, `\u2028`
//	invalid UTF-8 byte    → `\xff`
//
// Everything else, backslashes included, is kept as it is, so plain text
// is returned unchanged and escaping twice changes nothing more.
package termsafe

import (
	"strings"
	"unicode/utf8"
)

// Escape returns s with every character a terminal would act on replaced
// by a visible escape (see the package doc). The result is one line: it
// holds no control character at all.
func Escape(s string) string { return escape(s, false) }

// Lines is Escape for text of several lines, such as a provider's text
// output: it keeps "\n" and "\t" as they are and escapes everything else
// Escape does ("\r" included, since a carriage return can overwrite a
// line already shown).
func Lines(s string) string { return escape(s, true) }

const hex = "0123456789abcdef"

func escape(s string, keepLines bool) string {
	i := 0
	for i < len(s) {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			if keepLines && (c == '\n' || c == '\t') {
				i++
				continue
			}
			break
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || unsafeRune(r) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		c := s[i]
		switch {
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
			i++
		case c < utf8.RuneSelf:
			switch {
			case keepLines && (c == '\n' || c == '\t'):
				b.WriteByte(c)
			case c == '\t':
				b.WriteString(`\t`)
			case c == '\n':
				b.WriteString(`\n`)
			case c == '\r':
				b.WriteString(`\r`)
			default:
				b.WriteString(`\x`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			}
			i++
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && n == 1:
				b.WriteString(`\x`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			case unsafeRune(r):
				b.WriteString(`\u`)
				for shift := 12; shift >= 0; shift -= 4 {
					b.WriteByte(hex[r>>shift&0xf])
				}
			default:
				b.WriteString(s[i : i+n])
			}
			i += n
		}
	}
	return b.String()
}

// unsafeRune reports whether r (at or above U+0080) is a C1 control, a
// bidirectional control or a line or paragraph separator.
func unsafeRune(r rune) bool {
	switch {
	case r <= 0x9f: // C1
		return true
	case r == 0x061c: // ARABIC LETTER MARK
		return true
	case r == 0x200e || r == 0x200f: // LRM, RLM
		return true
	case r >= 0x2028 && r <= 0x202e: // LINE and PARAGRAPH SEPARATOR, LRE RLE PDF LRO RLO
		return true
	case r >= 0x2066 && r <= 0x2069: // LRI RLI FSI PDI
		return true
	}
	return false
}
