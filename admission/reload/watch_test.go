package reload_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
	"github.com/sluicehq/sluice/admission/reload"
	"github.com/sluicehq/sluice/internal/limitheaders"
)

type reloads struct {
	mu  sync.Mutex
	got []reload.Event
}

func (r *reloads) add(ev reload.Event) {
	r.mu.Lock()
	r.got = append(r.got, ev)
	r.mu.Unlock()
}

func (r *reloads) count() (ok, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range r.got {
		if ev.Applied() {
			ok++
		} else {
			failed++
		}
	}
	return
}

const keyAcme = "sk-test-acme"

// policyFile returns a policy file with a per-tenant window of limit per
// hour in mode, plus a second policy whose limit varies between reloads.
func policyFile(limit int, mode string, other int) string {
	return fmt.Sprintf(`
policies:
  - name: per-tenant
    key: tenant
    algorithm: fixed_window
    limit: %d
    per: 1h
    mode: %s
  - name: other
    key: tenant
    algorithm: token_bucket
    limit: %d
    per: 1s
tenants:
  acme:
    api_keys: [%s]
http:
  shadow_header: true
`, limit, mode, other, apikey.Sum(keyAcme))
}

func write(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// serve starts a controller, a watcher and a real HTTP server on loopback.
func serve(t *testing.T, path string, obs *reloads, opts ...reload.Option) (*reload.Watcher, *httptest.Server) {
	t.Helper()
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	clk := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ctl, err := admission.New(f.Config, admission.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, httpadmitfile.Options(f)...)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]reload.Option{
		reload.OnReload(obs.add), reload.WithSignals(), reload.WithLogger(slog.New(slog.DiscardHandler)),
	}, opts...)
	w, err := reload.Watch(path, httpadmitfile.Middleware{Middleware: mw}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	})))
	t.Cleanup(srv.Close)
	return w, srv
}

func get(t *testing.T, srv *httptest.Server) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/items", nil)
	req.Header.Set("Authorization", "Bearer "+keyAcme)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestReloadUnderLoad reloads the file 30 times (and once with a broken
// file) while 8 clients send 480 requests over HTTP: every request gets an
// answer, exactly the limit is admitted, no admission is lost or counted
// twice, and the broken file changes nothing.
func TestReloadUnderLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write(t, path, policyFile(300, "enforce", 1000))
	obs := &reloads{}
	w, srv := serve(t, path, obs)

	var ok, limited, other atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := srv.Client()
			for range 60 {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/items", nil)
				req.Header.Set("Authorization", "Bearer "+keyAcme)
				resp, err := client.Do(req)
				if err != nil {
					other.Add(1)
					continue
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					limited.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	var refusedErr error
	for i := range 30 {
		write(t, path, policyFile(300, "enforce", 1000+i))
		if err := w.Reload(); err != nil {
			t.Errorf("Reload %d = %v", i, err)
		}
		if i == 15 {
			write(t, path, "policies:\n  - name: per-tenant\n    limit: 0\n")
			refusedErr = w.Reload()
		}
	}
	wg.Wait()
	if ok.Load() != 300 || limited.Load() != 180 || other.Load() != 0 {
		t.Errorf("admitted, limited, other = %d, %d, %d; want 300, 180, 0", ok.Load(), limited.Load(), other.Load())
	}
	if refusedErr == nil {
		t.Error("Reload(broken file) = nil; want an error")
	}
	if applied, refused := w.Stats(); applied < 31 || refused != 1 {
		t.Errorf("Stats() = %d applied, %d refused; want >= 31, 1", applied, refused)
	}
	if okN, failed := obs.count(); okN < 31 || failed != 1 {
		t.Errorf("observer saw %d applied, %d refused reloads; want >= 31, 1", okN, failed)
	}
	if got := w.Current().Config.Policies[1].Limit; got != 1029 {
		t.Errorf("current other limit = %d; want 1029 (the last good file)", got)
	}
}

// TestReloadShadowToEnforce runs a policy in shadow, then enforces it by
// editing the file: the enforcing policy starts from the state its shadow
// run built.
// partialSub applies every file, and answers with its error: a
// *reload.PartialError, a refusal or nil.
type partialSub struct{ err error }

func (s *partialSub) Apply(*config.File) error { return s.err }

// TestReloadPartial: a file the subscriber applies without a part of it
// is in force and counted applied, and OnReload reports it with the
// *reload.PartialError saying what was left out; a refusal is still a
// refusal.
func TestReloadPartial(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write(t, path, policyFile(10, "enforce", 1000))
	sub, got := &partialSub{}, &reloads{}
	w, err := reload.Watch(path, sub, reload.OnReload(got.add), reload.WithSignals(), reload.WithDebounce(time.Hour),
		reload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	partial := &reload.PartialError{Section: "directory", Err: fmt.Errorf("the section changed")}
	for i, step := range []struct {
		limit            int
		err              error
		refusedNow       bool
		applied, refused int64
		inForce          int64
	}{
		{11, partial, false, 2, 0, 11},
		{12, fmt.Errorf("no"), true, 2, 1, 11},
		{13, nil, false, 3, 1, 13},
	} {
		sub.err = step.err
		write(t, path, policyFile(step.limit, "enforce", 1000))
		err := w.Reload()
		applied, refused := w.Stats()
		got.mu.Lock()
		last := got.got[len(got.got)-1]
		got.mu.Unlock()
		if limit := w.Current().Config.Policies[0].Limit; applied != step.applied || refused != step.refused || limit != step.inForce {
			t.Errorf("step %d: Stats() = %d, %d, limit %d in force; want %d, %d, %d", i, applied, refused, limit, step.applied, step.refused, step.inForce)
		}
		if last.Applied() == step.refusedNow || (err != nil) != step.refusedNow {
			t.Errorf("step %d: Reload() = %v, reported %v (applied %v)", i, err, last.Err, last.Applied())
		}
		if step.err == partial && last.Err != partial {
			t.Errorf("step %d: reported %v; want the *reload.PartialError", i, last.Err)
		}
	}
	if want := "applied without its directory section: the section changed"; partial.Error() != want {
		t.Errorf("PartialError.Error() = %q; want %q", partial.Error(), want)
	}
}

func TestReloadShadowToEnforce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write(t, path, policyFile(10, "shadow", 1000))
	w, srv := serve(t, path, &reloads{})
	for i := range 15 {
		resp := get(t, srv)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("shadow request %d: status %d; want 200", i, resp.StatusCode)
		}
		wr := resp.Header.Get(limitheaders.HeaderWouldReject)
		if (i >= 10) != (wr == "per-tenant") {
			t.Errorf("shadow request %d: %s = %q", i, limitheaders.HeaderWouldReject, wr)
		}
	}
	write(t, path, policyFile(10, "enforce", 1000))
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if resp := get(t, srv); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("first enforced request: status %d; want 429 (state kept from the shadow run)", resp.StatusCode)
	}
	write(t, path, policyFile(12, "enforce", 1000))
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{200, 200, 429} {
		if resp := get(t, srv); resp.StatusCode != want {
			t.Errorf("after raising the limit to 12, request %d: status %d; want %d", i, resp.StatusCode, want)
		}
	}
}

// TestReloadOnChangeAndSignal checks the two triggers: a file written in
// place of the old one, and SIGHUP.
func TestReloadOnChangeAndSignal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write(t, path, policyFile(10, "enforce", 1000))
	obs := &reloads{}
	w, _ := serve(t, path, obs, reload.WithDebounce(10*time.Millisecond), reload.WithSignals(syscall.SIGHUP))
	waitApplied := func(n int64, what string) {
		t.Helper()
		waitFor(t, what, func() bool { applied, _ := w.Stats(); return applied >= n })
	}
	waitApplied(1, "start")
	write(t, path, policyFile(20, "enforce", 1000))
	waitApplied(2, "file change")
	if got := w.Current().Config.Policies[0].Limit; got != 20 {
		t.Errorf("limit after change = %d; want 20", got)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitApplied(3, "SIGHUP")
	write(t, path, "policies: [")
	waitFor(t, "a broken file to be refused", func() bool { _, refused := w.Stats(); return refused >= 1 })
	if got := w.Current().Config.Policies[0].Limit; got != 20 {
		t.Errorf("limit after a broken file = %d; want 20 (kept)", got)
	}
}

// TestReloadKeys adds a tenant key and changes the exempt paths through a
// reload: the middleware applies both at once.
func TestReloadKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write(t, path, policyFile(10, "enforce", 1000))
	w, srv := serve(t, path, &reloads{})
	req := func(key, p string) int {
		r, _ := http.NewRequest(http.MethodGet, srv.URL+p, nil)
		r.Header.Set("Authorization", "Bearer "+key)
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := req("sk-new", "/v1/items"); got != http.StatusUnauthorized {
		t.Fatalf("key not yet in the file: %d; want 401", got)
	}
	write(t, path, policyFile(10, "enforce", 1000)+fmt.Sprintf("  globex:\n    api_keys: [%s]\n", apikey.Sum("sk-new"))+
		"http_unused: 1\n")
	if err := w.Reload(); err == nil {
		t.Fatal("Reload(file with an unknown key) = nil; want an error")
	}
	data := strings.Replace(policyFile(10, "enforce", 1000), "http:\n  shadow_header: true\n",
		fmt.Sprintf("  globex:\n    api_keys: [%s]\nhttp:\n  exempt: [/v1/status]\n", apikey.Sum("sk-new")), 1)
	write(t, path, data)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := req("sk-new", "/v1/items"); got != http.StatusOK {
		t.Errorf("key added by a reload: %d; want 200", got)
	}
	if got := req("sk-unknown", "/v1/status"); got != http.StatusOK {
		t.Errorf("path exempted by a reload: %d; want 200", got)
	}
}
