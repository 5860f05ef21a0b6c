package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/shadow/requestlog"
	"github.com/sluicehq/sluice/weights"
)

const batchKeyB = "sk-batch-b"

// batchStack is a gateway serving the Batch API in front of the
// simulator, both on one fake clock (2026-12-01 09:00 UTC), with tenants
// a (keyA) and b (batchKeyB).
type batchStack struct {
	URL string
	srv *httptest.Server // the gateway's
	gw  *gateway.Gateway
	sim *upstream.Server
	up  *httptest.Server
	clk *admissiontest.Clock
	ctl *admission.Controller
	est *weights.Estimator
}

// batchPolicy reserves batches on a daily token quota and a monthly
// spend quota per tenant.
const batchPolicy = `
policies:
  - {name: batch-tokens, key: [tenant], unit: tokens, algorithm: quota, period: day, limit: 100k, match: {operations: ["POST /v1/batches"]}}
  - {name: batch-spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 1M, match: {operations: ["POST /v1/batches"]}}
`

// gatewaySetup is what batchGateway gives gateway.New: the controller,
// estimator and file, the Config and the options, for a test to tune.
type gatewaySetup struct {
	gateway.Config
	ctl  *admission.Controller
	est  *weights.Estimator
	file *config.File
	opts []gateway.Option
}

func batchGateway(t *testing.T, policy string, tune func(*gatewaySetup, *upstream.Config)) *batchStack {
	t.Helper()
	f, err := config.Parse("batch.yaml", []byte(policy+"tenants:\n  a: {api_keys: ["+apikey.Sum(keyA).String()+"]}\n  b: {api_keys: ["+apikey.Sum(batchKeyB).String()+"]}\nidentity: {anonymous: deny}\n"))
	if err != nil {
		t.Fatal(err)
	}
	clk := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	ctl, err := admission.New(f.Config, admission.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		t.Fatal(err)
	}
	sc := upstream.Config{OutputTokens: 5, BatchDelay: time.Hour}
	gc := gatewaySetup{Config: gateway.Config{
		UpstreamKey: "sk-upstream",
		Batches:     gateway.BatchAPI{PollInterval: time.Minute, MaxHold: 30 * time.Hour},
	}, ctl: ctl, est: est, file: f, opts: []gateway.Option{gateway.WithClock(clk), gateway.WithLogger(slog.New(slog.DiscardHandler))}}
	if tune != nil {
		tune(&gc, &sc)
	}
	sim := upstream.New(sc, upstream.WithClock(clk))
	up := httptest.NewServer(sim)
	t.Cleanup(up.Close)
	gc.Upstream = up.URL + "/v1"
	gc.Anthropic.Upstream = up.URL + "/v1" // the simulator serves Anthropic's API too
	gc.Azure.Upstream = up.URL             // the simulator serves Azure OpenAI's paths too
	gw, err := gateway.New(gc.ctl, gc.est, gc.file, gc.Config, gc.opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	e := echo.New()
	gw.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &batchStack{URL: srv.URL, srv: srv, gw: gw, sim: sim, up: up, clk: clk, ctl: ctl, est: est}
}

func (s *batchStack) do(t *testing.T, req *http.Request, key string) (*http.Response, []byte) {
	t.Helper()
	req.Header.Set("Authorization", "Bearer "+key)
	return roundTrip(t, req)
}

// upload sends jsonl as a batch input file.
func (s *batchStack) upload(t *testing.T, key, jsonl string) (*http.Response, []byte) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "input.jsonl")
	io.WriteString(fw, jsonl)
	mw.Close()
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/files", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return s.do(t, req, key)
}

// uploaded uploads jsonl and returns the file id.
func (s *batchStack) uploaded(t *testing.T, key, jsonl string) string {
	t.Helper()
	resp, b := s.upload(t, key, jsonl)
	var f struct{ ID string }
	if resp.StatusCode != 200 || json.Unmarshal(b, &f) != nil || f.ID == "" {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	return f.ID
}

func (s *batchStack) create(t *testing.T, key, fileID string, md map[string]string) (*http.Response, []byte) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"input_file_id": fileID, "endpoint": "/v1/chat/completions", "completion_window": "24h", "metadata": md})
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/batches", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	return s.do(t, req, key)
}

// created creates a batch and returns its id.
func (s *batchStack) created(t *testing.T, key, fileID string, md map[string]string) string {
	t.Helper()
	resp, b := s.create(t, key, fileID, md)
	var o struct{ ID, Status string }
	if resp.StatusCode != 200 || json.Unmarshal(b, &o) != nil || o.ID == "" {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	return o.ID
}

// batch retrieves (or with cancel, cancels) batch id and returns its
// status.
func (s *batchStack) batch(t *testing.T, key, id string, cancel bool) (int, string) {
	t.Helper()
	method, path := http.MethodGet, "/v1/batches/"+id
	if cancel {
		method, path = http.MethodPost, path+"/cancel"
	}
	req, _ := http.NewRequest(method, s.URL+path, nil)
	resp, b := s.do(t, req, key)
	var o struct{ Status string }
	json.Unmarshal(b, &o)
	return resp.StatusCode, o.Status
}

// remaining returns what tenant has left of the batch quotas: tokens
// today and micro-dollars this month.
func (s *batchStack) remaining(t *testing.T, tenant string) (tokens, cost int64) {
	t.Helper()
	return s.quotasLeft(t, tenant, "POST /v1/batches", "gpt-4o-mini")
}

// quotasLeft returns what tenant has left of the batch-tokens and
// batch-spend quotas for a request of operation op on model.
func (s *batchStack) quotasLeft(t *testing.T, tenant, op, model string) (tokens, cost int64) {
	t.Helper()
	tk, err := s.ctl.TryAdmit(context.Background(), admission.Request{Tenant: tenant, Operation: op, Model: model})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Done()
	for _, st := range tk.Statuses(nil) {
		switch st.Policy {
		case "batch-tokens":
			tokens = st.Remaining
		case "batch-spend":
			cost = st.Remaining
		}
	}
	return tokens, cost
}

// chatLine is one request of a batch input file.
func chatLine(id, text string, maxTokens int) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":%d,"messages":[{"role":"user","content":%q}]}}`, id, maxTokens, text)
}

var batchFile = strings.Join([]string{
	chatLine("r1", "Summarise the plot of Hamlet in one line.", 100),
	chatLine("r2", "Name three prime numbers above one hundred.", 50),
	chatLine("r3", "Translate 'good morning' into French, German and Italian.", 150),
}, "\n") + "\n"

// reservation is what batchFile reserves: the sum of the estimates of
// its lines' bodies sent one by one, and their cost at gpt-4o-mini's
// batch price.
func (s *batchStack) reservation(t *testing.T) (in, out, cost int64) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(batchFile), "\n") {
		var v struct{ Body json.RawMessage }
		json.Unmarshal([]byte(l), &v)
		e, err := s.est.EstimateEndpoint(weights.EndpointChatCompletions, v.Body)
		if err != nil {
			t.Fatal(err)
		}
		in, out = in+e.InputTokens, out+e.OutputTokens
	}
	return in, out, weights.DefaultPrices()["gpt-4o-mini"].Batch().EstimateMicros(in, out)
}

// batchCost is the cost of usage at gpt-4o-mini's batch price.
func batchCost(in, out, cached int64) int64 {
	return weights.DefaultPrices()["gpt-4o-mini"].Batch().CostMicros(weights.Usage{InputTokens: in, OutputTokens: out, CachedInputTokens: cached})
}

// TestBatchLifecycle: a batch reserves its input file's tokens and cost
// when created, and its reservation ends with the batch: settled at the
// usage of a completed batch, refunded for a failed one, settled at the
// completed part of an expired or cancelled one (refunded when nothing
// completed). Tenant b's figures never move.
func TestBatchLifecycle(t *testing.T) {
	const fullTokens, fullCost = 100_000, 1_000_000
	tests := []struct {
		name   string
		md     map[string]string
		cancel bool // cancelled by the tenant through the gateway
		// The settled figures: tokens and cost charged in the end.
		settled func(in, out, cost int64) (int64, int64)
		status  string
	}{
		{"completed", map[string]string{"sim_input_tokens": "120", "sim_output_tokens": "90", "sim_cached_tokens": "40"}, false,
			func(int64, int64, int64) (int64, int64) { return 210, batchCost(120, 90, 40) }, "completed"},
		{"failed", map[string]string{"sim_outcome": "failed"}, false,
			func(int64, int64, int64) (int64, int64) { return 0, 0 }, "failed"},
		{"expired with one request done", map[string]string{"sim_outcome": "expired", "sim_completed": "1", "sim_input_tokens": "30", "sim_output_tokens": "25"}, false,
			func(int64, int64, int64) (int64, int64) { return 55, batchCost(30, 25, 0) }, "expired"},
		{"expired with nothing done", map[string]string{"sim_outcome": "expired"}, false,
			func(int64, int64, int64) (int64, int64) { return 0, 0 }, "expired"},
		{"cancelled by the tenant", nil, true,
			func(int64, int64, int64) (int64, int64) { return 0, 0 }, "cancelled"},
		{"cancelled with two requests done", map[string]string{"sim_completed": "2", "sim_input_tokens": "60", "sim_output_tokens": "70"}, true,
			func(int64, int64, int64) (int64, int64) { return 130, batchCost(60, 70, 0) }, "cancelled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			s := batchGateway(t, batchPolicy, func(gc *gatewaySetup, _ *upstream.Config) {
				gc.opts = append(gc.opts, gateway.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
			})
			in, out, cost := s.reservation(t)
			if tok, c := s.remaining(t, "a"); tok != fullTokens || c != fullCost {
				t.Fatalf("before: remaining %d tokens, %d µ$; want %d, %d", tok, c, fullTokens, fullCost)
			}
			id := s.created(t, keyA, s.uploaded(t, keyA, batchFile), tt.md)
			if tok, c := s.remaining(t, "a"); tok != fullTokens-in-out || c != fullCost-cost {
				t.Fatalf("open: remaining %d tokens, %d µ$; want %d, %d (reserved %d in + %d out, %d µ$)", tok, c, fullTokens-in-out, fullCost-cost, in, out, cost)
			}
			if code, st := s.batch(t, keyA, id, tt.cancel); code != 200 || st == tt.status {
				t.Fatalf("first look: %d %q; want 200 and the batch still running", code, st)
			}
			if tok, c := s.remaining(t, "a"); tok != fullTokens-in-out || c != fullCost-cost {
				t.Fatalf("running: remaining %d tokens, %d µ$; want the reservation held", tok, c)
			}
			s.clk.Advance(time.Hour)
			if code, st := s.batch(t, keyA, id, false); code != 200 || st != tt.status {
				t.Fatalf("after an hour: %d %q; want 200 %q", code, st, tt.status)
			}
			wantTok, wantCost := tt.settled(in, out, cost)
			if tok, c := s.remaining(t, "a"); tok != fullTokens-wantTok || c != fullCost-wantCost {
				t.Errorf("ended: remaining %d tokens, %d µ$; want %d, %d", tok, c, fullTokens-wantTok, fullCost-wantCost)
			}
			// Ended is ended: another look changes nothing.
			s.batch(t, keyA, id, false)
			if tok, c := s.remaining(t, "a"); tok != fullTokens-wantTok || c != fullCost-wantCost {
				t.Errorf("looked again: remaining %d tokens, %d µ$; want %d, %d", tok, c, fullTokens-wantTok, fullCost-wantCost)
			}
			if tok, c := s.remaining(t, "b"); tok != fullTokens || c != fullCost {
				t.Errorf("neighbour: remaining %d tokens, %d µ$; want %d, %d", tok, c, fullTokens, fullCost)
			}
			if got := sumCounter(t, reader, "llmproxy.batches.ended", "outcome"); got[tt.status] != 1 || len(got) != 1 {
				t.Errorf("llmproxy.batches.ended = %v; want %s 1", got, tt.status)
			}
		})
	}
}

// TestBatchPolledInTheBackground: a batch nobody retrieves is settled by
// the gateway's own polls, sent with the upstream key.
func TestBatchPolledInTheBackground(t *testing.T) {
	s := batchGateway(t, batchPolicy, nil)
	in, out, _ := s.reservation(t)
	file := s.uploaded(t, keyA, batchFile)
	s.created(t, keyA, file, map[string]string{"sim_input_tokens": "100", "sim_output_tokens": "50"})
	polls := func() int {
		n := 0
		for _, x := range s.sim.Seen() {
			if strings.HasPrefix(x.Path, "/v1/batches/") {
				if x.Auth != "Bearer sk-upstream" {
					t.Errorf("poll sent Authorization %q; want the upstream key", x.Auth)
				}
				n++
			}
		}
		return n
	}
	s.clk.Advance(time.Minute) // the first poll: in progress
	waitFor(t, "the first poll", func() bool { return polls() == 1 })
	if tok, _ := s.remaining(t, "a"); tok != 100_000-in-out {
		t.Fatalf("after a poll of a running batch: %d tokens left; want the reservation %d held", tok, in+out)
	}
	// An hour on, the batch has completed. A poll on its way when the
	// clock moves lets the ticks of that move pass, so the clock moves on
	// a minute at a time until one has settled it.
	s.clk.Advance(time.Hour)
	waitFor(t, "settlement by a poll", func() bool {
		s.clk.Advance(time.Minute)
		tok, _ := s.remaining(t, "a")
		return tok == 100_000-150
	})
}

// waitFor waits until ok holds, with no deadline (package poll): for the
// effect of a poll the fake clock started, which runs over loopback HTTP.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	poll.Until(t, 5*time.Second, what, ok)
}

// pollUntilEnded advances the gateway's clock a minute at a time until
// the counter of ended reservations (by outcome) counts n completed. The
// gateway's polls run on their own goroutines, each arming the next when
// it returns: advancing in steps until the counter moves means no poll
// armed after the last advance is waited for. The counter is counted
// last, once a reservation is settled and logged.
func (s *batchStack) pollUntilEnded(t *testing.T, reader *sdkmetric.ManualReader, counter string, n int64) {
	t.Helper()
	waitFor(t, counter+" completed", func() bool {
		if sumCounter(t, reader, counter, "outcome")["completed"] == n {
			return true
		}
		s.clk.Advance(time.Minute)
		return false
	})
}

// TestBatchHeldTooLong: a reservation still open after MaxHold is settled
// at its estimate, and the batch's later end changes nothing.
func TestBatchHeldTooLong(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	s := batchGateway(t, batchPolicy, func(gc *gatewaySetup, sc *upstream.Config) {
		sc.BatchDelay = 100 * time.Hour
		gc.opts = append(gc.opts, gateway.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	})
	_, _, cost := s.reservation(t)
	id := s.created(t, keyA, s.uploaded(t, keyA, batchFile), map[string]string{"sim_input_tokens": "100", "sim_output_tokens": "50"})
	if got := sumCounter(t, reader, "llmproxy.batches.open", "")[""]; got != 1 {
		t.Errorf("llmproxy.batches.open = %d; want 1", got)
	}
	for range 31 {
		s.clk.Advance(time.Hour)
	}
	if got := sumCounter(t, reader, "llmproxy.batches.open", "")[""]; got != 0 {
		t.Errorf("llmproxy.batches.open after MaxHold = %d; want 0", got)
	}
	if got := sumCounter(t, reader, "llmproxy.batches.ended", "outcome"); got["held_too_long"] != 1 || len(got) != 1 {
		t.Errorf("llmproxy.batches.ended = %v; want held_too_long 1", got)
	}
	if _, c := s.remaining(t, "a"); c != 1_000_000-cost {
		t.Fatalf("after MaxHold: %d µ$ left; want the estimate %d kept", c, cost)
	}
	s.clk.Advance(70 * time.Hour)
	if code, st := s.batch(t, keyA, id, false); code != 200 || st != "completed" {
		t.Fatalf("retrieval after 101h: %d %q; want 200 completed", code, st)
	}
	if _, c := s.remaining(t, "a"); c != 1_000_000-cost {
		t.Errorf("completed after MaxHold: %d µ$ left; want the estimate %d kept (not the usage's %d)", c, 1_000_000-cost, batchCost(100, 50, 0))
	}
}

// openAIError reads an OpenAI-shaped error body.
func openAIError(t *testing.T, b []byte) (typ, code, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Message, Type string
			Code          *string
		}
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("error body %s (%v): not in the OpenAI shape", b, err)
	}
	if e.Error.Code != nil {
		code = *e.Error.Code
	}
	return e.Error.Type, code, e.Error.Message
}

// creations counts the batch creations that reached the upstream.
func (s *batchStack) creations() int {
	n := 0
	for _, x := range s.sim.Seen() {
		if x.Path == "/v1/batches" {
			n++
		}
	}
	return n
}

// TestBatchRefused: a batch the day's quota cannot hold now is refused
// with 429, Retry-After at the end of the day and x-should-retry: false;
// one larger than the whole quota with 400 batch_too_large; neither
// reaches the upstream, and the neighbour's quota is its own.
func TestBatchRefused(t *testing.T) {
	s := batchGateway(t, `
policies:
  - {name: batch-tokens, key: [tenant], unit: tokens, algorithm: quota, period: day, limit: 500, match: {operations: ["POST /v1/batches"]}}
http: {quota_status: 429}
`, nil)
	in, out, _ := s.reservation(t)
	if in+out > 500 || 2*(in+out) <= 500 {
		t.Fatalf("the file reserves %d tokens; the test wants one batch to fit in 500 and not two", in+out)
	}
	file := s.uploaded(t, keyA, batchFile)
	s.created(t, keyA, file, nil)
	resp, b := s.create(t, keyA, file, nil)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second batch: %d %s; want 429", resp.StatusCode, b)
	}
	if typ, code, msg := openAIError(t, b); typ != "insufficient_quota" || code != "quota_exceeded" || !strings.Contains(msg, "batch-tokens") {
		t.Errorf("second batch: %s %s %q; want insufficient_quota, quota_exceeded, naming the policy", typ, code, msg)
	}
	// 09:00 UTC: the day's quota is back in 15 hours.
	if got := resp.Header.Get("Retry-After"); got != "54000" {
		t.Errorf("Retry-After = %q; want 54000 (the end of the day)", got)
	}
	if got := resp.Header.Get("X-Should-Retry"); got != "false" {
		t.Errorf("X-Should-Retry = %q; want false", got)
	}
	if n := s.creations(); n != 1 {
		t.Errorf("%d creations reached the upstream; want 1", n)
	}
	if tok, _ := s.remaining(t, "a"); tok != 500-in-out {
		t.Errorf("after the refusal: %d tokens left; want %d (the refusal took nothing)", tok, 500-in-out)
	}
	// The neighbour's batch fits in its own quota.
	s.created(t, batchKeyB, s.uploaded(t, batchKeyB, batchFile), nil)

	// A batch larger than the whole quota can never be admitted.
	big := strings.Repeat(chatLine("x", "Write a long essay about rivers.", 200)+"\n", 3)
	resp, b = s.create(t, keyA, s.uploaded(t, keyA, big), nil)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("batch over the whole quota: %d %s; want 400", resp.StatusCode, b)
	}
	if _, code, msg := openAIError(t, b); code != "batch_too_large" || !strings.Contains(msg, "500") {
		t.Errorf("batch over the whole quota: %s %q; want batch_too_large naming the limit", code, msg)
	}
	if n := s.creations(); n != 2 {
		t.Errorf("%d creations reached the upstream; want 2", n)
	}
}

// TestBatchHostileFiles: an input file that is not a well-formed batch of
// one model's requests is refused with 400 naming the line (413 over the
// size cap), within the bounds on a line, on the requests and on the
// bytes, and the upstream never stores it: the upload is cut before its
// end.
func TestBatchHostileFiles(t *testing.T) {
	s := batchGateway(t, batchPolicy, func(gc *gatewaySetup, _ *upstream.Config) {
		gc.Batches.MaxLineBytes, gc.Batches.MaxLines, gc.Batches.MaxFileBytes = 2048, 3, 64<<10
	})
	ok := chatLine("r1", "Hello", 10)
	other := strings.Replace(ok, "gpt-4o-mini", "gpt-4o", 1)
	tests := []struct {
		name, file string
		status     int
		want       string
	}{
		{"huge line", ok + "\n" + chatLine("r2", strings.Repeat("word ", 600), 10) + "\n", 400, "line 2: the line is longer than 2048 bytes"},
		{"invalid JSON", `{"custom_id": "r1", "method": "POST",` + "\n", 400, "line 1: not a batch request"},
		{"not an object", "[1, 2, 3]\n", 400, "line 1: not a batch request"},
		{"two values", ok + " " + ok + "\n", 400, "line 1: not a batch request"},
		{"too many requests", strings.Repeat(ok+"\n", 4), 400, "line 4: the file has more than 3 requests"},
		{"another model", ok + "\n" + other + "\n", 400, `line 2: model "gpt-4o" differs from the first request's "gpt-4o-mini"`},
		{"another url", ok + "\n" + strings.Replace(ok, "/v1/chat/completions", "/v1/responses", 1) + "\n", 400, "line 2: url \"/v1/responses\" differs"},
		{"an unpriced url", strings.Replace(ok, "/v1/chat/completions", "/v1/moderations", 1), 400, `line 1: url "/v1/moderations" is not one this gateway prices`},
		{"a key twice", strings.Replace(ok, `"custom_id":"r1",`, `"custom_id":"r1","custom_id":"r2",`, 1), 400, `line 1: not a batch request (a JSON object of custom_id, method, url and body): key "custom_id" given twice`},
		{"an unknown key", strings.Replace(ok, `"custom_id":"r1",`, `"custom_id":"r1","priority":"high",`, 1), 400, `unknown key "priority"`},
		{"a GET", strings.Replace(ok, `"POST"`, `"GET"`, 1), 400, `line 1: method must be "POST"`},
		{"no custom_id", strings.Replace(ok, `"custom_id":"r1"`, `"custom_id":""`, 1), 400, "line 1: custom_id must be a string"},
		{"a stream", strings.Replace(ok, `"max_tokens":10`, `"max_tokens":10,"stream":true`, 1), 400, "line 1: body.stream"},
		{"a bad body", strings.Replace(ok, `"messages":[`, `"messages":7,"x":[`, 1), 400, "line 1: body:"},
		{"no request", "\n\n", 400, "line 3: the file has no request"},
		{"over the size cap", strings.Repeat("\n", 70<<10), 413, "larger than 65536 bytes"},
	}
	for _, tt := range tests {
		resp, b := s.upload(t, keyA, tt.file)
		if resp.StatusCode != tt.status {
			t.Errorf("%s: %d %s; want %d", tt.name, resp.StatusCode, b, tt.status)
			continue
		}
		if _, _, msg := openAIError(t, b); !strings.Contains(msg, tt.want) {
			t.Errorf("%s: %q; want it to say %q", tt.name, msg, tt.want)
		}
	}
	// The form itself: purpose batch and one file, nothing else.
	for name, fields := range map[string][][2]string{
		"another purpose": {{"purpose", "fine-tune"}, {"file", ok}},
		"no purpose":      {{"file", ok}},
		"two files":       {{"purpose", "batch"}, {"file", ok}, {"file", ok}},
		"another field":   {{"purpose", "batch"}, {"note", "x"}, {"file", ok}},
	} {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		for _, f := range fields {
			if f[0] == "file" {
				fw, _ := mw.CreateFormFile("file", "in.jsonl")
				io.WriteString(fw, f[1])
			} else {
				mw.WriteField(f[0], f[1])
			}
		}
		mw.Close()
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/files", &body)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		if resp, b := s.do(t, req, keyA); resp.StatusCode != 400 {
			t.Errorf("%s: %d %s; want 400", name, resp.StatusCode, b)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/files", strings.NewReader(ok))
	req.Header.Set("Content-Type", "application/jsonl")
	if resp, b := s.do(t, req, keyA); resp.StatusCode != 400 {
		t.Errorf("not multipart: %d %s; want 400", resp.StatusCode, b)
	}
	if n := s.sim.Files(); n != 0 {
		t.Errorf("the upstream stored %d of the refused files; want none", n)
	}
	// A well-formed file goes through, its name and purpose with it.
	s.uploaded(t, keyA, ok+"\r\n\n"+ok)
	if n := s.sim.Files(); n != 1 {
		t.Errorf("the upstream stored %d files; want the one accepted", n)
	}
}

// TestBatchOtherTenants: a tenant sees and cancels only its own batches
// and builds batches only from its own files; another's id is a 404 (or
// a 400 for a file) that never reaches the upstream, as is an id that
// could change the upstream path.
func TestBatchOtherTenants(t *testing.T) {
	s := batchGateway(t, batchPolicy, nil)
	file := s.uploaded(t, keyA, batchFile)
	id := s.created(t, keyA, file, nil)
	seen := len(s.sim.Seen())
	for _, cancel := range []bool{false, true} {
		if code, _ := s.batch(t, batchKeyB, id, cancel); code != http.StatusNotFound {
			t.Errorf("b's look at a's batch (cancel %v): %d; want 404", cancel, code)
		}
	}
	for _, bad := range []string{"batch_unknown", "batch_..%2F..%2Ffiles", "batch%00x", strings.Repeat("b", 129)} {
		if code, _ := s.batch(t, keyA, bad, false); code != http.StatusNotFound {
			t.Errorf("batch id %q: %d; want 404", bad, code)
		}
	}
	resp, b := s.create(t, batchKeyB, file, nil)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("b's batch of a's file: %d %s; want 400", resp.StatusCode, b)
	}
	if _, code, _ := openAIError(t, b); code != "invalid_file" {
		t.Errorf("b's batch of a's file: code %q; want invalid_file", code)
	}
	if n := len(s.sim.Seen()); n != seen {
		t.Errorf("the upstream saw %d requests of refused looks; want none", n-seen)
	}
	if code, st := s.batch(t, keyA, id, false); code != 200 || st != "in_progress" {
		t.Errorf("a's own look: %d %q; want 200 in_progress", code, st)
	}
}

// TestBatchHostileUpstreamID: a batch id from the upstream that could
// change a path is never used; the batch cannot be watched, so its
// reservation stays at the estimate.
func TestBatchHostileUpstreamID(t *testing.T) {
	s := batchGateway(t, batchPolicy, nil)
	in, out, _ := s.reservation(t)
	resp, b := s.create(t, keyA, s.uploaded(t, keyA, batchFile), map[string]string{"sim_id": "batch_1/../../files"})
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("hostile id: %d %s; want 502", resp.StatusCode, b)
	}
	if strings.Contains(string(b), "files") {
		t.Errorf("hostile id: the answer %s quotes the id", b)
	}
	if tok, _ := s.remaining(t, "a"); tok != 100_000-in-out {
		t.Errorf("hostile id: %d tokens left; want the estimate %d kept", tok, in+out)
	}
}

// TestBatchResults: a tenant reads its input file and its batch's output
// file through the gateway; another tenant gets a 404 for both.
func TestBatchResults(t *testing.T) {
	s := batchGateway(t, batchPolicy, nil)
	file := s.uploaded(t, keyA, batchFile)
	id := s.created(t, keyA, file, nil)
	s.batch(t, keyA, id, false)
	s.clk.Advance(time.Hour)
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/v1/batches/"+id, nil)
	resp, b := s.do(t, req, keyA)
	var o struct {
		Status     string
		OutputFile string `json:"output_file_id"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &o) != nil || o.Status != "completed" || o.OutputFile == "" {
		t.Fatalf("batch: %d %s; want completed with an output file", resp.StatusCode, b)
	}
	get := func(key, path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, s.URL+path, nil)
		resp, b := s.do(t, req, key)
		return resp.StatusCode, string(b)
	}
	if code, body := get(keyA, "/v1/files/"+o.OutputFile+"/content"); code != 200 || strings.Count(body, "\n") != 3 || !strings.Contains(body, `"custom_id":"r2"`) {
		t.Errorf("output content: %d %q; want the 3 responses", code, body)
	}
	if code, body := get(keyA, "/v1/files/"+file); code != 200 || !strings.Contains(body, `"purpose":"batch"`) {
		t.Errorf("input file: %d %s; want its object", code, body)
	}
	for _, path := range []string{"/v1/files/" + o.OutputFile + "/content", "/v1/files/" + file, "/v1/files/" + file + "/content"} {
		if code, body := get(batchKeyB, path); code != http.StatusNotFound {
			t.Errorf("b's GET %s: %d %s; want 404", path, code, body)
		}
	}
	if code, _ := get(keyA, "/v1/files/file-..%2F..%2Fbatches/content"); code != http.StatusNotFound {
		t.Errorf("an encoded path as a file id: %d; want 404", code)
	}
}

// TestBatchUpstreamDown: an upload or a batch creation the upstream
// cannot take is a 502 and reserves nothing.
func TestBatchUpstreamDown(t *testing.T) {
	s := batchGateway(t, batchPolicy, nil)
	file := s.uploaded(t, keyA, batchFile)
	s.up.Close()
	resp, b := s.upload(t, keyA, strings.Repeat(batchFile, 20))
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("upload with the upstream down: %d %s; want 502", resp.StatusCode, b)
	}
	resp, b = s.create(t, keyA, file, nil)
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("creation with the upstream down: %d %s; want 502", resp.StatusCode, b)
	}
	if tok, c := s.remaining(t, "a"); tok != 100_000 || c != 1_000_000 {
		t.Errorf("after the failures: %d tokens, %d µ$ left; want nothing reserved", tok, c)
	}
}

// TestBatchUnpriced: under a cost policy, a batch of a model without a
// price is refused with 400 model_not_priced, as its requests would be.
func TestBatchUnpriced(t *testing.T) {
	s := batchGateway(t, batchPolicy, nil)
	file := s.uploaded(t, keyA, strings.ReplaceAll(batchFile, "gpt-4o-mini", "my-local-llm"))
	resp, b := s.create(t, keyA, file, nil)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unpriced batch: %d %s; want 400", resp.StatusCode, b)
	}
	if _, code, _ := openAIError(t, b); code != "model_not_priced" {
		t.Errorf("unpriced batch: code %q; want model_not_priced", code)
	}
	if n := s.creations(); n != 0 {
		t.Errorf("%d creations reached the upstream; want none", n)
	}
}

// TestBatchCreationUnanswered: a creation the upstream took but never
// answered may have made a batch the gateway cannot watch: its
// reservation is kept at the estimate, and counted as unwatchable.
func TestBatchCreationUnanswered(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	s := batchGateway(t, batchPolicy, func(gc *gatewaySetup, _ *upstream.Config) {
		gc.Timeout = 200 * time.Millisecond
		gc.opts = append(gc.opts, gateway.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	})
	in, out, cost := s.reservation(t)
	resp, b := s.create(t, keyA, s.uploaded(t, keyA, batchFile), map[string]string{"sim_hang": "1"})
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("unanswered creation: %d %s; want 504", resp.StatusCode, b)
	}
	if tok, c := s.remaining(t, "a"); tok != 100_000-in-out || c != 1_000_000-cost {
		t.Errorf("unanswered creation: %d tokens, %d µ$ left; want the estimate kept (%d, %d)", tok, c, 100_000-in-out, 1_000_000-cost)
	}
	if got := sumCounter(t, reader, "llmproxy.batches.ended", "outcome"); got["unwatchable"] != 1 {
		t.Errorf("llmproxy.batches.ended = %v; want unwatchable 1", got)
	}
}

// TestBatchHoldLogged: a batch that completes 25 hours after its creation
// is written to the request log with its true hold time, not cut to a
// day, and the log reads back (a replay holds its permits that long). A
// MaxHold longer than a record can hold is refused.
func TestBatchHoldLogged(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	var base gatewaySetup
	s := batchGateway(t, batchPolicy, func(gc *gatewaySetup, sc *upstream.Config) {
		sc.BatchDelay = 25 * time.Hour
		gc.opts = append(gc.opts, gateway.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
		gc.opts = append(gc.opts, gateway.WithRequestLog(rl))
		base = *gc
	})
	s.created(t, keyA, s.uploaded(t, keyA, batchFile), map[string]string{"sim_input_tokens": "100", "sim_output_tokens": "50"})
	for range 25 {
		s.clk.Advance(time.Hour)
	}
	// Past 26 hours the test fails on the hold below.
	s.pollUntilEnded(t, reader, "llmproxy.batches.ended", 1)
	var held []time.Duration
	for _, rec := range logged(t, rl, path, "POST /v1/batches", s.srv) {
		held = append(held, rec.Duration)
	}
	if len(held) != 1 || held[0] < 25*time.Hour || held[0] > 26*time.Hour {
		t.Errorf("the batch's request log records hold %v; want one of 25h to 26h", held)
	}
	base.Upstream = s.up.URL + "/v1"
	base.Batches.MaxHold = requestlog.MaxRecordDuration
	if gw, err := gateway.New(base.ctl, base.est, base.file, base.Config, append(base.opts, gateway.WithRequestLog(nil))...); err == nil || !strings.Contains(err.Error(), "exceed the longest hold a request log records") {
		if gw != nil {
			gw.Close()
		}
		t.Errorf("gateway.New with MaxHold %v = %v; want refused", base.Batches.MaxHold, err)
	}
}

// TestBatchLineDefaultOutput: a batch line without max_tokens reserves
// the output the same body sent to its url would, the policy file's
// default_max_tokens for its model (or Config.DefaultMaxTokens) per
// choice, never the estimator's smaller default: a batch is not a way
// around the file's reservation.
func TestBatchLineDefaultOutput(t *testing.T) {
	const noLimit = `{"custom_id":"r1","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello there"}]}}`
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		t.Fatal(err)
	}
	e, err := est.EstimateEndpoint(weights.EndpointChatCompletions, []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello there"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		models string
		flag   int64
		file   string
		out    int64
	}{
		{"the file's entry", "models:\n  gpt-4o-mini: {default_max_tokens: 16000}\n", 0, noLimit, 16000},
		{"the file's entry, two choices", "models:\n  gpt-4o-mini: {default_max_tokens: 16000}\n", 0, strings.Replace(noLimit, `"body":{`, `"body":{"n":2,`, 1), 32000},
		{"the flag", "", 9000, noLimit, 9000},
		{"max_tokens whatever the defaults", "models:\n  gpt-4o-mini: {default_max_tokens: 16000}\n", 0, chatLine("r1", "Hello there", 100), 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := batchGateway(t, tc.models+batchPolicy, func(gc *gatewaySetup, _ *upstream.Config) { gc.DefaultMaxTokens = tc.flag })
			s.created(t, keyA, s.uploaded(t, keyA, tc.file), nil)
			tok, _ := s.remaining(t, "a")
			if got := 100_000 - tok - e.InputTokens; got != tc.out {
				t.Errorf("the batch reserved %d output tokens; want %d", got, tc.out)
			}
		})
	}
}

// TestBatchResponsesChains: a batch line of /v1/responses that continues
// a response is held to what the same call sent to /v1/responses is: one
// continuing another tenant's response (or an unknown one), or naming a
// conversation, refuses the file before the upstream stores it, and one
// continuing the tenant's own response reserves the recorded size of its
// chain, never nothing.
func TestBatchResponsesChains(t *testing.T) {
	s := batchGateway(t, batchPolicy, nil)
	code, mine := s.respond(t, keyA, map[string]any{"model": "gpt-4o-mini", "input": "Hi.", "max_output_tokens": 50})
	if code != 200 || mine.Usage.TotalTokens == 0 {
		t.Fatalf("a's response: %d %s", code, mine.raw)
	}
	line := func(extra string) string {
		return `{"custom_id":"r1","method":"POST","url":"/v1/responses","body":{"model":"gpt-4o-mini","input":"Go on.","max_output_tokens":50` + extra + `}}` + "\n"
	}
	stored := s.sim.Files()
	for _, tc := range []struct{ name, key, extra string }{
		{"another tenant's response", batchKeyB, `,"previous_response_id":"` + mine.ID + `"`},
		{"an unknown response", keyA, `,"previous_response_id":"resp_nobody"`},
		{"a conversation", keyA, `,"conversation":"conv_1"`},
	} {
		if resp, b := s.upload(t, tc.key, line(tc.extra)); resp.StatusCode != 400 {
			t.Errorf("%s: %d %s; want 400", tc.name, resp.StatusCode, b)
		}
	}
	if n := s.sim.Files() - stored; n != 0 {
		t.Errorf("the upstream stored %d refused files", n)
	}
	create := func(file string) {
		t.Helper()
		b := mustJSON(map[string]any{"input_file_id": s.uploaded(t, keyA, file), "endpoint": "/v1/responses", "completion_window": "24h"})
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/batches", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		if resp, b := s.do(t, req, keyA); resp.StatusCode != 200 {
			t.Fatalf("create: %d %s", resp.StatusCode, b)
		}
	}
	before, _ := s.quotasLeft(t, "a", "POST /v1/batches", "gpt-4o-mini")
	create(line(""))
	mid, _ := s.quotasLeft(t, "a", "POST /v1/batches", "gpt-4o-mini")
	create(line(`,"previous_response_id":"` + mine.ID + `"`))
	after, _ := s.quotasLeft(t, "a", "POST /v1/batches", "gpt-4o-mini")
	if own, chained := before-mid, mid-after; chained != own+mine.Usage.TotalTokens {
		t.Errorf("a chained line reserved %d tokens; want %d (its own %d + the chain's %d)", chained, own+mine.Usage.TotalTokens, own, mine.Usage.TotalTokens)
	}
}
