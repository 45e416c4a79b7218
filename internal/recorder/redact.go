package recorder

import (
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
)

// redactPayload returns p with the value of every map key in keys, at any
// depth, replaced with the string RedactedValue, and whether
// anything was replaced; p itself is never modified. A payload reaching
// the recorder was checked (mpack.CheckObject bounds its depth, so the
// recursion is bounded too); one that does not decode all the same is
// left out whole (nil, true), so that nothing unread is kept unredacted.
func redactPayload(p frame.Payload, keys map[string]struct{}) (frame.Payload, bool) {
	r := mpack.NewReader(p)
	out, changed, err := redactValue(nil, &r, keys)
	if err != nil {
		return nil, true
	}
	if !changed {
		return p, false
	}
	return frame.Payload(out), true
}

// redactValue appends the next value of r to out, redacted.
func redactValue(out []byte, r *mpack.Reader, keys map[string]struct{}) ([]byte, bool, error) {
	rest := *r
	if n, err := r.ReadMapLen(); err == nil {
		out = mpack.AppendMapHeader(out, n)
		changed := false
		for range n {
			krest := *r
			k, err := r.ReadStr()
			if err != nil { // a key that is not a string: copied, never matched
				*r = krest
				raw, err := r.Skip()
				if err != nil {
					return nil, false, err
				}
				out = append(out, raw...)
			} else {
				out = mpack.AppendString(out, string(k))
				if _, ok := keys[string(k)]; ok {
					if _, err := r.Skip(); err != nil {
						return nil, false, err
					}
					out = mpack.AppendString(out, RedactedValue)
					changed = true
					continue
				}
			}
			var c bool
			out, c, err = redactValue(out, r, keys)
			if err != nil {
				return nil, false, err
			}
			changed = changed || c
		}
		return out, changed, nil
	}
	*r = rest
	if n, err := r.ReadArrayLen(); err == nil {
		out = mpack.AppendArrayHeader(out, n)
		changed := false
		for range n {
			var c bool
			out, c, err = redactValue(out, r, keys)
			if err != nil {
				return nil, false, err
			}
			changed = changed || c
		}
		return out, changed, nil
	}
	*r = rest
	raw, err := r.Skip()
	if err != nil {
		return nil, false, err
	}
	return append(out, raw...), false, nil
}
