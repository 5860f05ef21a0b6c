package gateway

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
)

func TestErrorBody(t *testing.T) {
	b := errorBody("invalid_request_error", "invalid_type", "messages[0].content", `bad "quote"`)
	var v struct {
		Error struct {
			Message, Type string
			Param, Code   *string
		}
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("errorBody = %s: %v", b, err)
	}
	if v.Error.Message != `bad "quote"` || v.Error.Type != "invalid_request_error" || *v.Error.Param != "messages[0].content" || *v.Error.Code != "invalid_type" {
		t.Errorf("errorBody = %s", b)
	}
	if b := errorBody("server_error", "", "", "x"); string(b) != `{"error":{"message":"x","type":"server_error","param":null,"code":null}}` {
		t.Errorf("errorBody without code and param = %s", b)
	}
}

func TestRejectionShape(t *testing.T) {
	g := &state{quota: 429, shared: map[string]bool{"upstream": true}}
	for _, tc := range []struct {
		rej    admission.Rejection
		status int
		code   string
	}{
		{admission.Rejection{Policy: "rpm", Reason: admission.ReasonRate, Status: admission.Status{Unit: limits.UnitRequests}}, 429, "rate_limit_exceeded"},
		{admission.Rejection{Policy: "tpm", Reason: admission.ReasonRate, Status: admission.Status{Unit: limits.UnitTokens}}, 429, "tokens_limit_exceeded"},
		{admission.Rejection{Policy: "spend", Reason: admission.ReasonQuota, Status: admission.Status{Unit: limits.UnitCost}}, 429, "quota_exceeded"},
		{admission.Rejection{Policy: "conc", Reason: admission.ReasonQueueFull, Status: admission.Status{Algorithm: limits.Concurrency}}, 429, "concurrency_limit_exceeded"},
		{admission.Rejection{Policy: "tpm", Reason: admission.ReasonQueueFull, Status: admission.Status{Unit: limits.UnitTokens, Algorithm: limits.TokenBucket}}, 429, "tokens_limit_exceeded"},
		{admission.Rejection{Policy: "rpm", Reason: admission.ReasonQueueFull, Status: admission.Status{Algorithm: limits.FixedWindow}}, 429, "rate_limit_exceeded"},
		{admission.Rejection{Policy: "conc", Reason: admission.ReasonConcurrency}, 429, "concurrency_limit_exceeded"},
		{admission.Rejection{Policy: "conc", Reason: admission.ReasonQueueTimeout}, 429, "queue_timeout"},
		{admission.Rejection{Policy: "upstream", Reason: admission.ReasonQueueFull, Status: admission.Status{Algorithm: limits.Concurrency}}, 503, "concurrency_limit_exceeded"},
		{admission.Rejection{Policy: "upstream", Reason: admission.ReasonQueueTimeout}, 503, "queue_timeout"},
		{admission.Rejection{Policy: "redis", Reason: admission.ReasonStoreUnavailable}, 503, "service_unavailable"},
	} {
		status, _, code := g.rejectionShape(&tc.rej)
		if status != tc.status || code != tc.code {
			t.Errorf("rejectionShape(%s by %s) = %d %s; want %d %s", tc.rej.Reason, tc.rej.Policy, status, code, tc.status, tc.code)
		}
	}
}

func TestHeaderFilters(t *testing.T) {
	mw, err := httpadmit.New(&admission.Controller{}, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{KeyHeaders: []string{"x-proxy-key", "Authorization"}}))
	if err != nil {
		t.Fatal(err)
	}
	g := &Gateway{forward: newHeaderSet([]string{"X-Sim-*", "x-trace", "X-Proxy-*"}), mw: mw}
	want := map[string]bool{
		"Content-Type": true, "Accept": true, "User-Agent": true, "Openai-Beta": true, "X-Stainless-Retry-Count": true,
		"Idempotency-Key": true, "Traceparent": true, "X-Sim-Fault": true, "X-Trace": true, "X-Proxy-Region": true,
		// Credentials, in the configured header or any common one, even
		// where the forward list would let them through.
		"Authorization": false, "X-Proxy-Key": false, "X-Api-Key": false, "Api-Key": false, "Proxy-Authorization": false,
		"Cookie": false, "X-Auth-Token": false,
		// The tenant's provider account, hop-by-hop and forwarding
		// fields, and anything not listed.
		"Openai-Organization": false, "Openai-Project": false, "Connection": false, "Accept-Encoding": false,
		"X-Forwarded-For": false, "Forwarded": false, "Te": false, "X-Custom-Secret": false,
	}
	src := http.Header{}
	for k := range want {
		src[http.CanonicalHeaderKey(k)] = []string{"v"}
	}
	dst := http.Header{}
	g.copyRequestHeaders(&state{mw: mw.Snapshot()}, dst, src)
	for k, fwd := range want {
		if _, got := dst[http.CanonicalHeaderKey(k)]; got != fwd {
			t.Errorf("header %s forwarded = %v; want %v", k, got, fwd)
		}
	}
	for k, drop := range map[string]bool{
		"X-Ratelimit-Remaining-Tokens": true, "Openai-Organization": true, "Set-Cookie": true, "Ratelimit-Policy": true,
		"Retry-After": false, "Retry-After-Ms": false, "X-Request-Id": false, "Openai-Processing-Ms": false,
	} {
		if dropResponseHeader(http.CanonicalHeaderKey(k)) != drop {
			t.Errorf("dropResponseHeader(%s) = %v; want %v", k, !drop, drop)
		}
	}
}
