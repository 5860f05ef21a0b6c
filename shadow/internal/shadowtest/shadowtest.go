// Package shadowtest holds what the tests of package shadow and its
// sub-packages share: golden files, the tenant key, a controller observer
// counting decisions the way a replay does (to compare a replay or a
// status page with the live traffic they describe), and the count of a
// package's exported names.
package shadowtest

import (
	"bytes"
	"flag"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Golden compares got with testdata/name, or rewrites it with -update.
func Golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs; got:\n%s\nwant:\n%s", name, got, want)
	}
}

// TenantKey partitions a policy by tenant.
func TenantKey() []limits.KeyPart { return []limits.KeyPart{limits.KeyTenant} }

// LiveCounts counts a controller's decisions per policy as the replay
// does: admitted (not rolled back), rejected (a timeout too) and would
// reject. Read its maps once the traffic is over.
type LiveCounts struct {
	admission.NopObserver
	mu                              sync.Mutex
	Admitted, Rejected, WouldReject map[string]int64
}

// NewLiveCounts returns an empty LiveCounts.
func NewLiveCounts() *LiveCounts {
	return &LiveCounts{Admitted: map[string]int64{}, Rejected: map[string]int64{}, WouldReject: map[string]int64{}}
}

// Decision counts d.
func (c *LiveCounts) Decision(d *admission.Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch d.Outcome {
	case admission.Admitted:
		if !d.RolledBack {
			c.Admitted[d.Policy]++
		}
	case admission.Rejected, admission.Timeout:
		c.Rejected[d.Policy]++
	case admission.WouldReject:
		c.WouldReject[d.Policy]++
	}
}

// T0 is the instant the tests' traffic starts.
var T0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

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
