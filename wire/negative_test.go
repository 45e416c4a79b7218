package wire_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
	"github.com/skulkrt/skulk/wire/internal/protocol"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// The negative vectors in testdata/negative are the reader's cases of
// reader_test.go (limitCases, overLimitCases, protocolErrorCases,
// invalidPacketCases, keyRuleAccepts, keyRuleRefusals) as files other
// implementations can use: each case's bytes in NAME.bin, and what a
// reader must do with them in vectors.json (testdata/negative/README.md
// describes the format). TestNegativeVectors keeps the files equal to the
// tables (-update rewrites them); TestNegativeManifest checks the files
// against Decode and Reader from the manifest alone, as another
// implementation would.

const (
	negativeDir      = "testdata/negative"
	negativeManifest = "vectors.json"
)

// Outcomes of a negative vector.
const (
	outcomeProtocolError = "protocol_error"
	outcomeInvalidPacket = "invalid_packet"
	outcomeAccept        = "accept"
)

// protocolRules names each protocol error in the manifest.
var protocolRules = map[string]error{
	"header_length":         protocol.ErrHeaderLength,
	"attachment_length":     protocol.ErrAttachmentLength,
	"malformed_header":      protocol.ErrMalformedHeader,
	"unknown_type":          protocol.ErrUnknownType,
	"unexpected_attachment": protocol.ErrUnexpectedAttachment,
	"bad_field":             protocol.ErrBadField,
}

// ruleName returns the manifest's name of protocol error err.
func ruleName(err error) string {
	for name, e := range protocolRules {
		if err == e {
			return name
		}
	}
	panic(fmt.Sprintf("no rule name for %v", err))
}

// negManifest is testdata/negative/vectors.json.
type negManifest struct {
	About string `json:"about"`
	// Limits are the protocol's defaults and hard ceilings, for reference;
	// each vector names the limits to read it with.
	Limits  negLimits   `json:"limits"`
	Vectors []negVector `json:"vectors"`
}

type negLimits struct {
	Default     wire.Limits `json:"default"`
	HardCeiling wire.Limits `json:"hard_ceiling"`
}

// negVector is one vector of the manifest.
type negVector struct {
	Name string `json:"name"`
	File string `json:"file"`
	// Source is the Go test whose table holds the case, and Case its name
	// there.
	Source string `json:"source"`
	Case   string `json:"case"`
	// Limits are the effective limits to read the file with.
	Limits  wire.Limits `json:"limits"`
	Outcome string      `json:"outcome"`
	// Rule names the protocol error, for protocol_error.
	Rule string `json:"rule,omitempty"`
	// Type, Field and CallID describe an invalid_packet: the packet's type,
	// the field at fault, the call id ("" when it was not readable).
	Type   string  `json:"type,omitempty"`
	Field  string  `json:"field,omitempty"`
	CallID *string `json:"call_id,omitempty"`
	// Packet is the accepted packet's header as our encoder writes it,
	// shown as JSON, and AttachmentHex its attachment, for accept.
	Packet        json.RawMessage `json:"packet,omitempty"`
	AttachmentHex string          `json:"attachment_hex,omitempty"`
}

// negFile is one vector: its manifest entry and its bytes.
type negFile struct {
	v negVector
	b []byte
}

// vectorName turns a case's name into a file name: lower case, runs of
// anything but letters and digits as one underscore.
func vectorName(s string) string {
	var b strings.Builder
	under := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if under && b.Len() > 0 {
				b.WriteByte('_')
			}
			under = false
			b.WriteRune(r)
			continue
		}
		under = true
	}
	return b.String()
}

// headerJSON returns the header of encoded packet b as JSON, as describe
// renders it.
func headerJSON(b []byte) json.RawMessage {
	h := int(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
	dec := msgpack.NewDecoder(bytes.NewReader(b[protocol.PrefixLen : protocol.PrefixLen+h]))
	dec.UseLooseInterfaceDecoding(true)
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		panic(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return js
}

// acceptEntry fills v's accept fields from packet p.
func acceptEntry(v negVector, p wire.Packet) negVector {
	enc, err := packetio.Encode(p, wire.Limits{})
	if err != nil {
		panic(err)
	}
	v.Outcome = outcomeAccept
	v.Packet = headerJSON(enc)
	h := int(uint32(enc[0])<<24 | uint32(enc[1])<<16 | uint32(enc[2])<<8 | uint32(enc[3]))
	v.AttachmentHex = hex.EncodeToString(enc[protocol.PrefixLen+h:])
	return v
}

func invalidEntry(v negVector, c invalidPacketCase) negVector {
	v.Outcome, v.Type, v.Field, v.CallID = outcomeInvalidPacket, c.typ.String(), c.field, &c.callID
	return v
}

// negativeFiles builds every negative vector from the tables.
func negativeFiles() []negFile {
	var fs []negFile
	add := func(source, name string, b []byte, l wire.Limits, fill func(negVector) negVector) {
		n := vectorName(name)
		v := negVector{Name: n, File: n + ".bin", Source: source, Case: name, Limits: packetio.Effective(l)}
		fs = append(fs, negFile{fill(v), b})
	}
	protocolErr := func(err error) func(negVector) negVector {
		return func(v negVector) negVector {
			v.Outcome, v.Rule = outcomeProtocolError, ruleName(err)
			return v
		}
	}
	for _, c := range limitCases() {
		if c.want == nil {
			add("TestLimits", c.name, c.b, c.l, func(v negVector) negVector { return acceptEntry(v, c.accept) })
			continue
		}
		add("TestLimits", c.name, c.b, c.l, protocolErr(c.want))
	}
	over := overLimitCases()
	for _, name := range slices.Sorted(maps.Keys(over)) {
		add("TestOverLimitRefusedWithoutAllocating", name+" over limit", over[name].b, overLimitLimits, protocolErr(over[name].want))
	}
	for _, c := range protocolErrorCases() {
		add("TestProtocolErrors", c.name, c.b, wire.Limits{}, protocolErr(c.want))
	}
	for _, c := range invalidPacketCases() {
		add("TestInvalidPackets", c.name, pkt(c.h, c.att), wire.Limits{}, func(v negVector) negVector { return invalidEntry(v, c) })
	}
	for _, c := range keyRuleAccepts() {
		add("TestHeaderKeyRules", c.name, c.b, wire.Limits{}, func(v negVector) negVector { return acceptEntry(v, c.want) })
	}
	for _, c := range keyRuleRefusals() {
		add("TestHeaderKeyRules", c.name, pkt(c.h, c.att), wire.Limits{}, func(v negVector) negVector { return invalidEntry(v, c) })
	}
	return fs
}

// encodeManifest renders the manifest of fs as vectors.json holds it: one
// vector a line, so that a change shows as the lines of the vectors it
// changed.
func encodeManifest(fs []negFile) []byte {
	compact := func(v any) string {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			panic(err)
		}
		return strings.TrimSuffix(buf.String(), "\n")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "{\n  \"about\": %s,\n", compact("Negative test vectors of the Skulk wire reader; see README.md beside this file."))
	fmt.Fprintf(&b, "  \"limits\": %s,\n", compact(negLimits{
		Default: packetio.DefaultLimits(), HardCeiling: wire.Limits{MaxHeader: protocol.HardMaxHeader, MaxAttachment: protocol.HardMaxAttachment}}))
	b.WriteString("  \"vectors\": [\n")
	for i, f := range fs {
		sep := ","
		if i == len(fs)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "    %s%s\n", compact(f.v), sep)
	}
	b.WriteString("  ]\n}\n")
	return []byte(b.String())
}

// firstDiff describes the first line where got differs from want.
func firstDiff(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := range max(len(w), len(g)) {
		wl, gl := "", ""
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d is\n\t%s\nwant\n\t%s", i+1, gl, wl)
		}
	}
	return "no difference"
}

// TestNegativeVectors keeps testdata/negative equal to the tables it is
// built from: with -update it rewrites the files, and it fails when one
// differs, is missing, or is left over from a case that no longer exists.
func TestNegativeVectors(t *testing.T) {
	fs := negativeFiles()
	names := map[string]bool{}
	for _, f := range fs {
		require.False(t, names[f.v.File], "two cases named %s", f.v.Name)
		names[f.v.File] = true
	}
	manifest := encodeManifest(fs)
	if *update {
		require.NoError(t, os.MkdirAll(negativeDir, 0o755))
		old, err := filepath.Glob(filepath.Join(negativeDir, "*.bin"))
		require.NoError(t, err)
		for _, o := range old {
			require.NoError(t, os.Remove(o))
		}
		for _, f := range fs {
			require.NoError(t, os.WriteFile(filepath.Join(negativeDir, f.v.File), f.b, 0o644))
		}
		require.NoError(t, os.WriteFile(filepath.Join(negativeDir, negativeManifest), manifest, 0o644))
	}
	const regen = "run go test ./wire -run TestNegativeVectors -update, and review the diff"
	got, err := os.ReadFile(filepath.Join(negativeDir, negativeManifest))
	require.NoError(t, err, regen)
	require.True(t, bytes.Equal(manifest, got), "vectors.json differs from the tables: %s\n%s", firstDiff(manifest, got), regen)
	for _, f := range fs {
		b, err := os.ReadFile(filepath.Join(negativeDir, f.v.File))
		require.NoError(t, err, regen)
		require.Equal(t, hex.EncodeToString(f.b), hex.EncodeToString(b), "%s differs from its case: %s", f.v.File, regen)
	}
	bins, err := filepath.Glob(filepath.Join(negativeDir, "*.bin"))
	require.NoError(t, err)
	for _, b := range bins {
		require.True(t, names[filepath.Base(b)], "%s is no case's: %s", b, regen)
	}
}

// TestNegativeManifest checks every vector of testdata/negative against
// Decode and Reader from the manifest alone, as an implementation in
// another language would use it.
func TestNegativeManifest(t *testing.T) {
	js, err := os.ReadFile(filepath.Join(negativeDir, negativeManifest))
	require.NoError(t, err)
	var m negManifest
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&m))
	require.Equal(t, packetio.DefaultLimits(), m.Limits.Default)
	require.Equal(t, wire.Limits{MaxHeader: protocol.HardMaxHeader, MaxAttachment: protocol.HardMaxAttachment}, m.Limits.HardCeiling)
	// An invalid packet is followed by the golden ping: the reader must
	// still be in step and read it.
	next, err := os.ReadFile(filepath.Join(goldenDir, "ping.bin"))
	require.NoError(t, err)
	nextPacket, err := wire.Decode(next, wire.Limits{})
	require.NoError(t, err)

	outcomes := map[string]int{}
	for _, v := range m.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			outcomes[v.Outcome]++
			b, err := os.ReadFile(filepath.Join(negativeDir, v.File))
			require.NoError(t, err)
			l := v.Limits
			require.NotZero(t, l.MaxHeader)
			require.NotZero(t, l.MaxAttachment)
			switch v.Outcome {
			case outcomeProtocolError:
				rule, ok := protocolRules[v.Rule]
				require.True(t, ok, "unknown rule %q", v.Rule)
				r := packetio.NewReader(bytes.NewReader(b), l)
				p, err := r.ReadPacket()
				require.Nil(t, p)
				require.ErrorIs(t, err, rule)
				var inv *protocol.InvalidError
				require.False(t, errors.As(err, &inv), "a protocol error is not an invalid packet")
				_, err2 := r.ReadPacket()
				require.Equal(t, err, err2, "protocol errors are sticky")
				_, err = wire.Decode(b, l)
				require.ErrorIs(t, err, rule, "Decode agrees with Reader")

			case outcomeInvalidPacket:
				require.NotNil(t, v.CallID, "an invalid packet names its call id, empty or not")
				check := func(err error) {
					t.Helper()
					var inv *protocol.InvalidError
					require.ErrorAs(t, err, &inv)
					require.NotErrorIs(t, err, wire.ErrProtocol)
					require.Equal(t, v.Type, inv.Type.String())
					require.Equal(t, *v.CallID, inv.CallID)
					var fe *frame.FieldError
					require.ErrorAs(t, err, &fe)
					require.Equal(t, v.Field, fe.Field)
				}
				r := packetio.NewReader(iotest.OneByteReader(io.MultiReader(bytes.NewReader(b), bytes.NewReader(next))), l)
				p, err := r.ReadPacket()
				require.Nil(t, p)
				check(err)
				p, err = r.ReadPacket()
				require.NoError(t, err, "the packet after an invalid one reads")
				require.Equal(t, nextPacket, p)
				_, err = wire.Decode(b, l)
				check(err)

			case outcomeAccept:
				p, err := packetio.NewReader(iotest.OneByteReader(bytes.NewReader(b)), l).ReadPacket()
				require.NoError(t, err)
				p2, err := wire.Decode(b, l)
				require.NoError(t, err)
				require.Equal(t, p, p2, "Decode agrees with Reader")
				enc, err := packetio.Encode(p, wire.Limits{})
				require.NoError(t, err)
				require.JSONEq(t, string(v.Packet), string(headerJSON(enc)))
				h := int(uint32(enc[0])<<24 | uint32(enc[1])<<16 | uint32(enc[2])<<8 | uint32(enc[3]))
				require.Equal(t, v.AttachmentHex, hex.EncodeToString(enc[protocol.PrefixLen+h:]))

			default:
				require.FailNow(t, fmt.Sprintf("unknown outcome %q", v.Outcome))
			}
		})
	}
	for _, o := range []string{outcomeProtocolError, outcomeInvalidPacket, outcomeAccept} {
		require.NotZero(t, outcomes[o], "no %s vector", o)
	}
}
