package strictjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/internal/strictjson"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// FuzzParseJSON holds the strict reader to encoding/json as an oracle:
// whatever Parse accepts, encoding/json accepts with an identical tree;
// whatever encoding/json refuses, ParseJSON refuses. Parse may refuse
// more only for its documented strictness reasons.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `0`, `-0.5e+10`, `"a\u00e9\ud83d\ude00"`, `{"a":[1,{"b":null}],"c":true}`,
		`{"a":1,"a":2}`, `NaN`, `[-Infinity]`, `"\ud800"`, "\"\xff\"", `[1,]`, `{"a" 1}`, ` [ 1 , 2 ] `,
		`1e400`, `"\/\b\f\n\r\t"`, "\ufeff{}",
	} {
		f.Add([]byte(s))
	}
	completed, err := os.ReadFile("../../asif/testdata/tool-call-completed.session.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(completed)
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := strictjson.Parse(data)
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		stdErr := dec.Decode(&want)
		if stdErr == nil && len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) != 0 {
			stdErr = errors.New("trailing data")
		}
		if err == nil {
			require.NoErrorf(t, stdErr, "Parse accepted what encoding/json refuses (%v)", stdErr)
			require.Falsef(t, !reflect.DeepEqual(got, want), "trees differ:\n got %#v\nwant %#v", got, want)
			require.False(t, !strictjson.Equal(got, got), "value not EqualJSON to itself")
			return
		}
		var re *strictjson.Error
		require.Falsef(t, !errors.As(err, &re) || re.Offset < 0 || re.Offset > int64(len(data)), "error %v is not an *Error with an in-range offset", err)
		if stdErr == nil {
			switch {
			case errors.Is(err, strictjson.ErrDuplicateKey), errors.Is(err, strictjson.ErrTooDeep),
				errors.Is(err, strictjson.ErrTooManyValues):
			case errors.Is(err, strictjson.ErrInvalidUTF8):
				// encoding/json replaces invalid UTF-8 and lone
				// surrogates with U+FFFD; it cannot have been valid.
				require.Falsef(t, utf8.Valid(data) && !bytes.Contains(data, []byte(`\u`)) && !bytes.Contains(data, []byte(`\U`)), "ErrInvalidUTF8 for valid UTF-8 without escapes")
			default:
				require.FailNow(t, fmt.Sprintf("Parse refused (%v) what encoding/json accepts", err))
			}
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
		a, err := strictjson.Parse([]byte(tc.a))
		require.NoError(t, err)
		b, err := strictjson.Parse([]byte(tc.b))
		require.NoError(t, err)
		if got := strictjson.Equal(a, b); got != tc.eq {
			assert.Fail(t, fmt.Sprintf("EqualJSON(%s, %s) = %v", tc.a, tc.b, got))
		}
	}
}

func TestParseJSONKeepsNumbersExactly(t *testing.T) {
	v, err := strictjson.Parse([]byte(`[9007199254740993, 1.10, -0, 1e400]`))
	require.NoError(t, err)
	want := []any{json.Number("9007199254740993"), json.Number("1.10"), json.Number("-0"), json.Number("1e400")}
	require.Falsef(t, !reflect.DeepEqual(v, want), "got %#v", v)
}
