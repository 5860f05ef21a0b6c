package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/dashboards"
	"github.com/sluicehq/sluice/internal/promtest"
)

// overviewVars substitutes the dashboards' template variables as Grafana
// would.
var overviewVars = strings.NewReplacer("$__rate_interval", "10s", "$__range", "5m", "$job", ".*", "$instance", ".*", "$policy", ".*")

// sickStorePanels are the Overview panels about a sick shared store:
// the demo keeps its limits in memory, whose calls never fail, so they
// have nothing to show.
var sickStorePanels = []string{"Store errors", "Fail-open and fail-closed decisions", "Releases retried"}

// demoTraffic sends the demo's kinds of traffic until stop is closed:
// the three demo tenants on the chat and Messages APIs, initech past its
// five requests a minute, globex's streams slow enough to wait in its
// concurrency queue, and now and then a provider 429.
func demoTraffic(t *testing.T, s *server, stop <-chan struct{}) {
	var wg sync.WaitGroup
	send := func(path, key, body string, hdr ...string) {
		req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	const (
		chat = `{"model":"gpt-4o-mini","max_tokens":40,"messages":[{"role":"user","content":"hello there"}]}`
		msg  = `{"model":"claude-sonnet-4-5","max_tokens":40,"messages":[{"role":"user","content":"hello there"}]}`
	)
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				switch {
				case w < 6: // six at once: globex's cap is four, the rest queue
					send("/v1/chat/completions", "sk-demo-globex", chat, "X-Sim-Latency", "300ms")
				case i%10 == 9:
					send("/v1/chat/completions", "sk-demo-acme", chat, "X-Sim-Fault", "429")
				case i%2 == 0:
					send("/v1/messages", "sk-demo-acme", msg)
				default:
					send("/v1/chat/completions", "sk-demo-initech", chat)
				}
			}
		})
	}
	wg.Wait()
}

// TestOverviewWithDefaultDemo runs the demo as `go run
// ./examples/llmproxy` does (the embedded default policy, the simulated
// upstream), sends it traffic, has a real Prometheus scrape its operator
// listener, and checks that every query of the Overview, LLM and
// Provider dashboards returns data, the budgets and the provider's
// included, but those of the panels about a sick store (the demo's store
// never fails). The
// budget panel needs a tenant past a warning threshold: globex's batch
// reserves $3 of its $5 month.
func TestOverviewWithDefaultDemo(t *testing.T) {
	start := time.Now()
	s := startProxy(t)
	if resp, b := createBatch(t, s, "sk-demo-globex", batchLines(6)); resp.StatusCode != http.StatusOK {
		t.Fatalf("a $3 batch: %d %s", resp.StatusCode, b)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { demoTraffic(t, s, stop); close(done) }()
	t.Cleanup(func() { close(stop); <-done })
	p := promtest.Start(t, promtest.Config{Targets: []string{strings.TrimPrefix(s.OpsURL, "http://")}})

	type check struct{ name, expr string }
	var checks []check
	for _, panel := range slices.Concat(dashboards.Overview().Panels, dashboards.LLM().Panels, dashboards.Provider().Panels) {
		if strings.Contains(strings.Join(sickStorePanels, "\n"), panel.Title) {
			continue
		}
		for _, tg := range panel.Targets {
			checks = append(checks, check{panel.Title + " / " + tg.RefID, overviewVars.Replace(tg.Expr)})
		}
	}
	// The series appear within a few scrapes, at the machine's pace.
	ctx := context.Background()
	failures := promtest.Rounds(t, func() (failures []string) {
		for _, c := range checks {
			got, err := p.Query(ctx, c.expr)
			data := false
			for _, x := range got {
				data = data || !math.IsNaN(x.Float())
			}
			if err != nil || !data {
				failures = append(failures, fmt.Sprintf("%s: no data (%v)\n  %s", c.name, err, c.expr))
			}
		}
		return failures
	})
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("%d Overview queries checked in %v", len(checks), time.Since(start).Round(time.Second))
}
