package asif_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/asif"
	"github.com/skulkrt/skulk/internal/strictjson"
)

// FuzzCheck feeds arbitrary bytes and mutated examples to Check: it must
// never panic, and every error must be one of the documented types.
func FuzzCheck(f *testing.F) {
	f.Add(readFile(f, partialExample))
	f.Add(readFile(f, completedExample))
	f.Add([]byte(`{"asif_version":"0.5"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		report, err := asif.Check(data, asif.Options{})
		if err == nil {
			require.False(t, report == nil, "nil report without error")
			return
		}
		var (
			re *asif.ReadError
			ve *asif.VersionError
			se *asif.SchemaError
			ru *asif.RuleError
		)
		switch {
		case errors.As(err, &re), errors.As(err, &ve), errors.As(err, &se):
			require.False(t, report != nil, "report returned with a pre-rule refusal")
		case errors.As(err, &ru):
			require.False(t, report == nil, "rule refusal without a report")
		default:
			require.FailNow(t, fmt.Sprintf("undocumented error type %T: %v", err, err))
		}
	})
}

// FuzzStreams varies the completed example's second fragment and the
// segments of stream-complete. Whatever the values, Check must not panic;
// the reported prefix must be a prefix of the fragments' concatenation; and
// a clean check of a complete stream must mean an executable call whose
// assembled bytes are exactly the fragments.
func FuzzStreams(f *testing.F) {
	f.Add(int64(0), int64(1), int64(0), int64(4), false, true, []byte(`42"}`))
	f.Add(int64(0), int64(2), int64(0), int64(4), false, true, []byte(`42"}`))
	f.Add(int64(0), int64(1), int64(1), int64(4), true, true, []byte(`42"}`))
	f.Add(int64(1), int64(0), int64(0), int64(3), false, false, []byte("\xa9\"}"))
	base := readFile(f, completedExample)
	f.Fuzz(func(t *testing.T, idx0, idx1, off1, len1 int64, term0, term1 bool, suffix []byte) {
		v, err := strictjson.Parse(base)
		require.NoError(t, err)
		doc := v.(tree)
		setData(doc, "arguments-suffix", suffix)
		s0, s1 := segment(doc, "stream-complete", 0), segment(doc, "stream-complete", 1)
		s0["index"], s0["terminal"] = json.Number(jsonInt64(idx0)), term0
		s1["index"], s1["offset"], s1["length"], s1["terminal"] = json.Number(jsonInt64(idx1)), json.Number(jsonInt64(off1)), json.Number(jsonInt64(len1)), term1
		report, err := asif.Check(encode(t, doc), asif.Options{})
		if report == nil {
			require.ErrorIs(t, err, asif.ErrSchema, "no report and not a schema refusal")
			return
		}
		s := report.Stream("stream-complete")
		// Expected prefix: by index from zero, the first segment (in array
		// order) with each index, up to a missing index or a bad span.
		type seg struct {
			index int64
			bytes []byte
			ok    bool
		}
		inBounds := off1 >= 0 && len1 >= 0 && off1 <= int64(len(suffix)) && len1 <= int64(len(suffix))-off1
		segs := []seg{{idx0, []byte(`{"document_id":"meeting-`), true}, {idx1, nil, inBounds}}
		if inBounds {
			segs[1].bytes = suffix[off1 : off1+len1]
		}
		var want []byte
		for next := int64(0); ; next++ {
			i := slices.IndexFunc(segs, func(g seg) bool { return g.index == next })
			if i < 0 || !segs[i].ok {
				break
			}
			want = append(want, segs[i].bytes...)
		}
		require.Falsef(t, !bytes.Equal(s.Bytes, want), "assembled %q, want %q", s.Bytes, want)
		require.Falsef(t, s.Size != len(s.Bytes), "size %d for %d bytes", s.Size, len(s.Bytes))
		if err == nil {
			require.Falsef(t, !s.Executable || s.Status != asif.StreamComplete, "clean check but stream = %+v", s)
			require.Falsef(t, string(s.Bytes) != `{"document_id":"meeting-`+string(suffix[off1:off1+len1]), "clean check assembled %q", s.Bytes)
		}
		require.False(t, s.Executable && s.Status != asif.StreamComplete, "partial stream reported executable")
	})
}

func jsonInt64(n int64) string { b, _ := json.Marshal(n); return string(b) }
