package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/browsertest"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/replay"
	"github.com/sluicehq/sluice/shadow/status"
)

// whatifPolicy: an enforced request rate the traffic below exceeds for
// tenant a, and a shadow token rate that would refuse some of it.
const whatifPolicy = `  - {name: rpm, key: [tenant], algorithm: fixed_window, limit: 5, per: 1h}
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 100, per: 1h, mode: shadow}
`

// whatifTraffic sends 8 chat requests for tenant a and 3 for tenant b,
// one after another, and returns the statuses.
func whatifTraffic(t *testing.T, s *server) (ok, refused int) {
	t.Helper()
	body := `{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":"hello there"}]}`
	for _, tenant := range []string{"a", "a", "a", "b", "a", "a", "b", "a", "a", "b", "a"} {
		resp, b := post(t, s, "/v1/chat/completions", testKey(tenant), body)
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("tenant %s: %d %s", tenant, resp.StatusCode, b)
		}
	}
	return ok, refused
}

// TestRequestLogReplaysLiveTraffic: with --request-log the gateway writes
// every decided request, admitted or refused, and replaying that log
// through the same policies gives the live figures back, exactly (the
// requests are sequential, so no timing tolerance is needed).
func TestRequestLogReplaysLiveTraffic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	s := startProxy(t, withPolicy(t, whatifPolicy, []string{"a", "b"}, ""), func(o *options) { o.requestLog = path })
	ok, refused := whatifTraffic(t, s)
	if ok != 8 || refused != 3 {
		t.Fatalf("live: %d admitted, %d refused; want 8 and 3", ok, refused)
	}
	// A request is written when it settles, after its answer.
	eventually(t, 5*time.Second, "11 requests logged", func() bool { return s.reqLog.Written() == 11 })
	if n := scrape(t, s, "llmproxy_request_log_records_total", "outcome", "written"); n != 11 {
		t.Errorf("llmproxy_request_log_records_total{outcome=written} = %v; want 11", n)
	}
	if err := s.reqLog.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{testKey("a"), testKey("b"), "hello there"} {
		if strings.Contains(string(data), secret) {
			t.Fatalf("the request log holds %q:\n%s", secret, data)
		}
	}
	rep, err := replay.Run(context.Background(), strings.NewReader(string(data)), replay.Config{Reorder: time.Minute},
		replay.Candidate{Name: "live", Config: s.file.Config})
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Candidates[0]
	if c.Requests != 11 || c.Admitted != 8 || c.Rejected != 3 {
		t.Errorf("replay: %d requests, %d admitted, %d rejected; want 11, 8, 3 as live", c.Requests, c.Admitted, c.Rejected)
	}
	live := scrape(t, s, "admission_decisions_total", "policy", "tpm", "decision", "would_reject")
	for _, p := range c.Policies {
		if p.Policy == "tpm" && float64(p.WouldReject) != live {
			t.Errorf("replay: tpm would reject %d; live it would-rejected %v", p.WouldReject, live)
		}
		if p.Policy == "rpm" && (p.Admitted != 8 || p.Rejected != 3) {
			t.Errorf("replay: rpm admitted %d, rejected %d; want 8 and 3", p.Admitted, p.Rejected)
		}
	}
	if live == 0 {
		t.Error("live: the shadow tpm would-rejected nothing; the traffic should exceed it")
	}
}

// TestStatusPageOnOperatorListener: /status and /status.json are served
// on the operator listener only, with the controller's figures and the
// refused tenants of the live traffic.
func TestStatusPageOnOperatorListener(t *testing.T) {
	s := startProxy(t, withPolicy(t, whatifPolicy, []string{"a", "b"}, ""))
	if ok, refused := whatifTraffic(t, s); ok != 8 || refused != 3 {
		t.Fatalf("live: %d admitted, %d refused; want 8 and 3", ok, refused)
	}
	get := func(url string) (*http.Response, []byte) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	if resp, _ := get(s.URL + "/status"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("API listener GET /status: %d; want 404", resp.StatusCode)
	}
	resp, b := get(s.OpsURL + "/status.json")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /status.json: %d %s", resp.StatusCode, b)
	}
	var st status.View
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("status.json: %v\n%s", err, b)
	}
	stats := s.ctl.Stats()
	got := map[string]status.Policy{}
	for _, p := range st.Policies {
		got[p.Policy] = p
	}
	for _, ps := range stats {
		p, found := got[ps.Name]
		if !found || p.Limit != ps.Limit || p.Mode != ps.Mode || p.Partitions != ps.Partitions {
			t.Errorf("status page %s = %+v; want the controller's %+v", ps.Name, p, ps)
		}
	}
	if rpm := got["rpm"]; rpm.Requests != 11 || rpm.Refused != 3 || len(rpm.Tenants) == 0 || rpm.Tenants[0].Tenant != "a" {
		t.Errorf("status page rpm: %d requests, %d refused, tenants %+v; want 11, 3, a first", rpm.Requests, rpm.Refused, rpm.Tenants)
	}
	if resp, b := get(s.OpsURL + "/status"); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "rpm") {
		t.Errorf("GET /status: %d, want an HTML page with the policies and their charts:\n%.400s", resp.StatusCode, b)
	}
}

// TestGatewayStatusPageInBrowser loads the status page of a running
// gateway in headless Chromium: its script ran, the shadow policy's chart
// has its points, and the console is quiet.
func TestGatewayStatusPageInBrowser(t *testing.T) {
	bin := browsertest.Chromium(t)
	s := startProxy(t, withPolicy(t, whatifPolicy, []string{"a", "b"}, ""))
	whatifTraffic(t, s)
	dom, log := browsertest.Headless(t, bin, s.OpsURL+"/status", "--dump-dom")
	if m := browsertest.Console(log); len(m) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(m, "\n"))
	}
	want := fmt.Sprintf(`<body data-rendered="1 charts, %d points">`, shadow.DefaultBuckets)
	if !strings.Contains(dom, want) {
		t.Errorf("the page did not render one chart (the shadow tpm) of %d points; want %s in:\n%.1500s", shadow.DefaultBuckets, want, dom)
	}
	for _, policy := range []string{"rpm", "tpm"} {
		if !strings.Contains(dom, policy) {
			t.Errorf("the rendered page does not name policy %s", policy)
		}
	}
}

// whatIfCall is one request of TestWhatIfEqualsReality's traffic; a
// chunked one is sent without a Content-Length.
type whatIfCall struct {
	method, path, key, body string
	chunked                 bool
}

// whatIfMaxBody is the body cap of TestWhatIfEqualsReality's policy file.
const whatIfMaxBody = 128 << 10

// logged reports whether the gateway logs the call: every call but one
// whose Content-Length is over the cap, refused before any policy.
func (c whatIfCall) logged() bool { return c.chunked || len(c.body) <= whatIfMaxBody }

// whatIfTraffic is the traffic of TestWhatIfEqualsReality on the demo
// tenants, round after round: acme (pro) on every kind of route;
// globex asking for more output than its plan allows on the Messages API
// and sending prompts that exhaust its tokens per minute and make the
// shadow candidate refuse; initech past its five requests a minute.
// Mixed in, bodies the gateway refuses after the request rate admitted
// them: malformed JSON (400), a field of the wrong type (400), a body
// over the cap sent without a length (413); and one over the cap by its
// Content-Length (413), which no policy sees.
func whatIfTraffic(round int) []whatIfCall {
	const (
		chat   = `{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":"hello there"}]}`
		msg    = `{"model":"claude-sonnet-4-5","max_tokens":%d,"messages":[{"role":"user","content":"hello there"}]}`
		count  = `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hello there"}]}`
		embed  = `{"model":"text-embedding-3-small","input":%q}`
		acme   = "sk-demo-acme"
		globex = "sk-demo-globex"
		inite  = "sk-demo-initech"
	)
	huge := fmt.Sprintf(embed, strings.Repeat("x", whatIfMaxBody))
	calls := []whatIfCall{
		{"POST", "/v1/chat/completions", acme, chat, false},
		{"POST", "/v1/messages", acme, fmt.Sprintf(msg, 32), false},
		{"GET", "/v1/models", acme, "", false},
		{"POST", "/v1/messages/count_tokens", acme, count, false},
		{"POST", "/v1/embeddings", acme, fmt.Sprintf(embed, "hello"), false},
		{"POST", "/v1/chat/completions", acme, `{"model":"gpt-4o-mini","messages":[`, false},
		{"POST", "/v1/chat/completions", globex, chat, false},
		{"POST", "/v1/messages", globex, fmt.Sprintf(msg, 20_000), false},
		{"POST", "/v1/messages/count_tokens", globex, count, false},
		{"POST", "/v1/embeddings", globex, `{"model":"text-embedding-3-small","input":{"a":1}}`, false},
		{"POST", "/v1/chat/completions", inite, chat, false},
		{"GET", "/v1/models/gpt-4o-mini", inite, "", false},
		{"POST", "/v1/messages", inite, `{"model":"claude-sonnet-4-5","max_tokens":`, false},
	}
	switch round % 3 {
	case 0:
		calls = append(calls, whatIfCall{"POST", "/v1/embeddings", globex, fmt.Sprintf(embed, strings.Repeat("hello ", 15_000)), false})
	case 1:
		calls = append(calls, whatIfCall{"POST", "/v1/chat/completions", acme, huge, true})
	case 2:
		calls = append(calls, whatIfCall{"POST", "/v1/embeddings", globex, huge, false})
	}
	return calls
}

// TestWhatIfEqualsReality: traffic on every kind of route from the demo
// tenants, enough to be refused by several policies and with bodies the
// gateway refuses mixed in, goes through the gateway with the default
// policy file (its body cap lowered to 128 KiB so that oversized bodies
// stay small); its request log holds every decided request, a refused
// body as a begin_only record, and replaying it through the same file
// gives each policy's live admitted, rejected and would-reject counts
// (the gateway's metrics, less the admissions rolled back when a later
// policy refused) back within 1%. The requests go one after another on a
// fake clock that moves 250 ms between them, so the replay sees them in
// the order and at the instants the gateway decided them.
func TestWhatIfEqualsReality(t *testing.T) {
	clk := demoClock()
	dir := t.TempDir()
	path, policy := filepath.Join(dir, "requests.jsonl"), filepath.Join(dir, "default.yaml")
	file := strings.Replace(string(defaultPolicy), "max_body: 8MiB", fmt.Sprintf("max_body: %dKiB", whatIfMaxBody>>10), 1)
	if file == string(defaultPolicy) {
		t.Fatal("default.yaml has no http.max_body of 8MiB to lower")
	}
	if err := os.WriteFile(policy, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startProxy(t, func(o *options) { o.clock, o.requestLog, o.configPath = clk, path, policy })
	statuses := map[int]int{}
	sent, logged := 0, 0
	for round := range 12 {
		for _, c := range whatIfTraffic(round) {
			var body io.Reader = strings.NewReader(c.body)
			if c.chunked {
				body = io.MultiReader(body) // no length known: sent chunked
			}
			req, err := http.NewRequestWithContext(ctxT(t, 30*time.Second), c.method, s.URL+c.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+c.key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[resp.StatusCode]++
			sent++
			if c.logged() {
				logged++
			}
			// The next request is decided after this one is in the log.
			eventually(t, 30*time.Second, fmt.Sprintf("request %d (%s %s, %d) logged", sent, c.method, c.path, resp.StatusCode), func() bool { return s.reqLog.Written() == uint64(logged) })
			clk.Advance(250 * time.Millisecond)
		}
	}
	// A refused body (400, 413) was admitted by the request rate: its
	// policies count it admitted, live as in the replay; the body refused
	// by its length is the one request no policy decided.
	bodies := statuses[http.StatusBadRequest] + statuses[http.StatusRequestEntityTooLarge] - (sent - logged)
	if statuses[http.StatusOK] == 0 || statuses[http.StatusTooManyRequests] == 0 || statuses[http.StatusBadRequest] == 0 || statuses[http.StatusRequestEntityTooLarge] <= sent-logged ||
		statuses[http.StatusOK]+statuses[http.StatusTooManyRequests]+bodies != logged {
		t.Fatalf("live statuses %v of %d requests, %d logged; want admitted, refused and refused bodies of both kinds and nothing else", statuses, sent, logged)
	}
	if err := s.reqLog.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Each refused body is one begin_only record, and no body is logged.
	if n := strings.Count(string(data), `"begin_only":true`); n != bodies {
		t.Errorf("the log holds %d begin_only records; want one per refused body, %d", n, bodies)
	}
	for _, body := range []string{"hello there", "xxxxxxxx", `"messages":[`, `"input":{`, `"max_tokens":`} {
		if strings.Contains(string(data), body) {
			t.Errorf("the request log holds a body (%q)", body)
		}
	}
	rep, err := replay.Run(context.Background(), strings.NewReader(string(data)), replay.Config{}, replay.Candidate{Name: "default.yaml", Config: s.file.Config})
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Candidates[0]
	if c.Requests != int64(logged) || c.Admitted != int64(statuses[http.StatusOK]+bodies) || c.Rejected != int64(statuses[http.StatusTooManyRequests]) {
		t.Errorf("replay: %d requests, %d admitted, %d rejected; live %d logged, %d refused bodies, statuses %v", c.Requests, c.Admitted, c.Rejected, logged, bodies, statuses)
	}
	within := func(what string, replayed int64, live float64) {
		t.Helper()
		if d := math.Abs(float64(replayed) - live); d > live/100 {
			t.Errorf("%s: replay %d; live %v", what, replayed, live)
		}
	}
	var rejected, wouldReject int64
	for _, p := range c.Policies {
		live := func(decision string) float64 {
			return scrape(t, s, "admission_decisions_total", "policy", p.Policy, "decision", decision)
		}
		within(p.Policy+" admitted", p.Admitted, live("admitted")-scrape(t, s, "admission_rollbacks_total", "policy", p.Policy))
		within(p.Policy+" rejected", p.Rejected, live("rejected"))
		within(p.Policy+" would reject", p.WouldReject, live("would_reject"))
		rejected += p.Rejected
		wouldReject += p.WouldReject
		t.Logf("%-30s admitted %4d rejected %4d would reject %4d", p.Policy, p.Admitted, p.Rejected, p.WouldReject)
	}
	if rejected == 0 || wouldReject == 0 {
		t.Errorf("the traffic met %d rejections and %d would-rejects; want both", rejected, wouldReject)
	}
}
