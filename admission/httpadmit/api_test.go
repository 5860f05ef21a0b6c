package httpadmit_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"sort"
	"strings"
	"testing"
)

// maxExported bounds the package's API: a net/http middleware. What only
// the LLM gateway needs (OpenAI- and Anthropic-style headers, retry
// hints) and the body deadline live in internal/limitheaders and
// internal/bodywatch, which the gateway shares.
const maxExported = 60

// TestExportedNames counts the package's exported names (types,
// functions, methods, constants and variables; not struct fields or
// interface methods), requires a doc comment on each, and keeps the count
// within maxExported. Run with -v to see them.
func TestExportedNames(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	d := doc.New(pkgs["httpadmit"], "github.com/sluicehq/sluice/admission/httpadmit", 0)
	var names []string
	record := func(kind, name, text string) {
		names = append(names, kind+" "+name)
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
	sort.Strings(names)
	t.Logf("httpadmit exports %d names:\n%s", len(names), strings.Join(names, "\n"))
	if len(names) > maxExported {
		t.Errorf("httpadmit exports %d names; want at most %d (helpers the gateway shares belong in internal/limitheaders or internal/bodywatch)", len(names), maxExported)
	}
}
