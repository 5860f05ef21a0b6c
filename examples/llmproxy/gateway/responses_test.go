package gateway_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/shadow/requestlog"
	"github.com/sluicehq/sluice/weights"
)

// respond sends a Responses API call with key and returns the status and
// the body read as a response object (ID, Status) or an error.
func (s *batchStack) respond(t *testing.T, key string, body map[string]any, hdr ...string) (int, respObject) {
	t.Helper()
	return respondAt(t, s.URL, key, body, hdr...)
}

// respObject is what the tests read of a response object or an error.
type respObject struct {
	ID, Status string
	Usage      struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	}
	Error *struct{ Message, Type, Code string }
	raw   string
}

func respondAt(t *testing.T, url, key string, body map[string]any, hdr ...string) (int, respObject) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/responses", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, data := roundTrip(t, req)
	var o respObject
	json.Unmarshal(data, &o)
	o.raw = string(data)
	return resp.StatusCode, o
}

// objectCall calls a route of one response with key.
func objectCall(t *testing.T, url, key, method, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, data := roundTrip(t, req)
	return resp.StatusCode, string(data)
}

// TestResponsesChainPricing: a chained call is reserved its own input
// plus the size recorded for its previous response; by default an id its
// tenant has no record of (unknown, or another tenant's) is the same 404
// for both, which never reaches the upstream; with AllowUnknownChains both
// are reserved UnknownChainTokens, the same for both, and admitted by the
// policies.
func TestResponsesChainPricing(t *testing.T) {
	const unknown = 5000
	s, rl, path := responsesStack(t, responsesPolicy, func(gc *gatewaySetup, _ *upstream.Config) {
		gc.Responses.UnknownChainTokens = unknown
		gc.Responses.AllowUnknownChains = true
	})
	call := func(key, prev string) (int, respObject) {
		body := map[string]any{"model": "gpt-4o-mini", "input": "Go on.", "max_output_tokens": 50}
		if prev != "" {
			body["previous_response_id"] = prev
		}
		return s.respond(t, key, body)
	}
	code, first := call(keyA, "")
	if code != 200 {
		t.Fatalf("first: %d %s", code, first.raw)
	}
	_, second := call(keyA, first.ID)
	call(keyA, "resp-unknown")
	call(batchKeyB, first.ID) // b has no record of a's response
	recs := logged(t, rl, path, "POST /v1/responses", s.srv)
	if len(recs) != 4 {
		t.Fatalf("%d records; want 4", len(recs))
	}
	own := recs[0].Tokens // the same input and limit each time
	if got, want := recs[1].Tokens, own+first.Usage.TotalTokens; got != want {
		t.Errorf("chained on a recorded response: reserved %d; want %d (own %d + chain %d)", got, want, own, first.Usage.TotalTokens)
	}
	if second.Usage.InputTokens <= first.Usage.TotalTokens {
		t.Errorf("the simulator reports %d input tokens for the chain; want more than %d", second.Usage.InputTokens, first.Usage.TotalTokens)
	}
	for i, who := range []string{"an unknown id", "another tenant's id"} {
		if got := recs[2+i].Tokens; got != own+unknown {
			t.Errorf("chained on %s: reserved %d; want %d (own + UnknownChainTokens)", who, got, own+unknown)
		}
	}

	strict := batchGateway(t, responsesPolicy, nil) // the default
	_, mine := strict.respond(t, keyA, map[string]any{"model": "gpt-4o-mini", "input": "Hi."})
	before := strict.sim.Requests()
	c1, theirs := strict.respond(t, batchKeyB, map[string]any{"model": "gpt-4o-mini", "input": "Hi.", "previous_response_id": mine.ID})
	c2, nobody := strict.respond(t, batchKeyB, map[string]any{"model": "gpt-4o-mini", "input": "Hi.", "previous_response_id": "resp-nobody"})
	if c1 != 404 || c2 != 404 || strings.ReplaceAll(theirs.raw, mine.ID, "X") != strings.ReplaceAll(nobody.raw, "resp-nobody", "X") {
		t.Errorf("strict: another tenant's chain %d %s, an unknown one %d %s; want the same 404", c1, theirs.raw, c2, nobody.raw)
	}
	if n := strict.sim.Requests(); n != before {
		t.Errorf("%d refused chains reached the upstream", n-before)
	}
	if c, o := strict.respond(t, keyA, map[string]any{"model": "gpt-4o-mini", "input": "Hi.", "previous_response_id": mine.ID}); c != 200 {
		t.Errorf("strict: the owner's chain: %d %s; want 200", c, o.raw)
	}
	if c, o := strict.respond(t, keyA, map[string]any{"model": "gpt-4o-mini", "input": "Hi.", "conversation": "conv_1"}); c != 400 {
		t.Errorf("strict: a conversation: %d %s; want 400", c, o.raw)
	}
}

// TestResponseIDsNeverForwarded: an id that is not 1 to 128 letters,
// digits, - and _, raw or encoded, is a 404 on every route of one
// response (or the router's 405), and nothing reaches the upstream.
func TestResponseIDsNeverForwarded(t *testing.T) {
	s := batchGateway(t, responsesPolicy, nil)
	before := s.sim.Requests()
	for _, p := range []string{
		"/v1/responses/..", "/v1/responses/%2e%2e", "/v1/responses/a%2Fb", "/v1/responses/a%2Fb/input_items",
		"/v1/responses/" + strings.Repeat("r", 129), "/v1/responses/resp;x", "/v1/responses/resp%00", "/v1/responses/r%25252F/cancel",
		"/v1/responses/resp%20x", "/v1/responses/r%C3%A9",
	} {
		for _, m := range []string{http.MethodGet, http.MethodDelete} {
			// A path that decodes to another route's shape may meet
			// the router's 405 instead: never the upstream either.
			if code, body := objectCall(t, s.URL, keyA, m, p); (code != 404 && code != 405) || !strings.Contains(body, `"type":"invalid_request_error"`) {
				t.Errorf("%s %s: %d %s; want a 404 (or 405) in OpenAI's shape", m, p, code, body)
			}
		}
	}
	// A valid id nobody created: a 404 too, from the gateway.
	if code, _ := objectCall(t, s.URL, keyA, http.MethodPost, "/v1/responses/resp-nobody/cancel"); code != 404 {
		t.Errorf("cancel of an unknown response: %d; want 404", code)
	}
	// The listing's query is rebuilt: a parameter it does not know is a 400.
	_, mine := s.respond(t, keyA, map[string]any{"model": "gpt-4o-mini", "input": "Hi."})
	if code, body := objectCall(t, s.URL, keyA, http.MethodGet, "/v1/responses/"+mine.ID+"/input_items?limit=5&x=%2F"); code != 400 {
		t.Errorf("input_items with an unknown parameter: %d %s; want 400", code, body)
	}
	if n := s.sim.Requests() - before; n != 1 {
		t.Errorf("%d requests reached the upstream; want 1, the creation", n)
	}
	for _, seen := range s.sim.Seen() {
		if strings.Contains(seen.Path, "/responses/") {
			t.Errorf("the upstream was asked for %s", seen.Path)
		}
	}
}

// TestResponsesToolFees: a call declaring web_search and file_search
// reserves one call of each at the file's tool_calls prices on top of
// its tokens, and is settled at the calls its output lists; one the
// upstream fails is charged no fee.
func TestResponsesToolFees(t *testing.T) {
	const policy = `
policies:
  - {name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 10M, match: {operations: ["POST /v1/responses"]}}
prices:
  tool_calls: {web_search: 25, file_search: 2.5}
`
	s, rl, path := responsesStack(t, policy, func(gc *gatewaySetup, _ *upstream.Config) {
		gc.ForwardHeaders = []string{"X-Sim-*"}
		gc.AllowVectorStores = true // file_search names one
	})
	body := map[string]any{"model": "gpt-4o-mini", "input": "Search the news.", "max_output_tokens": 40,
		"tools": []any{map[string]any{"type": "web_search"}, map[string]any{"type": "web_search_preview"}, map[string]any{"type": "file_search", "vector_store_ids": []string{"vs_1"}}}}
	code, o := s.respond(t, keyA, body)
	if code != 200 {
		t.Fatalf("%d %s", code, o.raw)
	}
	if code, _ := s.respond(t, keyA, body, "X-Sim-Fault", "500"); code != 500 {
		t.Fatalf("a failed call: %d; want the upstream's 500", code)
	}
	recs := logged(t, rl, path, "POST /v1/responses", s.srv)
	if len(recs) != 2 || recs[1].Actual.Cost != 0 || !recs[1].Actual.CostKnown {
		t.Fatalf("records %+v; want the failed call settled at nothing, no tool fee", recs)
	}
	price := weights.DefaultPrices()["gpt-4o-mini"]
	est, err := s.est.EstimateEndpoint(weights.EndpointResponses, mustJSON(body))
	if err != nil {
		t.Fatal(err)
	}
	// Reserved: one web_search call (however many declared) and one
	// file_search call.
	if want := price.EstimateMicros(est.InputTokens, est.OutputTokens) + 25_000 + 2_500; recs[0].Cost != want {
		t.Errorf("reserved %d µ$; want %d (tokens and one call of each tool)", recs[0].Cost, want)
	}
	// Settled: the simulator made two web_search calls and one file_search.
	u := weights.Usage{InputTokens: o.Usage.InputTokens, OutputTokens: o.Usage.OutputTokens}
	if want := price.CostMicros(u) + 2*25_000 + 2_500; recs[0].Actual.Cost != want {
		t.Errorf("settled %d µ$; want %d (tokens and three calls)", recs[0].Actual.Cost, want)
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestBackgroundResponses: a background response holds its reservation
// while it runs; a tenant with all of its background slots taken is
// refused before anything is admitted or sent; one cancelled without
// usage is refunded; one nobody polls is settled at its usage when the
// gateway's own poll sees it complete; one that runs past MaxHold is
// settled at its estimate, and its slot freed.
func TestBackgroundResponses(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	s := batchGateway(t, responsesPolicy, func(gc *gatewaySetup, sc *upstream.Config) {
		sc.OutputTokens, sc.BackgroundDelay = 20, time.Hour
		gc.Responses = gateway.ResponsesAPI{PollInterval: time.Minute, MaxHold: 3 * time.Hour, MaxBackgroundPerTenant: 2}
		gc.opts = append(gc.opts, gateway.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	})
	left := func() int64 { return s.remainingOf(t, "a", "POST /v1/responses", "resp-tokens") }
	bg := map[string]any{"model": "gpt-4o-mini", "input": "Think for a while.", "max_output_tokens": 60, "background": true}
	full := left()
	if code, o := s.respond(t, keyA, bg); code != 200 || o.Status != "queued" {
		t.Fatalf("background create: %d %s", code, o.raw)
	}
	reserved := full - left()
	_, cancelled := s.respond(t, keyA, bg)
	if got := left(); got != full-2*reserved {
		t.Fatalf("two running: %d tokens left; want %d (two reservations of %d)", got, full-2*reserved, reserved)
	}
	before := s.sim.Requests()
	if code, o := s.respond(t, keyA, bg); code != 429 || o.Error == nil || o.Error.Code != "too_many_background_responses" {
		t.Fatalf("a third background response: %d %s; want 429 too_many_background_responses", code, o.raw)
	}
	if s.sim.Requests() != before || left() != full-2*reserved {
		t.Error("a background response refused for its slots reached the upstream or the quota")
	}
	if code, body := objectCall(t, s.URL, keyA, http.MethodPost, "/v1/responses/"+cancelled.ID+"/cancel"); code != 200 || !strings.Contains(body, `"cancelled"`) {
		t.Fatalf("cancel: %d %s", code, body)
	}
	// A cancellation is best effort (Azure OpenAI's can be answered
	// cancelled and the response complete after all): the reservation
	// is held until a retrieval shows the response ended. The gateway's
	// poll a minute on shows it cancelled, and it is refunded: the
	// gateway saw it queued and nothing else.
	if got := left(); got != full-2*reserved {
		t.Fatalf("right after the cancellation: %d tokens left; want %d (held until a retrieval shows it ended)", got, full-2*reserved)
	}
	s.clk.Advance(time.Minute)
	waitFor(t, "the cancelled response refunded at the next poll", func() bool { return left() == full-reserved })
	// Nobody polls the first: the gateway does, every minute, and an
	// hour on it has completed. Wait for the ended counter, not for the
	// settlement, which a poll makes visible before it counts.
	for range 58 {
		s.clk.Advance(time.Minute)
	}
	s.pollUntilEnded(t, reader, "llmproxy.responses.background.ended", 1)
	if got := left(); got <= full-reserved || got == full {
		t.Errorf("after completion: %d tokens left; want its usage charged (less than its reservation of %d)", got, reserved)
	}
	if got := sumCounter(t, reader, "llmproxy.responses.background.ended", "outcome"); got["completed"] != 1 || got["cancelled"] != 1 || len(got) != 2 {
		t.Errorf("llmproxy.responses.background.ended = %v; want one completed, one cancelled", got)
	}
	if got := sumCounter(t, reader, "llmproxy.responses.background.open", "")[""]; got != 0 {
		t.Errorf("llmproxy.responses.background.open = %d; want 0", got)
	}

	// Past MaxHold, a response that never completes is settled at its
	// estimate, and its slot freed.
	s2, rl, path := responsesStack(t, responsesPolicy, func(gc *gatewaySetup, sc *upstream.Config) {
		gc.Responses = gateway.ResponsesAPI{PollInterval: time.Minute, MaxHold: 2 * time.Hour, MaxBackgroundPerTenant: 1}
		sc.BackgroundDelay = 100 * time.Hour
	})
	if code, o := s2.respond(t, keyA, bg); code != 200 {
		t.Fatalf("background create: %d %s", code, o.raw)
	}
	// Each poll runs on its own goroutine and arms the next when it
	// returns: the clock moves a minute only once it has, so that the
	// polls keep to their minutes however slow the machine.
	armed := s2.clk.Pending()
	step := func() {
		waitFor(t, "the next poll armed", func() bool { return s2.clk.Pending() == armed })
		s2.clk.Advance(time.Minute)
	}
	for range 119 {
		step()
	}
	if code, _ := s2.respond(t, keyA, bg); code != 429 {
		t.Fatalf("a second background response before MaxHold: %d; want 429", code)
	}
	step() // two hours: the hold ends, and its slot is freed
	if code, o := s2.respond(t, keyA, bg); code != 200 {
		t.Fatalf("a background response once the first was held MaxHold: %d %s; want 200", code, o.raw)
	}
	// The refusals for want of a slot are logged begin_only; the held
	// response once, when settled.
	var held []requestlog.Record
	for _, r := range logged(t, rl, path, "POST /v1/responses", s2.srv) {
		if !r.BeginOnly {
			held = append(held, r)
		}
	}
	if len(held) != 1 || held[0].Actual.Tokens != 0 || held[0].Actual.TokensKnown || held[0].Duration < 2*time.Hour || held[0].Duration > 2*time.Hour+2*time.Minute {
		t.Errorf("the held response's records: %+v; want one, its estimate kept (no actual usage) after 2h", held)
	}
}

// TestBackgroundCancelled: a background response that ends cancelled is
// charged what it ran, never nothing: the usage it reports, else its
// reservation, and at least the text its output kept. It is refunded only
// when the gateway saw it queued and nothing else and its cancellation
// was answered cancelled without output. A cancellation settles nothing by
// itself: the response is polled on until a retrieval shows it ended, as
// Azure OpenAI's cancellation is best effort (answered cancelled, the
// response can still complete, and is then charged its usage).
func TestBackgroundCancelled(t *testing.T) {
	const (
		refunded = "refunded"
		reserved = "reserved"
		kept     = "kept"
		usage    = "usage"
	)
	for _, tc := range []struct {
		name      string
		tune      func(*gatewaySetup, *upstream.Config)
		run       int  // minutes it runs, polled every minute, before the cancellation
		retrieved bool // the tenant retrieves it (in progress) before cancelling
		noLimit   bool // the call sets no max_output_tokens
		charged   string
		outcome   string
	}{
		{name: "cancelled while queued", charged: refunded, outcome: "cancelled"},
		{name: "cancelled once retrieved running", retrieved: true, charged: reserved, outcome: "cancelled"},
		{name: "cancelled once polled running", run: 2, charged: reserved, outcome: "cancelled"},
		{name: "cancelled with partial output", run: 30, noLimit: true, charged: kept, outcome: "cancelled", tune: func(gc *gatewaySetup, sc *upstream.Config) {
			sc.CancelKeepsOutput, gc.DefaultMaxTokens = true, 4
		}},
		{name: "cancelled while queued, completed after all", charged: usage, outcome: "completed", tune: func(_ *gatewaySetup, sc *upstream.Config) {
			sc.CancelBestEffort = true
		}},
		{name: "cancelled running, completed after all", run: 5, charged: usage, outcome: "completed", tune: func(_ *gatewaySetup, sc *upstream.Config) {
			sc.CancelBestEffort = true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			s := batchGateway(t, responsesPolicy, func(gc *gatewaySetup, sc *upstream.Config) {
				sc.OutputTokens, sc.BackgroundDelay = 20, time.Hour
				gc.Responses = gateway.ResponsesAPI{PollInterval: time.Minute}
				gc.opts = append(gc.opts, gateway.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
				if tc.tune != nil {
					tc.tune(gc, sc)
				}
			})
			left := func() int64 { return s.remainingOf(t, "a", "POST /v1/responses", "resp-tokens") }
			ended := func() map[string]int64 {
				return sumCounter(t, reader, "llmproxy.responses.background.ended", "outcome")
			}
			full := left()
			call := map[string]any{"model": "gpt-4o-mini", "input": "Think for a while.", "max_output_tokens": 60, "background": true}
			if tc.noLimit {
				delete(call, "max_output_tokens")
			}
			code, o := s.respond(t, keyA, call)
			if code != 200 || o.Status != "queued" {
				t.Fatalf("background create: %d %s", code, o.raw)
			}
			held := full - left()
			// The gateway's poll is armed: the clock moves a minute only
			// once the poll of the last has armed the next.
			armed := s.clk.Pending()
			for range tc.run {
				waitFor(t, "the next poll armed", func() bool { return s.clk.Pending() == armed })
				s.clk.Advance(time.Minute)
			}
			waitFor(t, "the next poll armed", func() bool { return s.clk.Pending() == armed })
			if tc.retrieved {
				if code, body := objectCall(t, s.URL, keyA, http.MethodGet, "/v1/responses/"+o.ID); code != 200 || !strings.Contains(body, `"in_progress"`) {
					t.Fatalf("retrieval: %d %s", code, body)
				}
			}
			code, body := objectCall(t, s.URL, keyA, http.MethodPost, "/v1/responses/"+o.ID+"/cancel")
			if code != 200 || !strings.Contains(body, `"cancelled"`) || !strings.Contains(body, `"usage":null`) {
				t.Fatalf("cancel: %d %s", code, body)
			}
			if got := left(); got != full-held {
				t.Errorf("right after the cancellation: %d tokens left; want %d (its reservation of %d held until a retrieval shows it ended)", got, full-held, held)
			}
			waitFor(t, "the cancelled response settled", func() bool {
				if len(ended()) > 0 {
					return true
				}
				if s.clk.Pending() == armed {
					s.clk.Advance(time.Minute)
				}
				return false
			})
			if got := ended(); got[tc.outcome] != 1 || len(got) != 1 {
				t.Errorf("llmproxy.responses.background.ended = %v; want one %s", got, tc.outcome)
			}
			var want int64
			switch tc.charged {
			case reserved:
				want = held
			case kept:
				var cancelled struct {
					Output []struct{ Content []struct{ Text string } }
				}
				json.Unmarshal([]byte(body), &cancelled)
				if len(cancelled.Output) != 1 || len(cancelled.Output[0].Content) != 1 {
					t.Fatalf("the cancellation kept no output: %s", body)
				}
				c, err := s.est.Counter("gpt-4o-mini")
				if err != nil {
					t.Fatal(err)
				}
				text := int64(c.Count(cancelled.Output[0].Content[0].Text))
				if text <= 4 {
					t.Fatalf("the kept text is %d tokens; the test wants more than the 4 reserved", text)
				}
				want = held - 4 + text
			case usage:
				code, body := objectCall(t, s.URL, keyA, http.MethodGet, "/v1/responses/"+o.ID)
				var done respObject
				json.Unmarshal([]byte(body), &done)
				if code != 200 || done.Status != "completed" || done.Usage.TotalTokens == 0 {
					t.Fatalf("retrieval once ended: %d %s", code, body)
				}
				want = done.Usage.TotalTokens
			}
			if got := full - left(); got != want {
				t.Errorf("charged %d tokens; want %d (%s; %d reserved)", got, want, tc.charged, held)
			}
		})
	}
}

// TestResponsesSharedOnRedis: two gateways keeping their records on one
// real redis-server price a chain continued through the other from the
// same record, and serve the owner's retrieval through either; another
// tenant still gets a 404.
func TestResponsesSharedOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	var base gatewaySetup
	s, rl, path := responsesStack(t, responsesPolicy, func(gc *gatewaySetup, _ *upstream.Config) {
		gc.Responses.UnknownChainTokens = 5000
		gc.opts = append(gc.opts, gateway.WithResponseRecords(c))
		base = *gc
	})
	base.Upstream = s.up.URL + "/v1"
	gw2, err := gateway.New(base.ctl, base.est, base.file, base.Config, base.opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw2.Close() })
	e := echo.New()
	gw2.Register(e)
	srv2 := httptest.NewServer(e)
	t.Cleanup(srv2.Close)

	body := map[string]any{"model": "gpt-4o-mini", "input": "Go on.", "max_output_tokens": 50}
	code, first := s.respond(t, keyA, body)
	if code != 200 {
		t.Fatalf("first: %d %s", code, first.raw)
	}
	body["previous_response_id"] = first.ID
	if code, o := respondAt(t, srv2.URL, keyA, body); code != 200 {
		t.Fatalf("chained through the other gateway: %d %s", code, o.raw)
	}
	if code, _ := objectCall(t, srv2.URL, keyA, http.MethodGet, "/v1/responses/"+first.ID); code != 200 {
		t.Errorf("the owner's retrieval through the other gateway: %d; want 200", code)
	}
	if code, _ := objectCall(t, srv2.URL, batchKeyB, http.MethodGet, "/v1/responses/"+first.ID); code != 404 {
		t.Errorf("another tenant's retrieval: %d; want 404", code)
	}
	recs := logged(t, rl, path, "POST /v1/responses", s.srv, srv2)
	if len(recs) != 2 || recs[1].Tokens != recs[0].Tokens+first.Usage.TotalTokens {
		t.Errorf("records %+v; want the chained call reserved %d + %d", recs, recs[0].Tokens, first.Usage.TotalTokens)
	}
}

// TestBackgroundStreamCut: a background response whose stream ends
// before it completes (here the upstream cuts it; a client that leaves
// is the same) runs on at the provider: its reservation is held, not
// settled at what the stream carried, until the gateway sees it end.
func TestBackgroundStreamCut(t *testing.T) {
	s := batchGateway(t, responsesPolicy, func(gc *gatewaySetup, sc *upstream.Config) {
		sc.OutputTokens = 20
		gc.ForwardHeaders = []string{"X-Sim-*"}
		gc.Responses = gateway.ResponsesAPI{PollInterval: time.Minute}
	})
	left := func() int64 { return s.remainingOf(t, "a", "POST /v1/responses", "resp-tokens") }
	full := left()
	b := mustJSON(map[string]any{"model": "gpt-4o-mini", "input": "Tell a story.", "max_output_tokens": 60, "background": true, "stream": true})
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/responses", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+keyA)
	req.Header.Set("X-Sim-Fault", "cut")
	resp, data := roundTrip(t, req)
	if resp.StatusCode != 200 || !strings.Contains(string(data), "response.created") || strings.Contains(string(data), "response.completed") {
		t.Fatalf("cut stream: %d %s", resp.StatusCode, data)
	}
	var created struct{ Response struct{ ID string } }
	line := string(data)[strings.Index(string(data), "data: ")+6:]
	json.Unmarshal([]byte(line[:strings.Index(line, "\n")]), &created)
	reserved := full - left()
	est, err := s.est.EstimateEndpoint(weights.EndpointResponses, b)
	if err != nil {
		t.Fatal(err)
	}
	if reserved != est.InputTokens+est.OutputTokens {
		t.Fatalf("after the cut: %d tokens held; want the reservation, %d", reserved, est.InputTokens+est.OutputTokens)
	}
	waitFor(t, "the cut background response settled by the gateway's poll", func() bool {
		if left() != full-reserved {
			return true
		}
		s.clk.Advance(time.Minute)
		return false
	})
	code, body := objectCall(t, s.URL, keyA, http.MethodGet, "/v1/responses/"+created.Response.ID)
	var o respObject
	json.Unmarshal([]byte(body), &o)
	if code != 200 || o.Status != "completed" || left() != full-o.Usage.TotalTokens {
		t.Errorf("%d tokens left; want %d, the %d of the completed response (%d %s)", left(), full-o.Usage.TotalTokens, o.Usage.TotalTokens, code, body)
	}
}

// TestResponsesStreamCutToolFees: a stream of a call declaring built-in
// tools that ends before its final response object (the upstream cut it,
// or the client left once it had the text) is charged at least the tool
// calls it reserved, as a stream whose final object went unread is: the
// calls ran before the text, and the provider bills them.
func TestResponsesStreamCutToolFees(t *testing.T) {
	const policy = `
policies:
  - {name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 10M, match: {operations: ["POST /v1/responses"]}}
prices:
  tool_calls: {web_search: 25, file_search: 2.5}
`
	s, rl, path := responsesStack(t, policy, func(gc *gatewaySetup, sc *upstream.Config) {
		sc.OutputTokens = 20
		gc.ForwardHeaders = []string{"X-Sim-*"}
		gc.AllowVectorStores = true // file_search names one
	})
	b := mustJSON(map[string]any{"model": "gpt-4o-mini", "input": "Search the news.", "max_output_tokens": 40, "stream": true,
		"tools": []any{map[string]any{"type": "web_search"}, map[string]any{"type": "file_search", "vector_store_ids": []string{"vs_1"}}}})
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/responses", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+keyA)
	req.Header.Set("X-Sim-Fault", "cut")
	resp, data := roundTrip(t, req)
	if resp.StatusCode != 200 || !strings.Contains(string(data), "response.output_text.delta") || strings.Contains(string(data), "response.completed") {
		t.Fatalf("cut stream: %d %s", resp.StatusCode, data)
	}
	recs := logged(t, rl, path, "POST /v1/responses", s.srv)
	if len(recs) != 1 || !recs[0].Actual.CostKnown {
		t.Fatalf("records %+v; want one, its cost known", recs)
	}
	var u weights.Usage
	for _, a := range recs[0].Actual.Units {
		switch a.Unit {
		case limits.UnitInputTokens:
			u.InputTokens = a.Amount
		case limits.UnitOutputTokens:
			u.OutputTokens = a.Amount
		}
	}
	tokens := weights.DefaultPrices()["gpt-4o-mini"].CostMicros(u)
	if got, want := recs[0].Actual.Cost-tokens, int64(25_000+2_500); got != want {
		t.Errorf("the cut stream was charged %d µ$ of tool fees (%d in all, %d of tokens); want %d, the calls it reserved", got, recs[0].Actual.Cost, tokens, want)
	}
}
