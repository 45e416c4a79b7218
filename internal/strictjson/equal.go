package strictjson

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Equal reports whether two values decoded by Parse are equal as
// JSON: objects by their key sets and members (key order is irrelevant),
// arrays element by element, strings by their code points, and numbers by
// their exact decimal value (1, 1.0 and 10e-1 are equal; nothing is rounded
// through float64). Values of other Go types are never equal.
func Equal(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case json.Number:
		y, ok := b.(json.Number)
		return ok && equalNumber(string(x), string(y))
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !Equal(xv, yv) {
				return false
			}
		}
		return true
	default:
		return false
	}
}

// decimal is a JSON number reduced to sign, significant digits without
// leading or trailing zeros, and the exponent of the last digit.
type decimal struct {
	neg    bool
	digits string
	exp    int64
}

func equalNumber(a, b string) bool {
	if a == b {
		return true
	}
	x, okx := parseDecimal(a)
	y, oky := parseDecimal(b)
	if !okx || !oky {
		// Exponent beyond int64: only the identical text (handled above)
		// is known to be equal.
		return false
	}
	return x == y
}

// parseDecimal normalises text that already matched the JSON number
// grammar. It reports false when the exponent does not fit in an int64.
func parseDecimal(s string) (decimal, bool) {
	var d decimal
	if strings.HasPrefix(s, "-") {
		d.neg = true
		s = s[1:]
	}
	mant, expText, hasExp := strings.Cut(strings.ReplaceAll(s, "E", "e"), "e")
	var exp int64
	if hasExp {
		v, err := strconv.ParseInt(strings.TrimPrefix(expText, "+"), 10, 64)
		if err != nil {
			return d, false
		}
		exp = v
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	if exp < -(1<<62) || exp > 1<<62 {
		return d, false
	}
	exp -= int64(len(frac))
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return decimal{}, true // zero, whatever its sign or exponent
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	d.digits = trimmed
	d.exp = exp
	return d, true
}
