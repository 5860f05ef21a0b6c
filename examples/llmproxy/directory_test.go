package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/directory/pgdir"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/shadow/status"
)

// TestTenantsInPostgres is the flow of docs/postgres.md on two gateways sharing one
// database: migrate, add a plan, a tenant and a key, call both gateways,
// upgrade the tenant's plan with one statement and see the new limit in
// the next response's headers on both, then revoke the key: both refuse
// it, each change applied from the database's notification.
func TestTenantsInPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewDB(t)
	conn := pgtest.Conn(t, dsn)
	ctx := context.Background()
	if _, err := pgdir.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		name  string
		limit int64
	}{{"free", 20}, {"pro", 600}} {
		if err := pgdir.SetPlan(ctx, conn, p.name, map[string]limits.Override{"requests-per-minute": {Limit: p.limit}}, p.name == "free"); err != nil {
			t.Fatal(err)
		}
	}
	if err := pgdir.AddTenant(ctx, conn, "acme", "free"); err != nil {
		t.Fatal(err)
	}
	key, _, err := pgdir.CreateKey(ctx, conn, "acme", "acme-main", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_SLUICE_DATABASE_URL", dsn)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policy := `version: 1
policies:
  - {name: requests-per-minute, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m}
identity: {anonymous: deny}
directory: {source: postgres, dsn_env: TEST_SLUICE_DATABASE_URL, snapshot: ` + filepath.Join(t.TempDir(), "dir.json") + `}
`
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startProxy(t, func(o *options) { o.configPath = path })
	b := startProxy(t, func(o *options) { o.configPath = path })
	var banner strings.Builder
	a.banner(&banner)
	if !strings.Contains(banner.String(), "tenants: PostgreSQL ($TEST_SLUICE_DATABASE_URL): 1 tenants, 2 plans, 1 keys") {
		t.Errorf("banner:\n%s", banner.String())
	}
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}`
	limit := func(s *server) (int, string) {
		resp, _ := post(t, s, "/v1/chat/completions", key, body)
		return resp.StatusCode, resp.Header.Get("x-ratelimit-limit-requests")
	}
	for _, s := range []*server{a, b} {
		if code, l := limit(s); code != http.StatusOK || l != "20" {
			t.Fatalf("on free: status %d, x-ratelimit-limit-requests %q; want 200, 20", code, l)
		}
	}
	if err := pgdir.SetTenantPlan(ctx, conn, "acme", "pro"); err != nil {
		t.Fatal(err)
	}
	// Each change reaches both gateways by the database's notification,
	// not by the full reload every refresh (60s): the wait has no bound
	// of its own, and the gateways' count of notified changes tells how
	// it came.
	notified := func(what string, want float64) {
		t.Helper()
		for _, s := range []*server{a, b} {
			if n := scrape(t, s, "sluice_directory_changes_total"); n < want {
				t.Errorf("%s: sluice_directory_changes_total = %v; want at least %v, the change applied from its notification", what, n, want)
			}
		}
	}
	for _, s := range []*server{a, b} {
		eventually(t, time.Second, "x-ratelimit-limit-requests 600 after the upgrade", func() bool {
			code, l := limit(s)
			return code == http.StatusOK && l == "600"
		})
	}
	notified("after the upgrade", 1)
	if err := pgdir.RevokeKey(ctx, conn, "acme-main"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, s := range []*server{a, b} {
		eventually(t, time.Second, "401 after the revocation", func() bool {
			code, _ := limit(s)
			return code == http.StatusUnauthorized
		})
	}
	t.Logf("both gateways refuse the revoked key %v after the revocation", time.Since(start))
	notified("after the revocation", 2)

	// A reload whose directory section moved the snapshot applies the
	// policies' change, the running directory kept; and so does the next.
	// The status page and the reload metrics say the file was installed
	// without its directory section, and what the refused section was.
	// The file watcher applies each change it sees; a forced reload of
	// the same file (SIGHUP's) applies it again and is counted again.
	// The test waits for the watcher's reload, with no bound of its own,
	// rather than racing its debounce with a forced one.
	partial := func() float64 { return scrape(t, a, "admission_reloads_total", "result", "partial") }
	for i, limit := range []string{"61", "62"} {
		moved := strings.Replace(strings.Replace(policy, "limit: 60", "limit: "+limit, 1), "dir.json", "moved.json", 1)
		writeAtomically(t, path, moved)
		want := float64(2*i + 1)
		eventually(t, time.Second, "the watcher's reload of the moved section", func() bool { return partial() >= want })
		if n := partial(); n != want {
			t.Errorf("after the watcher's reload %d: admission_reloads_total{result=partial} = %v; want %v", i, n, want)
		}
		if got := a.ctl.Policies()[0].Limit; strconv.FormatInt(got, 10) != limit {
			t.Errorf("after the reload: the policy's limit %d; want %s", got, limit)
		}
		if err := a.watcher.Reload(); err != nil {
			t.Fatalf("forced reload with limit %s and the directory section changed = %v; want the policies applied", limit, err)
		}
		r := lastReload(t, a)
		if r.State != status.ReloadPartial || !r.OK || r.Error != "" || !strings.Contains(r.Warning, "applied without its directory section") || !strings.Contains(r.Warning, "moved.json") {
			t.Errorf("reload %d on /status.json: %+v; want state partial, installed, with a warning naming the refused section", i, r)
		}
		if n := partial(); n != want+1 {
			t.Errorf("after the forced reload %d: admission_reloads_total{result=partial} = %v; want %v", i, n, want+1)
		}
	}
	if n := len(a.dir.dir.Data().Plans.Tenants); n != 1 {
		t.Errorf("after the reloads: %d tenants; want the running directory's 1", n)
	}
	if page := get(t, a.OpsURL+"/status"); !strings.Contains(page, "installed, with a warning: ") || !strings.Contains(page, "moved.json") {
		t.Errorf("the /status page does not show the refused directory section:\n%.3000s", page)
	}
	// The section restored: applied whole, and said so.
	writeAtomically(t, path, policy)
	if err := a.watcher.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := lastReload(t, a); r.State != status.ReloadApplied || r.Warning != "" {
		t.Errorf("reload with the section restored on /status.json: %+v; want state applied, no warning", r)
	}
}

// get returns the body of a GET of url, which must answer 200.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, b)
	}
	return string(b)
}

// lastReload returns the newest reload the gateway's /status.json lists.
func lastReload(t *testing.T, s *server) status.Reload {
	t.Helper()
	var st status.View
	if err := json.Unmarshal([]byte(get(t, s.OpsURL+"/status.json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Reloads) == 0 {
		t.Fatal("/status.json lists no reload")
	}
	return st.Reloads[0]
}

// writeAtomically replaces the file at path with body by a rename, so a
// watcher never reads it half written.
func writeAtomically(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}
