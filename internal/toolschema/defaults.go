package toolschema

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
)

// argDefaults is what filling in a tool's argument defaults needs, worked
// out once per tool when its catalogue is built: most calls then pass
// their arguments on untouched, or get the missing top-level defaults
// spliced in without decoding anything.
type argDefaults struct {
	schema  map[string]any // the arguments schema; nil: no schema
	general bool           // defaults inside nested objects: withDefaults decodes every call
	top     []topDefault   // the top-level properties with a default, sorted by name; at most 64
}

// topDefault is one top-level property with a default.
type topDefault struct {
	name string
	key  []byte // name
	kv   []byte // the name and the default, encoded as a map entry
}

func newArgDefaults(schema map[string]any) *argDefaults {
	d := &argDefaults{schema: schema}
	if schema == nil {
		return d
	}
	props, _ := schema["properties"].(map[string]any)
	for name, ps := range props {
		sub, ok := ps.(map[string]any)
		if !ok {
			continue
		}
		if def, ok := sub["default"]; ok {
			p, err := frame.PayloadOf(map[string]any{name: def})
			if err != nil || len(p) < 2 {
				d.general = true // withDefaults reports it on every call
				continue
			}
			d.top = append(d.top, topDefault{name: name, key: []byte(name), kv: p[1:]}) // past the one-entry map header
		}
		if nestedDefaults(sub, 1) {
			d.general = true
		}
	}
	if len(d.top) > 64 {
		d.general = true
	}
	slices.SortFunc(d.top, func(a, b topDefault) int { return cmp.Compare(a.name, b.name) })
	return d
}

// nestedDefaults reports whether fillDefaults could fill anything inside
// an object described by schema.
func nestedDefaults(schema map[string]any, depth int) bool {
	if depth > maxDefaultDepth {
		return false
	}
	props, _ := schema["properties"].(map[string]any)
	for _, ps := range props {
		sub, ok := ps.(map[string]any)
		if !ok {
			continue
		}
		if _, ok := sub["default"]; ok || nestedDefaults(sub, depth+1) {
			return true
		}
	}
	return false
}

// apply returns args with the missing defaults filled in, as withDefaults
// does: args itself when nothing is missing; otherwise a payload with
// args' entries as they were encoded and the defaults added, keys sorted.
func (d *argDefaults) apply(args frame.Payload) (frame.Payload, error) {
	if d.schema == nil {
		return args, nil
	}
	if d.general {
		return withDefaults(d.schema, args)
	}
	if len(d.top) == 0 && args != nil {
		return args, nil
	}
	src := []byte(args)
	if src == nil {
		src = emptyObject
	}
	r := mpack.NewReader(src)
	n, err := r.ReadMapLen()
	if err != nil {
		return withDefaults(d.schema, args) // and its error
	}
	var present uint64
	for range n {
		k, err := r.ReadStr()
		if err != nil {
			return withDefaults(d.schema, args)
		}
		if i := d.find(k); i >= 0 {
			present |= 1 << i
		}
		if _, err := r.Skip(); err != nil {
			return withDefaults(d.schema, args)
		}
	}
	all := uint64(1)<<len(d.top) - 1
	if len(d.top) == 64 {
		all = ^uint64(0)
	}
	if present == all && args != nil {
		return args, nil
	}
	// Splice: every entry of args as it is, plus the missing defaults,
	// sorted by key as frame.PayloadOf sorts them.
	type entry struct{ key, kv []byte }
	entries := make([]entry, 0, n+len(d.top))
	size := len(src)
	r = mpack.NewReader(src)
	r.ReadMapLen()
	for range n {
		start := r.Offset()
		k, _ := r.ReadStr()
		r.Skip()
		entries = append(entries, entry{key: k, kv: src[start:r.Offset()]})
	}
	for i, td := range d.top {
		if present&(1<<i) == 0 {
			entries = append(entries, entry{key: td.key, kv: td.kv})
			size += len(td.kv)
		}
	}
	slices.SortStableFunc(entries, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
	out := mpack.AppendMapHeader(make([]byte, 0, size+5), len(entries))
	for _, e := range entries {
		out = append(out, e.kv...)
	}
	return frame.Payload(out), nil
}

// find returns the index of the top-level default named k, or -1.
func (d *argDefaults) find(k []byte) int {
	for i := range d.top {
		if d.top[i].name == string(k) {
			return i
		}
	}
	return -1
}
