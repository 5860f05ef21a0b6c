package dashboards_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/dashboards"
	"github.com/sluicehq/sluice/internal/promtest"
	"github.com/sluicehq/sluice/metrics"
)

// checkoutPolicies are a plain service's policies, counting requests
// only: a per-tenant rate limit the noisy tenant runs into, a shadow
// candidate that would reject, a global concurrency cap with a small
// queue, and a per-tenant cap on a flaky store that fails open and whose
// releases are retried.
func checkoutPolicies() []admission.Policy {
	return []admission.Policy{
		{Name: "tenant-rpm", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket,
			Limit: 40, Per: time.Second, MaxPartitions: 42},
		{Name: "tenant-rpm-candidate", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.FixedWindow,
			Limit: 20, Per: time.Second, Mode: limits.Shadow},
		{Name: "global-concurrency", Algorithm: limits.Concurrency, Limit: 3, Queue: limits.Queue{Size: 1}},
		{Name: "tenant-concurrency-shared", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency,
			Limit: 8, Store: "flaky", OnStoreError: limits.FailOpenMode},
	}
}

// searchPolicies are another service's, with the same policy names as
// checkoutPolicies but limits its traffic never reaches: summed with
// checkout's, its figures would hide or dilute checkout's rejections.
func searchPolicies() []admission.Policy {
	return []admission.Policy{
		{Name: "tenant-rpm", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket,
			Limit: 1_000_000, Per: time.Second},
		{Name: "global-concurrency", Algorithm: limits.Concurrency, Limit: 1000},
	}
}

// startService runs a plain net/http service using the library: httpadmit
// in front of a handler working 1 to 3 ms, identifying tenants by API key,
// with its controller's metrics on a listener of their own. workers send
// it requests with a 20 ms deadline until the test ends, half of them from
// tenants[0], the rest spread over the others. It returns the metrics'
// address.
func startService(t *testing.T, policies []admission.Policy, tenants []string, workers int) string {
	t.Helper()
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Provider.Shutdown(context.Background()) })
	obs, err := metrics.New(metrics.WithMeterProvider(prom.Provider), metrics.WithTopK(10))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(admission.Config{Policies: policies},
		admission.WithObserver(obs), admission.WithStore("flaky", flakyStore{every: 10}),
		admission.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })
	obs.Watch(ctl)
	keys := map[apikey.Hash]httpadmit.Identity{}
	for _, tenant := range tenants {
		keys[apikey.Sum("sk-"+tenant)] = httpadmit.Identity{Tenant: tenant}
	}
	mw, err := httpadmit.New(ctl, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{Keys: keys}))
	if err != nil {
		t.Fatal(err)
	}
	app := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(1+rand.IntN(3)) * time.Millisecond)
		w.WriteHeader(http.StatusOK)
	})))
	t.Cleanup(app.Close)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ms := &http.Server{Handler: prom.Handler, ReadHeaderTimeout: 5 * time.Second}
	go ms.Serve(l)
	t.Cleanup(func() { ms.Close() })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 11))
			for {
				select {
				case <-stop:
					return
				default:
				}
				tenant := tenants[0]
				if rnd.IntN(2) == 0 {
					tenant = tenants[1+rnd.IntN(len(tenants)-1)]
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, app.URL+"/v1/orders", nil)
				req.Header.Set("Authorization", "Bearer sk-"+tenant)
				if resp, err := app.Client().Do(req); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusTooManyRequests {
						time.Sleep(time.Millisecond)
					}
				}
				cancel()
			}
		})
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
	return l.Addr().String()
}

// tenantNames returns prefix-0 ... prefix-(n-1) after first.
func tenantNames(first, prefix string, n int) []string {
	out := []string{first}
	for i := range n {
		out = append(out, prefix+strconv.Itoa(i))
	}
	return out
}

// TestPlainServices runs two plain net/http services using the library
// (httpadmit in front of a handler, policies counting requests only, no
// LLM), scraped by one real Prometheus as jobs checkout and search, with
// the same policy names. With the job variable on checkout, every query
// of the generic dashboards (Overview, Rollout, Tenant) and of their
// variables has data; with it on either job, every series a panel shows
// is that job's; and the rejection ratio of the policy both services
// name tenant-rpm is checkout's own (positive) and search's own (none),
// not a mix of the two.
func TestPlainServices(t *testing.T) {
	start := time.Now()
	checkout := startService(t, checkoutPolicies(), tenantNames("noisy", "tenant-", 40), 6)
	search := startService(t, searchPolicies(), tenantNames("reader", "reader-", 10), 2)
	p := promtest.Start(t, promtest.Config{Jobs: map[string][]string{"checkout": {checkout}, "search": {search}}})

	type query struct{ name, expr string }
	queriesFor := func(job, tenant string) []query {
		r := strings.NewReplacer("$__rate_interval", "10s", "$__range", "5m", "$job", job, "$instance", ".*",
			"$policy", ".*", "$shadow_policy", ".*", "$enforced_policy", ".*", "$tenant", tenant)
		var qs []query
		for _, d := range dashboards.Generic() {
			for _, panel := range d.Panels {
				for _, tg := range panel.Targets {
					qs = append(qs, query{d.UID + " / " + panel.Title + " / " + tg.RefID, r.Replace(tg.Expr)})
				}
			}
			for _, v := range d.Templating.List[1:] {
				if v.Type == "datasource" || v.Name == "job" {
					continue
				}
				sel := strings.TrimSuffix(strings.TrimPrefix(r.Replace(v.Query), "label_values("), ")")
				qs = append(qs, query{d.UID + " / variable " + v.Name, sel[:strings.LastIndex(sel, ",")]})
			}
		}
		return qs
	}
	ratio := func(job string) string {
		return strings.NewReplacer("$__rate_interval", "10s", "$job", job, "$instance", ".*", "$policy", "tenant-rpm").
			Replace(dashboards.Overview().Panels[1].Targets[0].Expr)
	}

	ctx := context.Background()
	checked := 0
	failures := promtest.Rounds(t, func() (failures []string) {
		checked = 0
		for _, job := range []string{"checkout", "search"} {
			for _, q := range queriesFor(job, "noisy") {
				got, err := p.Query(ctx, q.expr)
				checked++
				if err != nil {
					failures = append(failures, fmt.Sprintf("%s (job %s): %v\n  %s", q.name, job, err, q.expr))
					continue
				}
				if job == "checkout" && !hasData(got) {
					failures = append(failures, fmt.Sprintf("%s (job checkout): no data\n  %s", q.name, q.expr))
				}
				for _, s := range got {
					if s.Metric["job"] != job {
						failures = append(failures, fmt.Sprintf("%s (job %s): a series of job %q: %v\n  %s", q.name, job, s.Metric["job"], s.Metric, q.expr))
						break
					}
				}
			}
		}
		// All jobs selected: checkout's rejection ratio apart from search's,
		// which rejects nothing (no series, or 0).
		got, err := p.Query(ctx, ratio(".*"))
		byJob := map[string]float64{}
		for _, s := range got {
			byJob[s.Metric["job"]] = s.Float()
		}
		if err != nil || !(byJob["checkout"] > 0) || byJob["search"] != 0 {
			failures = append(failures, fmt.Sprintf("tenant-rpm rejection ratio with all jobs = %v (%v); want checkout's above 0 and search's 0, apart", got, err))
		}
		for job, positive := range map[string]bool{"checkout": true, "search": false} {
			got, err := p.Query(ctx, ratio(job))
			if err != nil || len(got) > 1 || positive && (len(got) == 0 || !(got[0].Float() > 0)) || !positive && len(got) == 1 && got[0].Float() != 0 {
				failures = append(failures, fmt.Sprintf("tenant-rpm rejection ratio of job %s = %v (%v); want it alone, positive %v", job, got, err, positive))
			}
		}
		return failures
	})
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("%d queries checked in %v", checked, time.Since(start).Round(time.Second))
}
