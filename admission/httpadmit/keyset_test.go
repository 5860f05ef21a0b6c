package httpadmit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
)

// TestKeySet adds, replaces and revokes keys one at a time: each change
// makes a new set, the set it was made from unchanged (a request reading
// it keeps the keys of its snapshot), and a deleted key is gone from the
// new set.
func TestKeySet(t *testing.T) {
	var zero httpadmit.KeySet
	if _, ok := zero.Lookup("sk-a"); ok || zero.Len() != 0 {
		t.Fatal("the zero KeySet is not empty")
	}
	s := httpadmit.NewKeySet(httpadmit.KeyTable{apikey.Sum("sk-a"): {Tenant: "a"}, apikey.Sum("sk-b"): {Tenant: "b"}})
	first := s
	steps := []struct {
		change func(*httpadmit.KeySet) *httpadmit.KeySet
		key    string
		tenant string
		ok     bool
		n      int
	}{
		{nil, "sk-a", "a", true, 2},
		{func(s *httpadmit.KeySet) *httpadmit.KeySet {
			return s.With(apikey.Sum("sk-c"), httpadmit.Identity{Tenant: "c"})
		}, "sk-c", "c", true, 3},
		{func(s *httpadmit.KeySet) *httpadmit.KeySet {
			return s.With(apikey.Sum("sk-a"), httpadmit.Identity{Tenant: "a2"})
		}, "sk-a", "a2", true, 3},
		{func(s *httpadmit.KeySet) *httpadmit.KeySet { return s.Without(apikey.Sum("sk-b")) }, "sk-b", "", false, 2},
		{func(s *httpadmit.KeySet) *httpadmit.KeySet { return s.Without(apikey.Sum("sk-b")) }, "sk-c", "c", true, 2},
		{func(s *httpadmit.KeySet) *httpadmit.KeySet {
			return zero.With(apikey.Sum("sk-d"), httpadmit.Identity{Tenant: "d"})
		}, "sk-d", "d", true, 1},
	}
	for i, st := range steps {
		if st.change != nil {
			s = st.change(s)
		}
		id, ok := s.Lookup(st.key)
		if id.Tenant != st.tenant || ok != st.ok || s.Len() != st.n {
			t.Errorf("step %d: Lookup(%s) = %q, %v, Len %d; want %q, %v, %d", i, st.key, id.Tenant, ok, s.Len(), st.tenant, st.ok, st.n)
		}
	}
	for key, tenant := range map[string]string{"sk-a": "a", "sk-b": "b"} {
		if id, ok := first.Lookup(key); !ok || id.Tenant != tenant || first.Len() != 2 {
			t.Errorf("the first set after the changes: Lookup(%s) = %q, %v, Len %d; want %q, true, 2 (a set never changes)", key, id.Tenant, ok, first.Len(), tenant)
		}
	}
	if _, ok := zero.Lookup("sk-d"); ok {
		t.Error("the zero set knows the key a set made from it added")
	}
}

// TestKeyLookupSurvivesApply: the middleware's key lookup stays when a
// reloaded file replaces the identity section.
func TestKeyLookupSurvivesApply(t *testing.T) {
	f, err := config.Parse("keys.yaml", []byte("policies:\n  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 100, per: 1m}\nidentity: {anonymous: deny}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	keys := httpadmit.KeyTable{apikey.Sum("sk-live"): {Tenant: "acme", KeyID: "k1"}}
	mw, err := httpadmit.New(ctl, append(httpadmitfile.Options(f), httpadmit.WithKeyLookup(keys))...)
	if err != nil {
		t.Fatal(err)
	}
	call := func() int {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		r.Header.Set("Authorization", "Bearer sk-live")
		w := httptest.NewRecorder()
		mw.Handler(benchHandler()).ServeHTTP(w, r)
		return w.Code
	}
	if got := call(); got != http.StatusOK {
		t.Fatalf("status = %d; want 200", got)
	}
	if err := mw.Apply(f.Config, httpadmitfile.Options(f)...); err != nil {
		t.Fatal(err)
	}
	if got := call(); got != http.StatusOK {
		t.Fatalf("after Apply: status = %d; want 200", got)
	}
	delete(keys, apikey.Sum("sk-live"))
	if got := call(); got != http.StatusUnauthorized {
		t.Fatalf("after the key left the table: status = %d; want 401", got)
	}
}

// BenchmarkKeyLookup compares the two key tables with 200,000 keys: the
// file's KeyTable (one map, rebuilt on every change) and the KeySet a
// directory changes one key at a time. Both hash the key (SHA-256) and
// must allocate nothing.
func BenchmarkKeyLookup(b *testing.B) {
	const n = 200_000
	table := make(httpadmit.KeyTable, n)
	for i := range n {
		table[apikey.Sum(fmt.Sprintf("sk-bench-%08d-0123456789abcdef0123", i))] = httpadmit.Identity{Tenant: fmt.Sprintf("t%d", i/2)}
	}
	set := httpadmit.NewKeySet(table)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("sk-bench-%08d-0123456789abcdef0123", i*191)
	}
	for _, bc := range []struct {
		name string
		l    httpadmit.KeyLookup
	}{{"file", table}, {"set", set}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := cpuTime()
			i := 0
			for b.Loop() {
				if _, ok := bc.l.Lookup(keys[i&1023]); !ok {
					b.Fatal("key not found")
				}
				i++
			}
			reportCPU(b, cpu)
		})
	}
}

// TestIdentityReachesTheHandler: the handler behind the middleware reads
// the identity the request was admitted as, the API key's, from its
// context.
func TestIdentityReachesTheHandler(t *testing.T) {
	f, err := config.Parse("keys.yaml", []byte("policies:\n  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 100, per: 1m}\nidentity: {anonymous: deny}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	keys := httpadmit.KeyTable{apikey.Sum("sk-live"): {Tenant: "acme", KeyID: "k1", User: "u"}}
	mw, err := httpadmit.New(ctl, append(httpadmitfile.Options(f), httpadmit.WithKeyLookup(keys))...)
	if err != nil {
		t.Fatal(err)
	}
	var got httpadmit.Identity
	var ok bool
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, ok = httpadmit.IdentityFrom(r.Context()) }))
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.Header.Set("Authorization", "Bearer sk-live")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if want := (httpadmit.Identity{Tenant: "acme", KeyID: "k1", User: "u"}); !ok || got != want {
		t.Errorf("IdentityFrom in the handler = %+v, %v; want %+v, true", got, ok, want)
	}
}
