package apinames

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the import path of the module's root directory, ../.. from
// here.
const module = "github.com/sluicehq/sluice"

// collaborators are the types of optional collaborators, by import path
// and name: a constructor takes them as options (WithLogger, WithClock,
// WithMeterProvider, WithTracerProvider, WithTransport, WithQueryTracer;
// see docs/concepts.md#constructors), never as a field of its Config or
// Options.
var collaborators = []string{
	"*log/slog.Logger",
	"log/slog.Handler",
	"go.opentelemetry.io/otel/metric.Meter",
	"go.opentelemetry.io/otel/metric.MeterProvider",
	"go.opentelemetry.io/otel/trace.Tracer",
	"go.opentelemetry.io/otel/trace.TracerProvider",
	module + "/admission.Clock",
	"net/http.RoundTripper",
	"github.com/jackc/pgx/v5.QueryTracer",
	"func() time.Time",
	module + "/admission/backend.Store",
	"*" + module + "/shadow.Recorder",
}

// exceptions are the struct types, "package path.Type", meant to be used
// as literals with no constructor, as the rule of docs/concepts.md
// names them. httpretry.Transport (modelled on http.Transport) is not
// named Config or Options; echoadmit.Config follows echo's middleware
// convention and holds no collaborator.
var exceptions = map[string]bool{}

// packageNames are the names of the packages collaborators come from
// whose import path does not end with their name.
var packageNames = map[string]string{
	"github.com/jackc/pgx/v5": "pgx",
}

// TestCollaboratorsAreOptions walks every package of the module outside
// internal directories and fails for each exported struct type named
// *Config or *Options (or a struct type of its package one of their
// fields holds) with a field of a collaborator type: optional
// collaborators are functional options, one name per kind across the
// module.
func TestCollaboratorsAreOptions(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var offenders []string
	packages := 0
	err = filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if dir != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "internal") {
			return filepath.SkipDir
		}
		if dir != root {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			return err
		}
		importPath := path.Join(module, filepath.ToSlash(rel))
		found, err := structCollaborators(dir, importPath)
		if err != nil {
			return err
		}
		if found != nil {
			packages++
		}
		offenders = append(offenders, found...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if packages < 30 {
		t.Fatalf("walked %d packages under %s; want the module's (30 or more)", packages, root)
	}
	for _, o := range offenders {
		t.Errorf("%s: a collaborator in a Config; make it an option (see docs/concepts.md#constructors)", o)
	}
}

// structCollaborators returns "package.Type.Field (type)" for every field
// of a collaborator type of the exported *Config and *Options struct types
// of the package in dir (test files left out), and of the struct types of
// the package their fields hold (upstream.Config.Limits); not nil (but
// empty) when dir holds a package at all.
func structCollaborators(dir, importPath string) ([]string, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.SkipObjectResolution)
	if err != nil || len(pkgs) == 0 {
		return nil, err
	}
	type structType struct {
		st      *ast.StructType
		imports map[string]string
	}
	found := []string{}
	for _, pkg := range pkgs {
		structs := map[string]structType{}
		var queue []string
		for _, f := range pkg.Files {
			imports := fileImports(f)
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, spec := range gd.Specs {
					ts := spec.(*ast.TypeSpec)
					if st, ok := ts.Type.(*ast.StructType); ok {
						structs[ts.Name.Name] = structType{st, imports}
						name := ts.Name.Name
						if ast.IsExported(name) && (strings.HasSuffix(name, "Config") || strings.HasSuffix(name, "Options")) && !exceptions[importPath+"."+name] {
							queue = append(queue, name)
						}
					}
				}
			}
		}
		seen := map[string]bool{}
		for len(queue) > 0 {
			name := queue[0]
			queue = queue[1:]
			if seen[name] {
				continue
			}
			seen[name] = true
			s := structs[name]
			for _, field := range s.st.Fields.List {
				typ := typeString(field.Type, s.imports, importPath)
				if inner, ok := strings.CutPrefix(strings.TrimPrefix(typ, "*"), importPath+"."); ok {
					if _, ok := structs[inner]; ok && !exceptions[importPath+"."+inner] {
						queue = append(queue, inner)
					}
				}
				if !slices.Contains(collaborators, typ) {
					continue
				}
				fieldName := typ // embedded
				if len(field.Names) > 0 {
					fieldName = field.Names[0].Name
				}
				found = append(found, pkg.Name+"."+name+"."+fieldName+" ("+typ+")")
			}
		}
	}
	return found, nil
}

// fileImports maps the names a file refers to its imports by to their
// paths.
func fileImports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			continue
		}
		name := packageNames[p]
		if name == "" {
			name = path.Base(p)
		}
		if imp.Name != nil {
			name = imp.Name.Name
		}
		m[name] = p
	}
	return m
}

// typeString writes the type expression e with its package qualifiers as
// import paths ("*log/slog.Logger"), an unqualified name as one of the
// package at self; a type it does not spell returns "".
func typeString(e ast.Expr, imports map[string]string, self string) string {
	switch e := e.(type) {
	case *ast.Ident:
		return self + "." + e.Name
	case *ast.StarExpr:
		if s := typeString(e.X, imports, self); s != "" {
			return "*" + s
		}
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && imports[x.Name] != "" {
			return imports[x.Name] + "." + e.Sel.Name
		}
	case *ast.FuncType:
		if e.TypeParams == nil && (e.Params == nil || len(e.Params.List) == 0) && e.Results != nil && len(e.Results.List) == 1 && len(e.Results.List[0].Names) <= 1 {
			if typeString(e.Results.List[0].Type, imports, self) == "time.Time" {
				return "func() time.Time"
			}
		}
	}
	return ""
}
