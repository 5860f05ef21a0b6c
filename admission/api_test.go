package admission_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"
)

// maxExported bounds the consumer API: what a service author meets in
// package admission. The vocabulary of policies lives in admission/limits,
// the store contract in admission/backend.
const maxExported = 93

// TestExportedNames counts the package's exported names (types, functions,
// methods, constants and variables; not struct fields or interface
// methods), requires a doc comment on each, and keeps the count within
// maxExported. Run with -v to see the count by kind.
func TestExportedNames(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	d := doc.New(pkgs["admission"], "github.com/sluicehq/sluice/admission", 0)
	count := map[string]int{}
	record := func(kind, name, text string) {
		count[kind]++
		if strings.TrimSpace(text) == "" {
			t.Errorf("%s %s has no doc comment", kind, name)
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
	total := 0
	for _, n := range count {
		total += n
	}
	t.Logf("admission exports %d names: %d types, %d funcs, %d methods, %d consts, %d vars",
		total, count["type"], count["func"], count["method"], count["const"], count["var"])
	if total > maxExported {
		t.Errorf("admission exports %d names; want at most %d (the vocabulary belongs in admission/limits, the store contract in admission/backend)", total, maxExported)
	}
}
