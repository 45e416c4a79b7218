// Command apicount counts the exported identifiers of each public package of
// the module: top-level functions, types, variables and constants, methods
// of exported types, and the exported fields and interface methods of
// exported types. Test files and packages under internal/ are not counted.
//
//	go run ./internal/apicount        # from the module root
//	go run ./internal/apicount -v     # lists every name
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "list every exported name")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	counts := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "internal" || name == "testdata" || strings.HasPrefix(name, ".") ||
				fileExists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		dir := filepath.Dir(path)
		counts[dir] = append(counts[dir], exported(f)...)
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(1)
	}
	dirs := make([]string, 0, len(counts))
	for d := range counts {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	total := 0
	for _, d := range dirs {
		names := counts[d]
		total += len(names)
		fmt.Printf("%5d  %s\n", len(names), d)
		if *verbose {
			sort.Strings(names)
			for _, n := range names {
				fmt.Printf("         %s\n", n)
			}
		}
	}
	fmt.Printf("%5d  total\n", total)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// exported lists the exported names a file declares.
func exported(f *ast.File) []string {
	var out []string
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				out = append(out, d.Name.Name)
				continue
			}
			if recv := recvName(d.Recv.List[0].Type); ast.IsExported(recv) {
				out = append(out, recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							out = append(out, n.Name)
						}
					}
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					out = append(out, s.Name.Name)
					out = append(out, members(s.Name.Name, s.Type)...)
				}
			}
		}
	}
	return out
}

// members lists the exported fields of a struct type or methods of an
// interface type.
func members(typeName string, t ast.Expr) []string {
	var list *ast.FieldList
	switch tt := t.(type) {
	case *ast.StructType:
		list = tt.Fields
	case *ast.InterfaceType:
		list = tt.Methods
	default:
		return nil
	}
	var out []string
	for _, field := range list.List {
		for _, n := range field.Names {
			if n.IsExported() {
				out = append(out, typeName+"."+n.Name)
			}
		}
		if len(field.Names) == 0 { // embedded
			if n := recvName(field.Type); ast.IsExported(n) {
				out = append(out, typeName+"."+n)
			}
		}
	}
	return out
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.Ident:
		return t.Name
	}
	return ""
}
