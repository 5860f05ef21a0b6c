package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// startTest starts the service on a loopback port with a fake clock.
func startTest(t *testing.T, o options) (*server, *admissiontest.Clock, *syncbuf.Buffer) {
	t.Helper()
	clock := admissiontest.NewClock(t0)
	logs := &syncbuf.Buffer{}
	o.addr, o.clock, o.logOutput = "127.0.0.1:0", clock, logs
	s, err := start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s, clock, logs
}

func newClient(t *testing.T) *http.Client {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: Burst}, Timeout: 10 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func do(t *testing.T, c *http.Client, method, url, key string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// decisions returns the admission_decisions_total series of policy,
// by decision, as scraped from url.
func decisions(t *testing.T, c *http.Client, url, policy string) map[string]int {
	t.Helper()
	resp, body := do(t, c, http.MethodGet, url, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %s; want 200", url, resp.Status)
	}
	out := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "admission_decisions_total{") || !strings.Contains(l, `policy="`+policy+`"`) {
			continue
		}
		_, rest, _ := strings.Cut(l, `decision="`)
		d, _, _ := strings.Cut(rest, `"`)
		n, err := strconv.Atoi(l[strings.LastIndexByte(l, ' ')+1:])
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		out[d] += n
	}
	return out
}

// rejectionsLogged counts the decision log's rejection records per tenant
// for policy, checking each is a complete JSON record.
func rejectionsLogged(t *testing.T, logs, policy string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec struct {
			Level, Msg, Policy, Decision, Reason, Tenant string
			RetryAfter                                   json.Number `json:"retry_after_s"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		if rec.Msg != "admission decision" || rec.Decision != "rejected" || rec.Policy != policy {
			continue
		}
		if rec.Level != "WARN" || rec.Reason != "rate" || rec.RetryAfter == "" {
			t.Errorf("rejection record %s: want level WARN, reason rate and a retry_after_s", l)
		}
		out[rec.Tenant]++
	}
	return out
}

// TestExercise runs the classic exercise on a fake clock over loopback:
// for ten seconds tenant A fires 50 claims at the start of every second
// and tenant B files one right after. With a bucket per tenant A gets its
// burst of 20, then what refills each second (5), and B is never
// throttled; with one bucket for everyone (global.yaml) A's bursts take
// everything and B gets 429 every second.
func TestExercise(t *testing.T) {
	const seconds = 10
	ones := func(n int) []int {
		s := make([]int, seconds)
		for i := range s {
			s[i] = n
		}
		return s
	}
	wantA := append([]int{20}, ones(5)[1:]...) // 20 + 9×5 = 65 of 500
	for _, tc := range []struct {
		name, config string
		wantB        []int
	}{
		{"per-tenant", "", ones(1)},
		{"global", "global.yaml", ones(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clock, logs := startTest(t, options{configPath: tc.config})
			// The counts follow from the file: a full bucket, then one
			// second of refill per burst.
			p := s.file.Config.Policies[0]
			if p.Name != "claims-create" || p.Burst != 20 || p.Limit != 5 || p.Per != time.Second {
				t.Fatalf("claims-create = %+v; want burst 20, 5 per 1s", p)
			}
			c := newClient(t)
			res, err := exercise(context.Background(), c, s.URL, seconds, func(context.Context) error {
				clock.Advance(time.Second)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("A admitted %d of %d %v; B admitted %d of %d %v", res.A.Admitted, res.A.Sent, res.A.PerSecond, res.B.Admitted, res.B.Sent, res.B.PerSecond)
			if !reflect.DeepEqual(res.A.PerSecond, wantA) {
				t.Errorf("A admitted per second = %v; want %v", res.A.PerSecond, wantA)
			}
			if !reflect.DeepEqual(res.B.PerSecond, tc.wantB) {
				t.Errorf("B admitted per second = %v; want %v", res.B.PerSecond, tc.wantB)
			}
			if res.A.Sent != seconds*Burst || res.A.Admitted != 65 || res.A.Rejected != 435 {
				t.Errorf("A = %d sent, %d admitted, %d rejected; want 500, 65, 435", res.A.Sent, res.A.Admitted, res.A.Rejected)
			}
			// The bucket refills one claim in 200 ms: Retry-After rounds up.
			if res.A.RetryAfter != "1" || !strings.HasPrefix(res.A.RateLimit, `"claims-create";r=0;`) {
				t.Errorf("A's first 429: Retry-After %q, RateLimit %q; want 1 and claims-create with r=0", res.A.RetryAfter, res.A.RateLimit)
			}

			// The metrics section: /metrics answers on the API listener and
			// counts every decision.
			if s.MetricsURL != s.URL+"/metrics" {
				t.Errorf("metrics at %q; want %q", s.MetricsURL, s.URL+"/metrics")
			}
			got := decisions(t, c, s.MetricsURL, "claims-create")
			want := map[string]int{"admitted": res.A.Admitted + res.B.Admitted, "rejected": res.A.Rejected + res.B.Rejected}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("admission_decisions_total{policy=claims-create} = %v; want %v", got, want)
			}

			// The logging section: rejections are logged (within the
			// decision log's own rate), B's only when B was refused.
			logged := rejectionsLogged(t, logs.String(), "claims-create")
			if logged["tenant-a"] == 0 || logged["tenant-a"] > res.A.Rejected {
				t.Errorf("rejections of tenant-a logged = %d; want between 1 and %d", logged["tenant-a"], res.A.Rejected)
			}
			if (logged["tenant-b"] > 0) != (res.B.Rejected > 0) {
				t.Errorf("rejections of tenant-b logged = %d with %d rejected; want some exactly when rejected", logged["tenant-b"], res.B.Rejected)
			}
		})
	}
}

// The read window admits 100 GETs in any minute per tenant; /healthz and
// /metrics are never limited.
func TestReadWindow(t *testing.T) {
	s, clock, _ := startTest(t, options{})
	c := newClient(t)
	admitted := 0
	for range 110 {
		resp, _ := do(t, c, http.MethodGet, s.URL+"/claims", KeyA)
		switch resp.StatusCode {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("GET /claims = %s", resp.Status)
		}
	}
	if admitted != 100 {
		t.Errorf("GETs admitted in one minute = %d; want 100", admitted)
	}
	if resp, _ := do(t, c, http.MethodGet, s.URL+"/claims", KeyB); resp.StatusCode != http.StatusOK {
		t.Errorf("tenant B's first GET = %s; want 200", resp.Status)
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		for range 3 {
			if resp, _ := do(t, c, http.MethodGet, s.URL+path, ""); resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s = %s; want 200", path, resp.Status)
			}
		}
	}
	// The window slides: a second past the minute, the first second's
	// share of the 100 has left it.
	clock.Advance(time.Minute + time.Second)
	if resp, _ := do(t, c, http.MethodGet, s.URL+"/claims", KeyA); resp.StatusCode != http.StatusOK {
		t.Errorf("GET 61 s later = %s; want 200", resp.Status)
	}
}

// Exports run two at a time per tenant with five more waiting; the next
// is refused at once, and another tenant's export is not held up.
func TestExportConcurrency(t *testing.T) {
	release := make(chan struct{})
	s, _, _ := startTest(t, options{exportHold: func(ctx context.Context) {
		select {
		case <-release:
		case <-ctx.Done():
		}
	}})
	c := newClient(t)
	type answer struct {
		tenant string
		code   int
	}
	answers := make(chan answer, 16)
	export := func(key, tenant string) {
		go func() {
			resp, _ := do(t, c, http.MethodGet, s.URL+"/claims/export", key)
			answers <- answer{tenant, resp.StatusCode}
		}()
	}
	waitFor := func(what string, cond func(admission.PolicyStats) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			for _, st := range s.ctl.Stats() {
				if st.Name == "claims-export" && cond(st) {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("claims-export never had %s: %+v", what, s.ctl.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
	for range 2 {
		export(KeyA, "tenant-a")
	}
	waitFor("2 in flight", func(st admission.PolicyStats) bool { return st.InFlight == 2 })
	for range 5 {
		export(KeyA, "tenant-a")
	}
	waitFor("5 queued", func(st admission.PolicyStats) bool { return st.Queued == 5 })
	resp, body := do(t, c, http.MethodGet, s.URL+"/claims/export", KeyA)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "urn:sluice:problem:queue-full") || resp.Header.Get("Retry-After") == "" {
		t.Errorf("8th export = %s %s (Retry-After %q); want 429 queue-full with Retry-After", resp.Status, body, resp.Header.Get("Retry-After"))
	}
	export(KeyB, "tenant-b")
	waitFor("3 in flight", func(st admission.PolicyStats) bool { return st.InFlight == 3 })
	close(release)
	got := map[string]int{}
	for range 8 {
		a := <-answers
		if a.code != http.StatusOK {
			t.Errorf("export of %s = %d; want 200", a.tenant, a.code)
		}
		got[a.tenant]++
	}
	if got["tenant-a"] != 7 || got["tenant-b"] != 1 {
		t.Errorf("exports answered = %v; want 7 of tenant-a and 1 of tenant-b", got)
	}
}

// Claims are filed and read back by their own tenant only; callers
// without a known key get 401.
func TestClaims(t *testing.T) {
	s, _, _ := startTest(t, options{})
	c := newClient(t)
	if ok, _, err := file(context.Background(), c, s.URL, KeyA, "P-1"); err != nil || !ok {
		t.Fatalf("file = %v, %v; want admitted", ok, err)
	}
	list := func(key string) []Claim {
		resp, body := do(t, c, http.MethodGet, s.URL+"/claims", key)
		var out struct{ Claims []Claim }
		if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
			t.Fatalf("GET /claims = %s %s", resp.Status, body)
		}
		return out.Claims
	}
	a := list(KeyA)
	if len(a) != 1 || a[0].PolicyNumber != "P-1" || a[0].AmountCents != 12000 || !a[0].Filed.Equal(t0) {
		t.Fatalf("tenant A's claims = %+v; want P-1 filed at %v", a, t0)
	}
	if b := list(KeyB); len(b) != 0 {
		t.Errorf("tenant B sees %+v; want none", b)
	}
	for _, tc := range []struct {
		key, path string
		want      int
	}{
		{KeyA, "/claims/" + a[0].ID, http.StatusOK},
		{KeyB, "/claims/" + a[0].ID, http.StatusNotFound},
		{"", "/claims", http.StatusUnauthorized},
		{"sk-wrong", "/claims", http.StatusUnauthorized},
	} {
		if resp, body := do(t, c, http.MethodGet, s.URL+tc.path, tc.key); resp.StatusCode != tc.want {
			t.Errorf("GET %s with key %q = %s %s; want %d", tc.path, tc.key, resp.Status, body, tc.want)
		}
	}
	resp, body := func() (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/claims", strings.NewReader(`{"policy_number":"P-2","amount_cents":-5}`))
		req.Header.Set("Authorization", "Bearer "+KeyA)
		r, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r, string(b)
	}()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("negative amount = %s %s; want 400", resp.Status, body)
	}
}

// global.yaml is policy.yaml with one bucket for every tenant: nothing
// else differs, so the exercise compares exactly that.
func TestPolicyFilesDifferOnlyInTheKey(t *testing.T) {
	per, err := config.Parse("policy.yaml", defaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	global, err := config.Load("global.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(global.Config.Policies[0].Key); got != "[]" && got != "[global]" {
		t.Fatalf("global.yaml claims-create key = %s; want global", got)
	}
	global.Config.Policies[0].Key = per.Config.Policies[0].Key
	global.Source = per.Source
	global.Policies[0].Description = per.Policies[0].Description
	if !reflect.DeepEqual(per, global) {
		t.Errorf("policy.yaml and global.yaml differ beyond claims-create's key:\n%+v\n%+v", per, global)
	}
}

// The -exercise mode runs against a real server in real time; one second
// needs no waiting. Its A counts depend on how long the burst takes, its
// B count and its report's shape do not.
func TestExerciseCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-exercise", "-seconds", "1"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"second  A filed  A admitted  B filed  B admitted\n",
		"tenant A: ", " rejected with 429; the first had Retry-After: 1, RateLimit: \"claims-create\";r=0;",
		"tenant B: never throttled\n",
		`admission_decisions_total{decision="admitted",mode="enforce",policy="claims-create",reason="none"} `,
		`admission_decisions_total{decision="rejected",mode="enforce",policy="claims-create",reason="rate"} `,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "): 0 records") {
		t.Errorf("no decision records counted:\n%s", out.String())
	}
	for _, args := range [][]string{{"-seconds", "0"}, {"-seconds", "61"}, {"extra"}} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("run %q: no error", args)
		}
	}
}

// The metrics section decides where /metrics is answered: on the API
// listener ahead of the limits, on a listener of its own, or nowhere.
func TestMetricsSection(t *testing.T) {
	for _, tc := range []struct {
		name, section string
		separate      bool // served on a listener of its own
		apiMetrics    int  // status of GET /metrics on the API listener
	}{
		{"api listener", "metrics:\n  enabled: true\n  path: /metrics\n", false, http.StatusOK},
		{"own listener", "metrics:\n  listen: 127.0.0.1:0\n  path: /metrics\n", true, http.StatusUnauthorized},
		{"disabled", "metrics:\n  enabled: false\n", false, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := string(defaultPolicy)
			i, j := strings.Index(text, "metrics:\n"), strings.Index(text, "logging:\n")
			path := filepath.Join(t.TempDir(), "policy.yaml")
			if err := os.WriteFile(path, []byte(text[:i]+tc.section+"\n"+text[j:]), 0o600); err != nil {
				t.Fatal(err)
			}
			s, _, _ := startTest(t, options{configPath: path})
			c := newClient(t)
			// The API's /metrics is an ordinary limited route without a
			// key unless the section puts the scrape there.
			if resp, _ := do(t, c, http.MethodGet, s.URL+"/metrics", ""); resp.StatusCode != tc.apiMetrics {
				t.Errorf("GET %s/metrics = %s; want %d", s.URL, resp.Status, tc.apiMetrics)
			}
			switch {
			case tc.name == "disabled":
				if s.MetricsURL != "" {
					t.Errorf("metrics at %q; want none", s.MetricsURL)
				}
			case tc.separate == strings.HasPrefix(s.MetricsURL, s.URL):
				t.Errorf("metrics at %q with the API at %q; want a listener of its own: %v", s.MetricsURL, s.URL, tc.separate)
			default:
				if _, _, err := file(context.Background(), c, s.URL, KeyA, "P-1"); err != nil {
					t.Fatal(err)
				}
				if got := decisions(t, c, s.MetricsURL, "claims-create"); got["admitted"] != 1 {
					t.Errorf("decisions at %s = %v; want 1 admitted", s.MetricsURL, got)
				}
			}
		})
	}
}
