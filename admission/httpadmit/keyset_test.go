package httpadmit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
)

// TestKeySet adds, replaces and revokes keys one at a time while readers
// look them up: a reader sees a key's old or new identity, never another
// key's, and a deleted key is gone for the next lookup.
func TestKeySet(t *testing.T) {
	var s httpadmit.KeySet
	if _, ok := s.Lookup("sk-a"); ok {
		t.Fatal("the zero KeySet knows sk-a")
	}
	s.Replace(httpadmit.KeyTable{config.HashKey("sk-a"): {Tenant: "a"}, config.HashKey("sk-b"): {Tenant: "b"}})
	steps := []struct {
		change func()
		key    string
		tenant string
		ok     bool
	}{
		{nil, "sk-a", "a", true},
		{func() { s.Set(config.HashKey("sk-c"), httpadmit.Identity{Tenant: "c"}) }, "sk-c", "c", true},
		{func() { s.Set(config.HashKey("sk-a"), httpadmit.Identity{Tenant: "a2"}) }, "sk-a", "a2", true},
		{func() { s.Delete(config.HashKey("sk-b")) }, "sk-b", "", false},
		{nil, "sk-c", "c", true},
		{func() { s.Replace(httpadmit.KeyTable{config.HashKey("sk-d"): {Tenant: "d"}}) }, "sk-c", "", false},
		{nil, "sk-d", "d", true},
	}
	for i, st := range steps {
		if st.change != nil {
			st.change()
		}
		id, ok := s.Lookup(st.key)
		if id.Tenant != st.tenant || ok != st.ok {
			t.Errorf("step %d: Lookup(%s) = %q, %v; want %q, %v", i, st.key, id.Tenant, ok, st.tenant, st.ok)
		}
	}
	if s.Len() != 1 {
		t.Errorf("Len() = %d; want 1", s.Len())
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("sk-%d", (i+g)%64)
				if id, ok := s.Lookup(k); ok && id.KeyID != k {
					t.Errorf("Lookup(%s) = %+v: another key's identity", k, id)
					return
				}
			}
		}()
	}
	for i := range 2000 {
		k := fmt.Sprintf("sk-%d", i%64)
		if i%3 == 0 {
			s.Delete(config.HashKey(k))
		} else {
			s.Set(config.HashKey(k), httpadmit.Identity{Tenant: "t", KeyID: k})
		}
	}
	close(stop)
	wg.Wait()
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
	var keys httpadmit.KeySet
	keys.Set(config.HashKey("sk-live"), httpadmit.Identity{Tenant: "acme", KeyID: "k1"})
	mw, err := httpadmit.New(ctl, append(httpadmit.FileOptions(f), httpadmit.WithKeyLookup(&keys))...)
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
	if err := mw.Apply(f); err != nil {
		t.Fatal(err)
	}
	if got := call(); got != http.StatusOK {
		t.Fatalf("after Apply: status = %d; want 200", got)
	}
	keys.Delete(config.HashKey("sk-live"))
	if got := call(); got != http.StatusUnauthorized {
		t.Fatalf("after Delete: status = %d; want 401", got)
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
		table[config.HashKey(fmt.Sprintf("sk-bench-%08d-0123456789abcdef0123", i))] = httpadmit.Identity{Tenant: fmt.Sprintf("t%d", i/2)}
	}
	var set httpadmit.KeySet
	set.Replace(table)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("sk-bench-%08d-0123456789abcdef0123", i*191)
	}
	for _, bc := range []struct {
		name string
		l    httpadmit.KeyLookup
	}{{"file", table}, {"set", &set}} {
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
