// Package logtest finds the log/slog calls in a package's source, so that
// a package's tests can check that every record about a call carries the
// call's ids (docs/operations.md, "Logs"): each call site's message and
// the attribute keys it passes, read from the source, not from the records
// a test happens to provoke.
package logtest

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Site is one place that logs a record.
type Site struct {
	// Message is the record's message.
	Message string
	// Pos is the call's file:line.
	Pos string
	// Keys are the attribute keys the call passes, each a string literal
	// or a string constant of the package (key-value pairs), or the key
	// of a slog.String, slog.Any, ... attribute.
	Keys []string
}

// Has reports whether the site passes every key of keys.
func (s Site) Has(keys ...string) bool {
	for _, k := range keys {
		if !slices.Contains(s.Keys, k) {
			return false
		}
	}
	return true
}

// levels are the *slog.Logger methods whose first argument is the message.
var levels = map[string]bool{
	"Debug": true, "Info": true, "Warn": true, "Error": true,
}

// Sites returns the log calls of the Go files of dir (test files left out):
// calls of Debug, Info, Warn or Error on an expression named log or logger
// (h.log, s.log, log, r.logger). A message is a string literal, a string
// constant of the package, or a parameter of the function that logs it, in
// which case each call of that function gives a site at the call with the
// argument it passes ("" passes none). Any other message is an error: the
// caller could not check it.
func Sites(dir string) ([]Site, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	consts := stringConsts(files)
	str := func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				s, err := strconv.Unquote(e.Value)
				return s, err == nil
			}
		case *ast.Ident:
			s, ok := consts[e.Name]
			return s, ok
		}
		return "", false
	}
	pos := func(p token.Pos) string {
		at := fset.Position(p)
		return fmt.Sprintf("%s:%d", filepath.Base(at.Filename), at.Line)
	}

	// A message passed in as a parameter: resolved at the function's calls.
	type passed struct {
		fn    string // the function's name
		param int    // the parameter's index (receiver not counted)
		keys  []string
	}
	var sites []Site
	var params []passed
	var errs []error
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || !isLogCall(call) || len(call.Args) == 0 {
					return true
				}
				keys := attrKeys(call.Args[1:], str)
				if msg, ok := str(call.Args[0]); ok {
					sites = append(sites, Site{Message: msg, Pos: pos(call.Pos()), Keys: keys})
					return true
				}
				if id, ok := call.Args[0].(*ast.Ident); ok {
					if i := paramIndex(fd, id.Name); i >= 0 {
						params = append(params, passed{fn: fd.Name.Name, param: i, keys: keys})
						return true
					}
				}
				errs = append(errs, fmt.Errorf("%s: a log message that is neither a constant nor a parameter", pos(call.Pos())))
				return true
			})
		}
	}
	for _, p := range params {
		found := false
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || calleeName(call) != p.fn || p.param >= len(call.Args) {
					return true
				}
				found = true
				msg, ok := str(call.Args[p.param])
				switch {
				case !ok:
					errs = append(errs, fmt.Errorf("%s: the log message passed to %s is not a constant", pos(call.Pos()), p.fn))
				case msg != "":
					sites = append(sites, Site{Message: msg, Pos: pos(call.Pos()), Keys: p.keys})
				}
				return true
			})
		}
		if !found {
			errs = append(errs, fmt.Errorf("%s logs a message it is given, and nothing calls it", p.fn))
		}
	}
	return sites, errors.Join(errs...)
}

// stringConsts returns the package-level constants of files whose value
// is a string literal.
func stringConsts(files []*ast.File) map[string]string {
	consts := map[string]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if v, err := strconv.Unquote(lit.Value); err == nil {
							consts[name.Name] = v
						}
					}
				}
			}
		}
	}
	return consts
}

// isLogCall reports whether call is X.Debug/Info/Warn/Error(...) with X an
// expression whose last name is log or logger.
func isLogCall(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || !levels[sel.Sel.Name] {
		return false
	}
	var name string
	switch x := sel.X.(type) {
	case *ast.Ident:
		name = x.Name
	case *ast.SelectorExpr:
		name = x.Sel.Name
	}
	return name == "log" || name == "logger"
}

// attrKeys returns the keys of a log call's arguments after the message:
// a constant string is a key whose value follows; a call of slog.X gives
// its first argument's key; anything else is taken for a slog.Attr.
func attrKeys(args []ast.Expr, str func(ast.Expr) (string, bool)) []string {
	var keys []string
	for i := 0; i < len(args); i++ {
		if k, ok := str(args[i]); ok {
			keys = append(keys, k)
			i++ // its value
			continue
		}
		if call, ok := args[i].(*ast.CallExpr); ok && len(call.Args) > 0 {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "slog" {
					if k, ok := str(call.Args[0]); ok {
						keys = append(keys, k)
					}
				}
			}
		}
	}
	return keys
}

// paramIndex returns the index of fd's parameter named name, or -1.
func paramIndex(fd *ast.FuncDecl, name string) int {
	i := 0
	for _, field := range fd.Type.Params.List {
		if len(field.Names) == 0 {
			i++
			continue
		}
		for _, n := range field.Names {
			if n.Name == name {
				return i
			}
			i++
		}
	}
	return -1
}

// calleeName is the name of the function or method call calls.
func calleeName(call *ast.CallExpr) string {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}
