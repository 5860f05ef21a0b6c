package main

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestScrapesKeepPlanLimits: reading the operator listener (a Prometheus
// scrape of the metrics, the status page, the rollout report) between two
// requests of a pro-plan tenant leaves its limits alone: the second
// request's remaining figure is the first's less that request (or more,
// refilled), never the free plan's.
func TestScrapesKeepPlanLimits(t *testing.T) {
	s := startProxy(t)
	models := func() int64 {
		t.Helper()
		req, err := http.NewRequestWithContext(ctxT(t, 30*time.Second), http.MethodGet, s.URL+"/v1/models", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer sk-demo-acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/models as acme: status %d", resp.StatusCode)
		}
		n, err := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Remaining-Requests"), 10, 64)
		if err != nil {
			t.Fatalf("X-Ratelimit-Remaining-Requests = %q: %v", resp.Header.Get("X-Ratelimit-Remaining-Requests"), err)
		}
		return n
	}
	prev := models()
	if prev != 599 {
		t.Fatalf("acme's first request: X-Ratelimit-Remaining-Requests = %d; want 599 (pro: 600 a minute)", prev)
	}
	for _, path := range []string{s.file.Metrics.Path, "/status", "/status.json", "/debug/rollout"} {
		resp, err := http.Get(s.OpsURL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("operator GET %s: status %d, %d bytes; want 200 with a body", path, resp.StatusCode, len(body))
		}
		// The time since the last request refilled the bucket a
		// little; nothing drained it but this request.
		got := models()
		if got < prev-1 {
			t.Fatalf("after GET %s: X-Ratelimit-Remaining-Requests = %d; want at least %d: reading changed acme's limit", path, got, prev-1)
		}
		prev = got
	}
}
