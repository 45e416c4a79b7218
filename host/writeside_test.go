package host_test

import (
	"bytes"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/testnet"
)

const module = "github.com/skulkrt/skulk"

// publicPackages lists the module's public packages: every package of
// the module but commands and those under an internal directory, as the
// go command lists them, so that a package added later is checked too.
func publicPackages(t *testing.T) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the module's packages with")
	}
	cmd := exec.Command(gobin, "list", "-f", "{{.ImportPath}}\t{{.Name}}", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		require.FailNow(t, fmt.Sprintf("go list: %v\n%s", err, stderr.Bytes()))
	}
	var pkgs []string
	for line := range strings.Lines(string(out)) {
		path, name, _ := strings.Cut(strings.TrimSpace(line), "\t")
		if name == "main" || slices.Contains(strings.Split(path, "/"), "internal") {
			continue
		}
		pkgs = append(pkgs, path)
	}
	// The listing itself is checked: a filter that dropped packages would
	// make the test pass by checking nothing.
	for _, want := range []string{"calllog", "calllog/jetstreamstore", "host", "hostmetrics", "skulktest", "frame"} {
		require.Truef(t, slices.Contains(pkgs, module+"/"+want), "go list of the module's public packages lacks %s: %q", want, pkgs)
	}
	return pkgs
}

// isLogPackage reports whether path is one through which code outside the
// module meets the call log: calllog, the packages under it (its stores,
// calllogtest) and host. Other public packages' method names are their
// own (skulktest.StreamConn.Request writes a wire packet, not an event), but
// no type they reach may be the write side's.
func isLogPackage(path string) bool {
	return path == module+"/host" || path == module+"/calllog" || strings.HasPrefix(path, module+"/calllog/")
}

// writeSide is the package that appends events to a host's log; no type of
// it may be reachable from a public package.
const writeSide = module + "/internal/recorder"

// writeNames are the names of the call log's write operations (the
// recorder's: Begin, Request, Input, Output, ...). No exported function or
// method of a public log package may carry one, so that none is re-exported
// under its old name. EventStore.Keep is not one: it is the contract a
// store implements, called by the host's journal writer with the claim
// only it holds (another writer's Keep is fenced, ErrFenced), and
// calllog.TakeOver writes only to a store its caller gives it.
var writeNames = map[string]bool{
	"Begin": true, "Request": true, "Input": true, "Output": true, "OutputAt": true,
	"Finish": true, "Retry": true, "Arguments": true, "End": true, "Confirm": true,
	"Record": true, "Recorder": true, "Running": true, "Emit": true, "Append": true,
}

// loadTypes type-checks pkgs from the export data the go command builds.
func loadTypes(t *testing.T, pkgs ...string) map[string]*types.Package {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build export data with")
	}
	// The export data of the packages this test binary's own compile (and
	// the other packages' tests) already built, with -race when this binary
	// has it: the types are the same.
	exports, err := testnet.ExportData(pkgs)
	require.NoError(t, err)
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	loaded := map[string]*types.Package{}
	for _, p := range pkgs {
		tp, err := imp.Import(p)
		require.NoErrorf(t, err, "import %s", p)
		loaded[p] = tp
	}
	return loaded
}

// apiWalker visits every type reachable from a package's exported names:
// the types of exported fields, the signatures of exported functions and
// methods, through pointers, slices, maps, channels and the named types of
// the module.
type apiWalker struct {
	seen     map[types.Type]bool
	problems map[string]bool
}

func (w *apiWalker) typ(t types.Type, via string) {
	t = types.Unalias(t)
	if w.seen[t] {
		return
	}
	w.seen[t] = true
	switch t := t.(type) {
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() == nil {
			return
		}
		path := obj.Pkg().Path()
		if path == writeSide || strings.HasPrefix(path, writeSide+"/") {
			w.problems[via+" reaches the write side: "+path+"."+obj.Name()] = true
			return
		}
		if path != module && !strings.HasPrefix(path, module+"/") {
			return // the standard library and other modules
		}
		ms := types.NewMethodSet(types.NewPointer(t)) // T's and *T's methods
		if types.IsInterface(t) {
			ms = types.NewMethodSet(t)
		}
		w.methods(ms, path+"."+obj.Name(), isLogPackage(path))
		w.typ(t.Underlying(), path+"."+obj.Name())
	case *types.Pointer:
		w.typ(t.Elem(), via)
	case *types.Slice:
		w.typ(t.Elem(), via)
	case *types.Array:
		w.typ(t.Elem(), via)
	case *types.Map:
		w.typ(t.Key(), via)
		w.typ(t.Elem(), via)
	case *types.Chan:
		w.typ(t.Elem(), via)
	case *types.Signature:
		for v := range t.Params().Variables() {
			w.typ(v.Type(), via)
		}
		for v := range t.Results().Variables() {
			w.typ(v.Type(), via)
		}
	case *types.Struct:
		for f := range t.Fields() {
			if f.Exported() {
				w.typ(f.Type(), via+"."+f.Name())
			}
		}
	case *types.Interface:
		w.methods(types.NewMethodSet(t), via, false)
	}
}

// methods walks the exported methods of a method set; in a public log
// package, their names must not be write operations.
func (w *apiWalker) methods(ms *types.MethodSet, via string, public bool) {
	for sel := range ms.Methods() {
		m := sel.Obj()
		if !m.Exported() {
			continue
		}
		if public && writeNames[m.Name()] {
			w.problems[via+"."+m.Name()+" is a write operation"] = true
		}
		w.typ(m.Type(), via+"."+m.Name())
	}
}

// TestNoPublicWriteSide fails if code outside the module could append an
// event to a host's call log: if any exported name of a public package
// (every package of the module outside internal/ and cmd/, as go list
// gives them) reaches a type of internal/recorder (a Recorder, a Record),
// or if one of calllog's, the packages' under it or host's functions or
// methods is named as one of its write operations. The readers stay:
// events, observers, journals, stores, followers, replay.
func TestNoPublicWriteSide(t *testing.T) {
	all := publicPackages(t)
	pkgs := loadTypes(t, all...)
	w := &apiWalker{seen: map[types.Type]bool{}, problems: map[string]bool{}}
	for _, path := range all {
		scope := pkgs[path].Scope()
		for _, name := range scope.Names() {
			obj := scope.Lookup(name)
			if !obj.Exported() {
				continue
			}
			if _, ok := obj.(*types.Func); ok && writeNames[name] && isLogPackage(path) {
				w.problems[path+"."+name+" is a write operation"] = true
			}
			w.typ(obj.Type(), path+"."+name)
		}
	}
	var problems []string
	for p := range w.problems {
		problems = append(problems, p)
	}
	sort.Strings(problems)
	for _, p := range problems {
		assert.Fail(t, fmt.Sprint(p))
	}
}
