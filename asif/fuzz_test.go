package asif_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/skulkrt/skulk/asif"
)

// FuzzParseJSON holds the strict reader to encoding/json as an oracle:
// whatever ParseJSON accepts, encoding/json accepts with an identical tree;
// whatever encoding/json refuses, ParseJSON refuses. ParseJSON may refuse
// more only for its documented strictness reasons.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `0`, `-0.5e+10`, `"a\u00e9\ud83d\ude00"`, `{"a":[1,{"b":null}],"c":true}`,
		`{"a":1,"a":2}`, `NaN`, `[-Infinity]`, `"\ud800"`, "\"\xff\"", `[1,]`, `{"a" 1}`, ` [ 1 , 2 ] `,
		`1e400`, `"\/\b\f\n\r\t"`, "\ufeff{}",
	} {
		f.Add([]byte(s))
	}
	f.Add(readFile(f, completedExample))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := asif.ParseJSON(data)
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		stdErr := dec.Decode(&want)
		if stdErr == nil && len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) != 0 {
			stdErr = errors.New("trailing data")
		}
		if err == nil {
			if stdErr != nil {
				t.Fatalf("ParseJSON accepted what encoding/json refuses (%v)", stdErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("trees differ:\n got %#v\nwant %#v", got, want)
			}
			if !asif.EqualJSON(got, got) {
				t.Fatal("value not EqualJSON to itself")
			}
			return
		}
		var re *asif.ReadError
		if !errors.As(err, &re) || re.Offset < 0 || re.Offset > int64(len(data)) {
			t.Fatalf("error %v is not a *ReadError with an in-range offset", err)
		}
		if stdErr == nil {
			switch {
			case errors.Is(err, asif.ErrDuplicateKey), errors.Is(err, asif.ErrTooDeep),
				errors.Is(err, asif.ErrTooManyValues):
			case errors.Is(err, asif.ErrInvalidUTF8):
				// encoding/json replaces invalid UTF-8 and lone
				// surrogates with U+FFFD; it cannot have been valid.
				if utf8.Valid(data) && !bytes.Contains(data, []byte(`\u`)) && !bytes.Contains(data, []byte(`\U`)) {
					t.Fatalf("ErrInvalidUTF8 for valid UTF-8 without escapes")
				}
			default:
				t.Fatalf("ParseJSON refused (%v) what encoding/json accepts", err)
			}
		}
	})
}

// FuzzCheck feeds arbitrary bytes and mutated examples to Check: it must
// never panic, and every error must be one of the documented types.
func FuzzCheck(f *testing.F) {
	f.Add(readFile(f, partialExample))
	f.Add(readFile(f, completedExample))
	f.Add([]byte(`{"asif_version":"0.5"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		report, err := asif.Check(data, asif.Options{})
		if err == nil {
			if report == nil {
				t.Fatal("nil report without error")
			}
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
			if report != nil {
				t.Fatal("report returned with a pre-rule refusal")
			}
		case errors.As(err, &ru):
			if report == nil {
				t.Fatal("rule refusal without a report")
			}
		default:
			t.Fatalf("undocumented error type %T: %v", err, err)
		}
	})
}

func TestEqualJSON(t *testing.T) {
	cases := []struct {
		a, b string
		eq   bool
	}{
		{`1`, `1.0`, true},
		{`10e-1`, `1`, true},
		{`0`, `-0.0e5`, true},
		{`1.5`, `15E-1`, true},
		{`100`, `1e2`, true},
		{`1`, `1.0000000000000000000000001`, false},
		{`9007199254740993`, `9007199254740992`, false}, // equal as float64, not as JSON
		{`{"a":1,"b":[true,null]}`, `{"b":[true,null],"a":1.0}`, true},
		{`{"a":1}`, `{"a":1,"b":2}`, false},
		{`[1,2]`, `[2,1]`, false},
		{`"é"`, `"\u00e9"`, true},
		{`"1"`, `1`, false},
		{`1e99999999999999999999`, `1e99999999999999999999`, true},
		{`1e99999999999999999999`, `10e99999999999999999998`, false}, // exponent beyond int64: text only
	}
	for _, tc := range cases {
		a, err := asif.ParseJSON([]byte(tc.a))
		if err != nil {
			t.Fatal(err)
		}
		b, err := asif.ParseJSON([]byte(tc.b))
		if err != nil {
			t.Fatal(err)
		}
		if got := asif.EqualJSON(a, b); got != tc.eq {
			t.Errorf("EqualJSON(%s, %s) = %v", tc.a, tc.b, got)
		}
	}
}

func TestParseJSONKeepsNumbersExactly(t *testing.T) {
	v, err := asif.ParseJSON([]byte(`[9007199254740993, 1.10, -0, 1e400]`))
	if err != nil {
		t.Fatal(err)
	}
	want := []any{json.Number("9007199254740993"), json.Number("1.10"), json.Number("-0"), json.Number("1e400")}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("got %#v", v)
	}
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
		v, err := asif.ParseJSON(base)
		if err != nil {
			t.Fatal(err)
		}
		doc := v.(tree)
		setData(doc, "arguments-suffix", suffix)
		s0, s1 := segment(doc, "stream-complete", 0), segment(doc, "stream-complete", 1)
		s0["index"], s0["terminal"] = json.Number(jsonInt64(idx0)), term0
		s1["index"], s1["offset"], s1["length"], s1["terminal"] = json.Number(jsonInt64(idx1)), json.Number(jsonInt64(off1)), json.Number(jsonInt64(len1)), term1
		report, err := asif.Check(encode(t, doc), asif.Options{})
		if report == nil {
			if !errors.Is(err, asif.ErrSchema) {
				t.Fatalf("no report and not a schema refusal: %v", err)
			}
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
		if !bytes.Equal(s.Bytes, want) {
			t.Fatalf("assembled %q, want %q", s.Bytes, want)
		}
		if s.Size != len(s.Bytes) {
			t.Fatalf("size %d for %d bytes", s.Size, len(s.Bytes))
		}
		if err == nil {
			if !s.Executable || s.Status != asif.StreamComplete {
				t.Fatalf("clean check but stream = %+v", s)
			}
			if string(s.Bytes) != `{"document_id":"meeting-`+string(suffix[off1:off1+len1]) {
				t.Fatalf("clean check assembled %q", s.Bytes)
			}
		}
		if s.Executable && s.Status != asif.StreamComplete {
			t.Fatal("partial stream reported executable")
		}
	})
}

func jsonInt64(n int64) string { b, _ := json.Marshal(n); return string(b) }
