package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/weights"
)

const keyA = "sk-embed-a"

// embedded is a gateway inside a fresh echo server of the test's own, as a
// team embedding the package builds it, with the simulated upstream.
type embedded struct {
	URL string
	gw  *gateway.Gateway
}

// embed parses policy, adds tenant a with keyA, and serves the gateway on
// loopback with the controller on a fake clock; each of cfgs, when
// given, sets the gateway's Config further.
func embed(t *testing.T, policy string, cfgs ...func(*gateway.Config)) *embedded {
	t.Helper()
	f, err := config.Parse("embed.yaml", []byte(policy+"tenants:\n  a: {api_keys: ["+apikey.Sum(keyA).String()+"]}\nidentity: {anonymous: deny}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config, admission.WithClock(admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(upstream.New(upstream.Config{OutputTokens: 5}))
	t.Cleanup(up.Close)
	cfg := gateway.Config{Upstream: up.URL + "/v1"}
	for _, set := range cfgs {
		set(&cfg)
	}
	gw, err := gateway.New(ctl, est, f, cfg, gateway.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	gw.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &embedded{URL: srv.URL, gw: gw}
}

func (s *embedded) post(t *testing.T, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	return roundTrip(t, req)
}

// roundTrip sends req and returns the answer with its whole body.
func roundTrip(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
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

const chat = `{"model":"gpt-4o-mini","max_tokens":100,"messages":[{"role":"user","content":"Hello there"}]}`

// The rejection of an embedded gateway is llmproxy's: OpenAI's error
// shape, the retry hints and the limit headers.
func TestEmbeddedRejection(t *testing.T) {
	s := embed(t, `
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 2, per: 1m}
`)
	for i, want := range []int{200, 200, 429} {
		resp, b := s.post(t, keyA, chat)
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d; want %d: %s", i, resp.StatusCode, want, b)
		}
		for _, h := range []string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests", "RateLimit-Policy", "RateLimit"} {
			if resp.Header.Get(h) == "" {
				t.Errorf("request %d: no %s header", i, h)
			}
		}
		if want != 429 {
			continue
		}
		var e struct {
			Error struct {
				Message, Type string
				Code          *string
			}
		}
		if err := json.Unmarshal(b, &e); err != nil || e.Error.Type != "requests" || e.Error.Code == nil || *e.Error.Code != "rate_limit_exceeded" || e.Error.Message == "" {
			t.Errorf("429 body = %s (%v); want an OpenAI error of type requests, code rate_limit_exceeded", b, err)
		}
		if got := resp.Header.Get("Content-Type"); got != "application/json" {
			t.Errorf("429 Content-Type = %q; want application/json", got)
		}
		// One request per 30s refills: the wait is 30s, within the minute
		// a client is expected to wait.
		if got := resp.Header.Get("Retry-After"); got != "30" {
			t.Errorf("Retry-After = %q; want 30", got)
		}
		if got := resp.Header.Get("Retry-After-Ms"); got != "30000" {
			t.Errorf("Retry-After-Ms = %q; want 30000", got)
		}
		if got := resp.Header.Get("X-Should-Retry"); got != "true" {
			t.Errorf("X-Should-Retry = %q; want true", got)
		}
	}
}

const tpm = `
policies:
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 100k, per: 1m}
`

// remainingTokens returns the x-ratelimit-remaining-tokens of resp.
func remainingTokens(t *testing.T, resp *http.Response) int64 {
	t.Helper()
	n, err := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Remaining-Tokens"), 10, 64)
	if err != nil {
		t.Fatalf("x-ratelimit-remaining-tokens: %v", err)
	}
	return n
}

// A request without max_tokens reserves its model's default output from
// the policy file's models section, else Config.DefaultMaxTokens (the
// --default-max-tokens flag), else the estimator's 4,096, per choice; a
// request with max_tokens reserves it whatever the defaults.
func TestDefaultOutputReservation(t *testing.T) {
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		t.Fatal(err)
	}
	const noLimit = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello there"}]}`
	e, err := est.EstimateEndpoint(weights.EndpointChatCompletions, []byte(noLimit))
	if err != nil {
		t.Fatal(err)
	}
	prompt := e.InputTokens
	for _, tc := range []struct {
		name     string
		models   string
		flag     int64
		body     string
		reserved int64
	}{
		{"the file's entry", "models:\n  gpt-4o: {default_max_tokens: 99}\n  GPT-4o-mini: {default_max_tokens: 256}\n", 300, noLimit, prompt + 256},
		{"the file's entry, two choices", "models:\n  gpt-4o-mini: {default_max_tokens: 256}\n", 0, strings.Replace(noLimit, `{"model"`, `{"n":2,"model"`, 1), prompt + 512},
		{"a shorter prefix", "models:\n  gpt-4: {default_max_tokens: 128}\n", 300, noLimit, prompt + 128},
		{"the flag for a model the file does not name", "models:\n  gpt-4.1: {default_max_tokens: 99}\n", 300, noLimit, prompt + 300},
		{"the estimator's default", "", 0, noLimit, prompt + weights.DefaultMaxOutputTokens},
		{"max_tokens whatever the defaults", "models:\n  gpt-4o-mini: {default_max_tokens: 256}\n", 300, chat, prompt + 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := embed(t, tc.models+tpm, func(c *gateway.Config) { c.DefaultMaxTokens = tc.flag })
			resp, b := s.post(t, keyA, tc.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if got := 100_000 - remainingTokens(t, resp); got != tc.reserved {
				t.Errorf("reserved %d tokens; want %d", got, tc.reserved)
			}
		})
	}
}

// A request reserves its estimate and is settled at the usage the
// upstream reports: the next, equal request finds the partition short of
// exactly that usage (the fake clock refills nothing).
func TestEmbeddedSettlesUsage(t *testing.T) {
	s := embed(t, tpm)
	resp, b := s.post(t, keyA, chat)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out struct {
		Usage struct {
			Total int64 `json:"total_tokens"`
		}
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Usage.Total == 0 {
		t.Fatalf("body %s: no usage (%v)", b, err)
	}
	first := remainingTokens(t, resp)
	resp, _ = s.post(t, keyA, chat)
	if got := first - remainingTokens(t, resp); got != out.Usage.Total {
		t.Errorf("the first request took %d tokens once settled; want its usage, %d", got, out.Usage.Total)
	}
}

// A stream passes through as server-sent events to its [DONE], with the
// usage the gateway asked for on the client's behalf stripped, and is
// settled at that usage.
func TestEmbeddedStream(t *testing.T) {
	s := embed(t, tpm)
	stream := strings.Replace(chat, `"max_tokens":100,`, `"max_tokens":100,"stream":true,`, 1)
	resp, b := s.post(t, keyA, stream)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var events []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	if len(events) < 2 || events[len(events)-1] != "[DONE]" || strings.Contains(string(b), `"usage":{`) {
		t.Fatalf("stream events %q; want chunks without usage, then [DONE]", events)
	}
	first := remainingTokens(t, resp)
	resp, _ = s.post(t, keyA, chat)
	// The simulator's usage: the prompt as it counts it and 5 tokens out.
	if got := first - remainingTokens(t, resp); got <= 5 || got >= 100 {
		t.Errorf("the stream took %d tokens once settled; want its usage (prompt + 5), not its reservation", got)
	}
}

// movingKey returns a policy file in which keyA belongs to tenant a (flip
// false) or b, the per-tenant rpm limit telling the four pairs of tenant
// and file apart: a decision by the policies of the file that identified
// the caller has limit 1M (a in the first file) or 2M (b in the second);
// 3M or 4M is a request decided by one file's policies for the tenant the
// other file gives the key.
func movingKey(t *testing.T, flip bool) *config.File {
	t.Helper()
	owner, la, lb := "a", 1_000_000, 4_000_000
	if flip {
		owner, la, lb = "b", 3_000_000, 2_000_000
	}
	other := map[string]string{"a": "b", "b": "a"}[owner]
	f, err := config.Parse("moving.yaml", fmt.Appendf(nil, `
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1, per: 1s}
plans:
  pa: {rpm: {limit: %d}}
  pb: {rpm: {limit: %d}}
tenants:
  %s: {plan: p%s, api_keys: [%s]}
  %s: {plan: p%s}
identity: {anonymous: deny}
`, la, lb, owner, owner, apikey.Sum(keyA), other, other))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestEmbeddedApplyIsOneStep reloads, as fast as it can, two files
// between which a key moves to another tenant while clients send
// requests: every answer carries the limit of the file that identified
// its caller.
func TestEmbeddedApplyIsOneStep(t *testing.T) {
	s := embed(t, "policies:\n  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1, per: 1s}\n")
	files := []*config.File{movingKey(t, false), movingKey(t, true)}
	// The first file before any request: no partition ever has the
	// embedded file's limit of 1 (the fake clock would never refill it).
	if err := s.gw.Apply(files[0]); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var reloads atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; !stop.Load(); i++ {
			if err := s.gw.Apply(files[i%2]); err != nil {
				t.Error(err)
				return
			}
			reloads.Add(1)
		}
	}()
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 150 {
				resp, _ := s.post(t, keyA, chat)
				mu.Lock()
				seen[strconv.Itoa(resp.StatusCode)+" "+resp.Header.Get("X-Ratelimit-Limit-Requests")]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	<-done
	for k, n := range seen {
		if k != "200 1000000" && k != "200 2000000" {
			t.Errorf("%d answers %q; want 200 with limit 1000000 or 2000000 only (the policies and the identity of one file)", n, k)
		}
	}
	if seen["200 1000000"] == 0 || seen["200 2000000"] == 0 {
		t.Errorf("answers %v over %d reloads; want both files to decide requests", seen, reloads.Load())
	}
	t.Logf("answers %v over %d reloads", seen, reloads.Load())
}
