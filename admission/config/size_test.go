package config_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
)

// bigDirectory writes a policy file with tenants tenants in the shape of
// an admitctl db export, each on the basic plan with one key.
func bigDirectory(tenants int) []byte {
	var b bytes.Buffer
	b.WriteString("policies:\n  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m}\n")
	b.WriteString("identity: {anonymous: deny}\ndefault_plan: basic\nplans:\n  basic:\n    rpm: {limit: 10}\ntenants:\n")
	for i := range tenants {
		h := apikey.Sum(fmt.Sprintf("sk-%d", i))
		fmt.Fprintf(&b, "  t%06d:\n    plan: basic\n    api_keys:\n      - hash: %s\n        id: %s\n", i, h, h.ID())
	}
	return b.Bytes()
}

// TestLoadLargeDirectory loads the export of 100,000 tenants, each with a
// key, as a policy file: every tenant and every key is there, with its
// tenant.
func TestLoadLargeDirectory(t *testing.T) {
	const tenants = 100_000
	path := filepath.Join(t.TempDir(), "export.yaml")
	if err := os.WriteFile(path, bigDirectory(tenants), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(path)
	if err != nil {
		t.Fatalf("Load(%d tenants): %v", tenants, err)
	}
	if got := len(f.Config.Plans.Tenants); got != tenants {
		t.Errorf("tenants = %d; want %d", got, tenants)
	}
	if got := len(f.Identity.Keys); got != tenants {
		t.Errorf("keys = %d; want %d", got, tenants)
	}
	for i := range tenants {
		h := apikey.Sum(fmt.Sprintf("sk-%d", i))
		if k, want := f.Identity.Keys[h], fmt.Sprintf("t%06d", i); k.Tenant != want || k.KeyID != h.ID() {
			t.Fatalf("key of %s = %+v; want tenant %s, id %s", want, k, want, h.ID())
		}
	}
}

// TestRefuseTooLarge: a document above config.MaxNodes, counted with its
// aliases expanded, is refused whole with one error that names the bound,
// and so is an alias that contains itself, which expands without end.
func TestRefuseTooLarge(t *testing.T) {
	var bomb strings.Builder
	bomb.WriteString("policies: [{name: rpm, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m}]\n")
	bomb.WriteString("plans:\n  l0: &l0 {rpm: {limit: 1}}\n")
	// Each level holds ten of the one below: ten million plans' worth.
	for i := 1; i <= 7; i++ {
		fmt.Fprintf(&bomb, "  l%d: &l%d {", i, i)
		for j := range 10 {
			fmt.Fprintf(&bomb, "p%d: *l%d, ", j, i-1)
		}
		bomb.WriteString("}\n")
	}
	for _, tt := range []struct{ name, doc, want string }{
		{"bomb.yaml", bomb.String(), fmt.Sprintf("bomb.yaml:1:1: document too large: more than %d nodes with its aliases expanded (the bound is config.MaxNodes)", config.MaxNodes)},
		{"cycle.yaml", "a: &a [*a, *a]\npolicies: *a\n", "cycle.yaml:1:8: alias *a refers to a node that contains it"},
		{"root.yaml", "&r {policies: [{name: rpm, algorithm: concurrency, limit: 1}], plans: {p: *r}}\n", "root.yaml:1:75: alias *r refers to a node that contains it"},
	} {
		f, err := config.Parse(tt.name, []byte(tt.doc))
		var es config.Errors
		if !errors.As(err, &es) || len(es) != 1 || f != nil {
			t.Errorf("Parse(%s) = %v, %v; want one error", tt.name, f, err)
			continue
		}
		if !strings.HasPrefix(es[0].Error(), tt.want) {
			t.Errorf("Parse(%s) = %q; want %q...", tt.name, es[0], tt.want)
		}
	}
}
