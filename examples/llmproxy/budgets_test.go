package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/budget"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestBudgetWarningsEndToEnd sends a tenant's requests through the
// gateway until its daily quota refuses: it is warned once at 50% and
// once at 80% by a signed webhook POST a loopback receiver verifies, its
// soft quota (never refusing) warns at 100% and lets the requests
// through, a neighbour under its thresholds is not warned, and the
// metrics show it all.
func TestBudgetWarningsEndToEnd(t *testing.T) {
	const secretEnv = "LLMPROXY_TEST_BUDGET_SECRET"
	secret := "whsec-0123456789abcdef"
	t.Setenv(secretEnv, secret)
	var mu sync.Mutex
	var got []budget.Warning
	bad := 0
	recv := signedReceiver(t, secret, func(wn budget.Warning, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if !ok {
			bad++
			return
		}
		got = append(got, wn)
	})
	s := startProxy(t, withPolicy(t, `
  - {name: daily, key: tenant, algorithm: quota, period: day, limit: 10, warn: [50%, 80%]}
  - {name: soft-daily, key: tenant, algorithm: quota, period: day, limit: 5, soft: true}
`, []string{"acme", "globex"}, `budgets:
  webhook: {url: "`+recv.URL+`/hook", secret_env: `+secretEnv+`, backoff: 10ms, max_backoff: 50ms}
`))
	acme, globex := sdk(s, testKey("acme")), sdk(s, testKey("globex"))
	for i := range 11 {
		_, err := acme.Chat.Completions.New(ctxT(t, 30*time.Second), chatParams("hello"))
		if i < 10 && err != nil {
			t.Fatalf("request %d: %v; want admitted (the soft quota never refuses)", i, err)
		}
		if i == 10 && statusOf(err) != http.StatusForbidden {
			t.Fatalf("request 11: %v; want 403 from the exhausted daily quota", err)
		}
	}
	for range 3 {
		if _, err := globex.Chat.Completions.New(ctxT(t, 30*time.Second), chatParams("hello")); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "three webhook deliveries", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 3
	})
	time.Sleep(50 * time.Millisecond) // room for a wrong fourth
	mu.Lock()
	var seen []string
	for _, wn := range got {
		seen = append(seen, fmt.Sprint(wn.Policy, "/", wn.Tenant, "/", wn.Threshold))
		if wn.Tenant != "acme" || wn.ID == "" || wn.Limit == 0 || wn.PeriodEnd.Sub(wn.PeriodStart) != 24*time.Hour {
			t.Errorf("warning %+v", wn)
		}
	}
	mu.Unlock()
	slices.Sort(seen)
	if want := []string{"daily/acme/50", "daily/acme/80", "soft-daily/acme/100"}; !slices.Equal(seen, want) || bad != 0 {
		t.Errorf("webhook received %v (%d unverified); want %v", seen, bad, want)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"admission_budget_warnings_total", []string{"policy", "daily", "threshold", "50"}, 1},
		{"admission_budget_warnings_total", []string{"policy", "daily", "threshold", "80"}, 1},
		{"admission_budget_warnings_total", []string{"policy", "soft-daily", "threshold", "100"}, 1},
		{"admission_budget_used_ratio", []string{"policy", "daily", "tenant", "acme"}, 1},
		{"admission_budget_used_ratio", []string{"policy", "daily", "tenant", "globex"}, 0},
		{"admission_budget_soft", []string{"policy", "soft-daily"}, 1},
		{"admission_budget_webhook_deliveries_total", []string{"result", "delivered"}, 3},
	} {
		if v := scrape(t, s, c.name, c.labels...); v != c.want {
			t.Errorf("%s%v = %v; want %v", c.name, c.labels, v, c.want)
		}
	}
}

// TestBudgetReload reloads the policy file: a file whose webhook secret
// variable is unset is refused and the one in force keeps warning; a file
// adding a threshold warns at it without repeating the ones crossed.
func TestBudgetReload(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/policy.yaml"
	policy := func(warn string) string {
		return "  - {name: daily, key: tenant, algorithm: quota, period: day, limit: 10, warn: " + warn + "}\n"
	}
	writePolicy(t, path, policy("[50%]"), []string{"acme"}, "")
	s := startProxy(t, func(o *options) { o.configPath = path })
	acme := sdk(s, testKey("acme"))
	send := func(n int) {
		for range n {
			if _, err := acme.Chat.Completions.New(ctxT(t, 30*time.Second), chatParams("hello")); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(6)
	if v := scrape(t, s, "admission_budget_warnings_total", "threshold", "50"); v != 1 {
		t.Fatalf("50%% warnings = %v; want 1", v)
	}
	writePolicy(t, path, policy("[50%, 70%]"), []string{"acme"}, "budgets:\n  webhook: {url: \"http://127.0.0.1:9/\", secret_env: LLMPROXY_TEST_UNSET_SECRET}\n")
	eventually(t, 10*time.Second, "the reload refused", func() bool {
		return scrape(t, s, "admission_reloads_total", "result", "rejected") >= 1
	})
	writePolicy(t, path, policy("[50%, 70%]"), []string{"acme"}, "")
	eventually(t, 10*time.Second, "the reload applied", func() bool {
		return scrape(t, s, "admission_reloads_total", "result", "ok") >= 2
	})
	send(2)
	if v50, v70 := scrape(t, s, "admission_budget_warnings_total", "threshold", "50"), scrape(t, s, "admission_budget_warnings_total", "threshold", "70"); v50 != 1 || v70 != 1 {
		t.Errorf("after the reload: 50%% warned %v times, 70%% %v; want 1 and 1", v50, v70)
	}
}

// TestReplicasWarnWithOneEventID runs two replicas on one Redis server
// with a daily quota kept there: each replica that sees the tenant past
// 50% warns once, and both warnings carry the same event id, so the
// receiver can keep one.
func TestReplicasWarnWithOneEventID(t *testing.T) {
	const secretEnv = "LLMPROXY_TEST_REPLICA_SECRET"
	secret := "whsec-replicas-0123456789"
	t.Setenv(secretEnv, secret)
	var mu sync.Mutex
	ids := map[string]int{}
	recv := signedReceiver(t, secret, func(wn budget.Warning, ok bool) {
		if ok && wn.Threshold == 50 {
			mu.Lock()
			ids[wn.ID]++
			mu.Unlock()
		}
	})
	srv := redistest.Start(t)
	policy := withPolicy(t, `
  - {name: daily, key: tenant, algorithm: quota, period: day, limit: 10, warn: [50%], store: redis, on_store_error: closed}
`, []string{"acme"}, `budgets:
  webhook: {url: "`+recv.URL+`", secret_env: `+secretEnv+`}
`)
	useRedis := func(o *options) { o.redis = srv.Addr }
	a, b := startProxy(t, policy, useRedis), startProxy(t, policy, useRedis)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}`
	for i, s := range []*server{a, b, a, b, a, b} {
		if resp, out := post(t, s, "/v1/chat/completions", testKey("acme"), body); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, out)
		}
	}
	eventually(t, 10*time.Second, "a warning from each replica", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range ids {
			n += c
		}
		return n >= 2
	})
	time.Sleep(50 * time.Millisecond) // room for a wrong third
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 1 {
		t.Errorf("event ids %v; want one id, from both replicas", ids)
	}
	for id, n := range ids {
		if n != 2 {
			t.Errorf("id %s received %d times; want 2 (once per replica)", id, n)
		}
	}
}

// signedReceiver is a webhook receiver on loopback that checks each POST
// as a real one would (the signature over the raw body, the event id
// header against the body's) and hands f the warning and whether it
// passed; a warning that did not is answered 401.
func signedReceiver(t *testing.T, secret string, f func(budget.Warning, bool)) *httptest.Server {
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		var wn budget.Warning
		ok := budget.Verify([]byte(secret), r.Header.Get(budget.SignatureHeader), body, time.Now(), 5*time.Minute) == nil &&
			json.Unmarshal(body, &wn) == nil && wn.ID == r.Header.Get(budget.EventIDHeader)
		f(wn, ok)
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(recv.Close)
	return recv
}
