package httpadmitfile_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
	"github.com/sluicehq/sluice/admission/internal/filesetup/filetest"
	"github.com/sluicehq/sluice/admission/reload"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// policyFile is a file allowing tenant acme limit requests an hour, on
// store (empty: in memory); stores is its stores section.
func policyFile(limit int, store, stores string) string {
	return fmt.Sprintf(`version: 1
%s
policies:
  - {name: hourly, key: [tenant], algorithm: fixed_window, limit: %d, per: 1h, store: %s}
tenants:
  acme: {api_keys: [%s]}
identity: {anonymous: deny}
`, stores, limit, store, apikey.Sum("sk-acme"))
}

// get sends a request with acme's key through h and returns its status.
func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	r.Header.Set("Authorization", "Bearer sk-acme")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

var quiet = slog.New(slog.DiscardHandler)

// One call from the file on disk to a middleware serving real HTTP: the
// file's limit applies, an edit of the file applies whole once the
// watcher reports it, and the file's metrics are scraped on the
// application's listener ahead of the limits.
func TestFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	filetest.Write(t, path, policyFile(1, "memory", ""))
	onReload, events := filetest.Events()
	s, err := httpadmitfile.FromFile(t.Context(), path,
		httpadmitfile.WithLogger(quiet), httpadmitfile.OnReload(onReload),
		httpadmitfile.WithClock(admissiontest.NewClock(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))),
		httpadmitfile.WithMiddleware(httpadmit.WithExempt("/healthz")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	filetest.Applied(t, events, 1) // the first load, once
	srv := httptest.NewServer(s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := httpadmit.IdentityFrom(r.Context())
		fmt.Fprint(w, id.Tenant)
	})))
	defer srv.Close()
	call := func() int {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/items", nil)
		req.Header.Set("Authorization", "Bearer sk-acme")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	for i, want := range []int{200, 429} {
		if got := call(); got != want {
			t.Fatalf("request %d: status %d; want %d", i+1, got, want)
		}
	}
	filetest.Write(t, path, policyFile(3, "memory", ""))
	filetest.Applied(t, events, 1)
	for i, want := range []int{200, 200, 429} { // 3 an hour, 1 taken: the partition kept
		if got := call(); got != want {
			t.Fatalf("after the edit, request %d: status %d; want %d", i+1, got, want)
		}
	}
	// The watcher reports a reload before Stats counts it: wait for the count.
	poll.Until(t, time.Second, "the edit counted", func() bool { applied, _ := s.Watcher().Stats(); return applied >= 2 })
	if applied, refused := s.Watcher().Stats(); applied != 2 || refused != 0 {
		t.Errorf("Stats() = %d applied, %d refused; want 2 (the first load once, the edit once), 0", applied, refused)
	}
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`admission_reloads_total{result="ok"} 2`, `admission_decisions_total{`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("GET /metrics = %d, without %q:\n%s", resp.StatusCode, want, body)
		}
	}
}

// A policy on a store of kind redis decides on the Redis server the file
// names (through the variable address_env names), and the store reports
// its calls to the metrics: admission_store_duration_seconds is scraped.
// An edit of the stores section is reported as left out (the stores are
// opened at start) while the rest of the file applies.
func TestFromFileRedis(t *testing.T) {
	rs := redistest.Start(t)
	t.Setenv("TEST_SLUICE_REDIS", "redis://"+rs.Addr+"/0")
	path := filepath.Join(t.TempDir(), "policies.yaml")
	filetest.Write(t, path, policyFile(1, "shared", "stores: {shared: {kind: redis, address_env: TEST_SLUICE_REDIS, prefix: 'ff:'}}"))
	onReload, events := filetest.Events()
	s, err := httpadmitfile.FromFile(t.Context(), path, httpadmitfile.WithLogger(quiet), httpadmitfile.OnReload(onReload))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	filetest.Applied(t, events, 1)
	h := s.Handler(http.NotFoundHandler())
	for i, want := range []int{404, 429} {
		if got, _ := get(t, h, "/v1/items"); got != want {
			t.Fatalf("request %d: status %d; want %d", i+1, got, want)
		}
	}
	if keys, err := redistest.Do(rs.Addr, "KEYS", "ff:*"); err != nil || !strings.Contains(keys, "hourly") {
		t.Errorf("KEYS ff:* = %q, %v; want the policy's partition", keys, err)
	}
	_, body := get(t, h, "/metrics")
	if !strings.Contains(body, `admission_store_duration_seconds_count{`) || !strings.Contains(body, `store="shared"`) {
		t.Errorf("GET /metrics has no admission_store_duration_seconds of the store shared:\n%s", body)
	}

	filetest.Write(t, path, policyFile(2, "shared", "stores: {shared: {kind: redis, address_env: TEST_SLUICE_REDIS, prefix: 'new:'}}"))
	var partial *reload.PartialError
	if e := <-events; !errors.As(e.Err, &partial) || partial.Section != "stores" || !e.Applied() {
		t.Fatalf("reload with another prefix: %v; want applied without its stores section", e.Err)
	}
	if got, _ := get(t, h, "/v1/items"); got != 404 { // 2 an hour now, on the store opened at start
		t.Errorf("after the edit: status %d; want 404 from the handler", got)
	}
	if keys, _ := redistest.Do(rs.Addr, "KEYS", "new:*"); keys != "" {
		t.Errorf("KEYS new:* = %q; want none: the store keeps the prefix it was opened with", keys)
	}
}

// A file that does not load, or asks for what FromFile cannot build, is
// refused with the file (and the line, for the file's own mistakes).
func TestFromFileRefused(t *testing.T) {
	t.Setenv("TEST_SLUICE_EMPTY", "")
	tests := []struct{ name, file, want string }{
		{"a mistake", policyFile(0, "memory", ""), "policies.yaml:4:"},
		{"a store not declared", policyFile(1, "redis", ""), `policies.yaml: policies name the store "redis", which the stores section does not declare`},
		{"an empty variable", policyFile(1, "r", "stores: {r: {kind: redis, address_env: TEST_SLUICE_EMPTY}}"), "policies.yaml: stores.r: address_env: the variable TEST_SLUICE_EMPTY is unset or empty"},
		{"an upstream store", policyFile(1, "memory", "stores: {openai: {kind: upstream}}"), "policies.yaml: stores.openai: a store of kind upstream"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "policies.yaml")
			filetest.Write(t, path, tc.file)
			s, err := httpadmitfile.FromFile(t.Context(), path, httpadmitfile.WithLogger(quiet))
			if err == nil {
				s.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FromFile = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// Close ends every goroutine FromFile started (the watcher's, the lease
// keeper's, the metrics') and closes its connections to Redis.
func TestFromFileCloseLeavesNoGoroutine(t *testing.T) {
	rs := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "policies.yaml")
	filetest.Write(t, path, policyFile(5, "shared", "stores: {shared: {kind: redis, address: '"+rs.Addr+"'}}"))
	// The signal package's own goroutine, started by the first
	// signal.Notify of the process, stays for its life.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP)
	signal.Stop(sigs)
	before := runtime.NumGoroutine()
	s, err := httpadmitfile.FromFile(context.Background(), path, httpadmitfile.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := get(t, s.Handler(http.NotFoundHandler()), "/v1/items"); got != 404 {
		t.Fatalf("status %d; want 404 from the handler", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Second, "the goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	poll.Until(t, time.Second, "Redis to see the store's connections closed", func() bool {
		info, err := redistest.Do(rs.Addr, "INFO", "clients")
		return err == nil && strings.Contains(info, "connected_clients:1\r\n") // this INFO's own
	})
	runtime.KeepAlive(s) // closed by Close, not by the collector's finalizers
}
