// Package apinames counts a package's exported names for the tests that
// keep a package's vocabulary small (admission, httpadmit, shadow), and
// checks each has a doc comment. Its own test,
// TestCollaboratorsAreOptions, keeps every Config of the module free of
// optional collaborators (see docs/concepts.md#constructors).
package apinames

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"
)

// ExportedNames counts the exported names of the package in dir (types,
// functions, methods, constants and variables; not struct fields or
// interface methods), test files left out, by kind, and reports every
// name without a doc comment as an error of t.
func ExportedNames(t *testing.T, dir string) map[string]int {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 {
		t.Fatalf("%s holds %d packages; want 1", dir, len(pkgs))
	}
	count := map[string]int{}
	for name, pkg := range pkgs {
		d := doc.New(pkg, name, 0)
		record := func(kind, name, text string) {
			count[kind]++
			if strings.TrimSpace(text) == "" {
				t.Errorf("%s: %s %s has no doc comment", dir, kind, name)
			}
		}
		values := func(kind string, vs []*doc.Value) {
			for _, v := range vs {
				for _, s := range v.Decl.Specs {
					vs := s.(*ast.ValueSpec)
					for _, id := range vs.Names {
						if id.IsExported() {
							text := v.Doc
							if vs.Doc != nil {
								text += vs.Doc.Text()
							}
							if vs.Comment != nil {
								text += vs.Comment.Text()
							}
							record(kind, id.Name, text)
						}
					}
				}
			}
		}
		values("const", d.Consts)
		values("var", d.Vars)
		for _, f := range d.Funcs {
			record("func", f.Name, f.Doc)
		}
		for _, typ := range d.Types {
			record("type", typ.Name, typ.Doc)
			values("const", typ.Consts)
			values("var", typ.Vars)
			for _, f := range typ.Funcs {
				record("func", f.Name, f.Doc)
			}
			for _, m := range typ.Methods {
				record("method", typ.Name+"."+m.Name, m.Doc)
			}
		}
	}
	return count
}
