// Command exports counts the exported identifiers of Go packages, as a
// user of each package meets them: package-level constants, variables,
// functions and types, the exported methods of those types, and the
// exported fields of exported struct types. Test files are not counted.
//
//	go run ./internal/testtools/exports ./cloudtasks ./timers ./naming ./outbox
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: exports DIR...")
		os.Exit(2)
	}
	total := 0
	for _, dir := range os.Args[1:] {
		n, err := count(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "exports:", err)
			os.Exit(1)
		}
		fmt.Printf("%-28s %4d\n", dir, n)
		total += n
	}
	fmt.Printf("%-28s %4d\n", "total", total)
}

// count returns the number of exported identifiers of the package in dir.
func count(dir string) (int, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return 0, err
	}
	sort.Strings(files)
	n := 0
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return 0, err
		}
		if strings.HasSuffix(f.Name.Name, "_test") || f.Name.Name == "main" {
			continue
		}
		n += countFile(f)
	}
	return n, nil
}

func countFile(f *ast.File) int {
	n := 0
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil || exportedRecv(d.Recv) {
				n++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if name.IsExported() {
							n++
						}
					}
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					n++
					if st, ok := s.Type.(*ast.StructType); ok {
						for _, field := range st.Fields.List {
							for _, name := range field.Names {
								if name.IsExported() {
									n++
								}
							}
						}
					}
					if it, ok := s.Type.(*ast.InterfaceType); ok {
						for _, m := range it.Methods.List {
							for _, name := range m.Names {
								if name.IsExported() {
									n++
								}
							}
						}
					}
				}
			}
		}
	}
	return n
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(recv *ast.FieldList) bool {
	t := recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if idx, ok := t.(*ast.IndexExpr); ok {
		t = idx.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}
