package readme

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/testnet"
)

// fragmentKind says how a fragment sits in the file it is checked in.
type fragmentKind int

const (
	statements   fragmentKind = iota // the body of a function
	declarations                     // top-level declarations (functions)
	expression                       // the value of a package-level variable
)

// scaffold is what the prose around a doc's Go fragment takes as given:
// the names the fragment uses without declaring them, as Go declarations,
// and what its "..." lines stand for.
type scaffold struct {
	kind    fragmentKind
	imports []string // import paths the fragment and givens use
	givens  string   // top-level declarations
	dots    string   // what replaces a line that is only "..."
}

// scaffolds has one entry per Go fragment of docs/*.md that is not a
// whole program, keyed "FILE#N" (N counts the file's Go blocks from 0). A
// fragment added to the docs needs an entry here, so that it compiles.
var scaffolds = map[string]scaffold{
	"docs/mcp.md#0": {kind: statements, imports: []string{"context", "github.com/skulkrt/skulk/host"},
		givens: "var ctx context.Context"},
	"docs/operations.md#0": {kind: statements, imports: []string{"context", "net/http",
		"github.com/prometheus/client_golang/prometheus", "github.com/prometheus/client_golang/prometheus/promhttp",
		"github.com/skulkrt/skulk/host", "github.com/skulkrt/skulk/hostmetrics"},
		givens: "var ctx context.Context\nvar cfg host.Config"},
	"docs/operations.md#1": {kind: statements, imports: []string{"context", "github.com/nats-io/nats.go",
		"github.com/skulkrt/skulk/calllog", "github.com/skulkrt/skulk/calllog/jetstreamstore",
		"github.com/skulkrt/skulk/host", "github.com/skulkrt/skulk/remote"},
		givens: "var ctx context.Context\nvar nc *nats.Conn"},
	"docs/provider.md#1": {kind: expression, imports: []string{"context", "github.com/skulkrt/skulk/child", "github.com/skulkrt/skulk/frame"},
		givens: "func thumbnail(ctx context.Context, s *child.Stream) (frame.Payload, error) { return nil, nil }"},
	"docs/provider.md#2": {kind: statements, imports: []string{"os", "github.com/skulkrt/skulk/child"},
		givens: "var tools []child.Tool\nfunc watchPlugins(chan<- []child.Tool) {}"},
	"docs/provider.md#3": {kind: expression, imports: []string{"context", "github.com/skulkrt/skulk/child", "github.com/skulkrt/skulk/frame"},
		dots: "_, _ = f, err"},
	"docs/testing.md#0": {kind: declarations, imports: []string{"testing", "github.com/skulkrt/skulk/skulktest"}},
	"docs/testing.md#1": {kind: declarations, imports: []string{"testing", "github.com/skulkrt/skulk/child",
		"github.com/skulkrt/skulk/frame", "github.com/skulkrt/skulk/host", "github.com/skulkrt/skulk/skulktest"},
		givens: "var opts child.Options"},
	"docs/testing.md#2": {kind: statements, imports: []string{"testing", "time", "github.com/skulkrt/skulk/child",
		"github.com/skulkrt/skulk/frame", "github.com/skulkrt/skulk/skulktest"},
		givens: "var t *testing.T\nvar opts child.Options", dots: "_ = err"},
	"docs/testing.md#3": {kind: declarations, imports: []string{"testing", "github.com/skulkrt/skulk/skulktest"},
		dots: "_ = err"},
}

// notChecked are fragments left out, each with why.
var notChecked = map[string]string{
	"docs/testing.md#4": "calls the conformance module, which the main module does not require (examples/wordcount's TestConformance makes the same call, and .ci/run builds it)",
}

// wholeProgram matches a block that is a program of its own.
var wholeProgram = regexp.MustCompile(`^package `)

// dotsLine matches a line that is only "...".
var dotsLine = regexp.MustCompile(`(?m)^[ \t]*\.\.\.[ \t]*$`)

// TestDocFragmentsCompile type-checks every Go block of docs/*.md against
// the packages as they are: a whole program as it is, any other fragment
// in its scaffold, so that one that names a method, field or function
// that does not exist, or calls one with the wrong arguments, fails here.
// Names left unused (a fragment often declares what the prose goes on to
// use) are not errors here.
func TestDocFragmentsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the packages' export data")
	}
	docs, err := os.ReadDir("../../docs")
	require.NoError(t, err)
	type fragment struct {
		key, src string
		sc       scaffold
	}
	var frags []fragment
	seen := map[string]bool{}
	for _, d := range docs {
		if !strings.HasSuffix(d.Name(), ".md") {
			continue
		}
		b, err := os.ReadFile("../../docs/" + d.Name())
		require.NoError(t, err)
		for i, m := range goBlock.FindAllSubmatch(b, -1) {
			key := fmt.Sprintf("docs/%s#%d", d.Name(), i)
			seen[key] = true
			src := string(m[1])
			if notChecked[key] != "" {
				continue
			}
			if wholeProgram.MatchString(src) {
				f, err := parser.ParseFile(token.NewFileSet(), key, src, parser.ImportsOnly)
				if !assert.NoErrorf(t, err, "%s: a program that does not parse", key) {
					continue
				}
				var sc scaffold
				for _, is := range f.Imports {
					sc.imports = append(sc.imports, strings.Trim(is.Path.Value, `"`))
				}
				frags = append(frags, fragment{key, src, sc})
				continue
			}
			sc, ok := scaffolds[key]
			if !assert.Truef(t, ok, "%s: a Go fragment with no scaffold in fragments_test.go: add one, so that it is compiled", key) {
				continue
			}
			frags = append(frags, fragment{key, src, sc})
		}
	}
	for key := range scaffolds {
		assert.Truef(t, seen[key], "%s: a scaffold for a fragment that is not there", key)
	}
	var paths []string
	for _, f := range frags {
		paths = append(paths, f.sc.imports...)
	}
	imp := exportImporter(t, paths)
	for _, f := range frags {
		t.Run(f.key, func(t *testing.T) {
			src := f.src
			if !wholeProgram.MatchString(src) {
				src = scaffolded(f.src, f.sc)
			}
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, "fragment.go", src, 0)
			require.NoErrorf(t, err, "the fragment does not parse, in:\n%s", src)
			var errs []string
			conf := types.Config{Importer: imp, Error: func(err error) {
				msg := err.(types.Error).Msg
				if strings.Contains(msg, " and not used") { // declared, or imported (as a name)
					return
				}
				errs = append(errs, err.Error())
			}}
			conf.Check("fragment", fset, []*ast.File{file}, nil)
			assert.Emptyf(t, errs, "the fragment does not compile, in:\n%s", src)
		})
	}
}

// scaffolded returns the file that checks src in sc.
func scaffolded(src string, sc scaffold) string {
	src = dotsLine.ReplaceAllString(src, sc.dots)
	var b strings.Builder
	b.WriteString("package fragment\n\nimport (\n")
	for _, p := range sc.imports {
		fmt.Fprintf(&b, "\t%q\n", p)
	}
	b.WriteString(")\n\n" + sc.givens + "\n\n")
	switch sc.kind {
	case statements:
		b.WriteString("func _() {\n" + src + "\n}\n")
	case declarations:
		b.WriteString(src)
	case expression:
		b.WriteString("var _ = " + src)
	}
	return b.String()
}

// exportImporter returns an importer of paths and what they import, from
// their export data (testnet.ExportData).
func exportImporter(t *testing.T, paths []string) types.Importer {
	t.Helper()
	sort.Strings(paths)
	files, err := testnet.ExportData(slices.Compact(paths))
	require.NoError(t, err)
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
}
