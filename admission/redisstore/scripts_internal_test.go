package redisstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestScriptsWithoutFunctions runs the conformance tables on the scripts
// the store uses when the server refuses Redis Functions.
func TestScriptsWithoutFunctions(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer client.Close()
	n := 0
	backendtest.RunCases(t, func(t *testing.T) backend.Store {
		n++
		s, err := New(client, Config{Prefix: "nf" + string(rune('a'+n)) + ":", CallerTime: true, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s.noFunctions.Store(true)
		return s
	})
	if libs, _ := redistest.Do(srv.Addr, "FUNCTION", "LIST"); libs != "" {
		t.Errorf("FUNCTION LIST = %q; want no library loaded", libs)
	}
}

// TestLibraryReloaded: a server that lost its functions (a restart without
// persistence, FUNCTION FLUSH) gets the library again on the next call.
func TestLibraryReloaded(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer client.Close()
	s, err := New(client, Config{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := admission.Policy{Name: "c", Algorithm: limits.Concurrency, Limit: 3}
	lim, _ := s.Limiter(&p)
	l := p.Base()
	for i := 0; i < 2; i++ {
		g, err := backendtest.Acquire(t.Context(), lim, "k", &l, 1, time.Now())
		if err != nil || !g.OK {
			t.Fatalf("Acquire %d = %+v, %v", i, g, err)
		}
		if _, err := redistest.Do(srv.Addr, "FUNCTION", "FLUSH"); err != nil {
			t.Fatal(err)
		}
	}
	if s.noFunctions.Load() {
		t.Error("the store fell back to scripts; want the library reloaded")
	}
}
