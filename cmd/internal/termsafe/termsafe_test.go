package termsafe

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		name, in, escape, lines string
	}{
		{"empty", "", "", ""},
		{"plain", `boom: C:\path "quoted" 100%`, `boom: C:\path "quoted" 100%`, `boom: C:\path "quoted" 100%`},
		{"unicode kept", "héllo wörld 日本 🙂 a\u200db", "héllo wörld 日本 🙂 a\u200db", "héllo wörld 日本 🙂 a\u200db"},
		{"title", "boom\x1b]0;pwned\x07", `boom\x1b]0;pwned\x07`, `boom\x1b]0;pwned\x07`},
		{"colour and fake line", "boom\r\n\x1b[1;31mFAKE: completed OK\x1b[0m", `boom\r\n\x1b[1;31mFAKE: completed OK\x1b[0m`, "boom\\r\n\\x1b[1;31mFAKE: completed OK\\x1b[0m"},
		{"clear screen", "\x1b[2J\x1b[H", `\x1b[2J\x1b[H`, `\x1b[2J\x1b[H`},
		{"tab", "a\tb", `a\tb`, "a\tb"},
		{"nul bell backspace", "a\x00b\x07c\x08", `a\x00b\x07c\x08`, `a\x00b\x07c\x08`},
		{"del", "a\x7fb", `a\x7fb`, `a\x7fb`},
		{"c1 csi", "a\u009b2Jb\u0085c", `a\u009b2Jb\u0085c`, `a\u009b2Jb\u0085c`},
		{"raw c1 byte", "a\x9b2J", `a\x9b2J`, `a\x9b2J`},
		{"invalid utf-8", "a\xff\xfeb\xe2\x80", `a\xff\xfeb\xe2\x80`, `a\xff\xfeb\xe2\x80`},
		{"bidi override", "user\u202Eexe.txt", `user\u202eexe.txt`, `user\u202eexe.txt`},
		{"bidi isolates and marks", "\u2066a\u2069\u200e\u200f\u061c", `\u2066a\u2069\u200e\u200f\u061c`, `\u2066a\u2069\u200e\u200f\u061c`},
		{"separators", "a\u2028b\u2029c", `a\u2028b\u2029c`, `a\u2028b\u2029c`},
		{"media type", "audio/wav\x1b[2J/../../etc", `audio/wav\x1b[2J/../../etc`, `audio/wav\x1b[2J/../../etc`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Escape(tc.in); got != tc.escape {
				assert.Fail(t, fmt.Sprintf("Escape(%q) = %q, want %q", tc.in, got, tc.escape))
			}
			if got := Lines(tc.in); got != tc.lines {
				assert.Fail(t, fmt.Sprintf("Lines(%q) = %q, want %q", tc.in, got, tc.lines))
			}
		})
	}
}

// inert reports what in s a terminal could act on, or "" if nothing.
func inert(s string, keepLines bool) string {
	if !utf8.ValidString(s) {
		return "invalid UTF-8"
	}
	for _, r := range s {
		if keepLines && (r == '\n' || r == '\t') {
			continue
		}
		if r < 0x20 || r == 0x7f || r >= 0x80 && unsafeRune(r) {
			return "control " + string(r)
		}
	}
	return ""
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "plain", "boom\x1b]0;t\x07\x1b[1;31mFAKE", "\xff\u009b\u202e\r\n\t", "a\\x1b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, keep := range []bool{false, true} {
			esc := escape(s, keep)
			if why := inert(esc, keep); why != "" {
				require.FailNow(t, fmt.Sprintf("escape(%q, %v) = %q: %s", s, keep, esc, why))
			}
			if again := escape(esc, keep); again != esc {
				require.FailNow(t, fmt.Sprintf("escaping twice changed %q to %q", esc, again))
			}
			require.Falsef(t, inert(s, keep) == "" && esc != s, "safe %q changed to %q", s, esc)
			require.Falsef(t, keep && strings.Count(esc, "\n") != strings.Count(s, "\n"), "Lines changed the line count of %q: %q", s, esc)
		}
	})
}
