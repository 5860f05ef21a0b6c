package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

func TestAnthropicErrorType(t *testing.T) {
	for status, want := range map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 402: "billing_error", 403: "permission_error",
		404: "not_found_error", 408: "invalid_request_error", 413: "request_too_large", 429: "rate_limit_error",
		500: "api_error", 502: "api_error", 503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error",
	} {
		if got := anthropicErrorType(status); got != want {
			t.Errorf("anthropicErrorType(%d) = %q; want %q", status, got, want)
		}
	}
}

func TestAnthropicErrorBody(t *testing.T) {
	if got, want := string(anthropicErrorBody("rate_limit_error", `a "quoted" limit`)), `{"type":"error","error":{"type":"rate_limit_error","message":"a \"quoted\" limit"}}`; got != want {
		t.Errorf("anthropicErrorBody = %s; want %s", got, want)
	}
	for typ, want := range map[string]string{
		"tokens":             "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"m\"}}\n\n",
		"server_error":       "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"m\"}}\n\n",
		"server_overloaded":  "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"m\"}}\n\n",
		"insufficient_quota": "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"permission_error\",\"message\":\"m\"}}\n\n",
	} {
		if got := string(anthropicStreamError(typ, "m")); got != want {
			t.Errorf("anthropicStreamError(%s) = %q; want %q", typ, got, want)
		}
	}
}

// The anthropic-ratelimit-* figures come from the tightest rate policy
// of each unit; concurrency and policies of other units stay out, and
// the reset is the instant, rounded up to the second.
func TestSetAnthropicHeaders(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 250_000_000, time.UTC)
	sts := []admission.Status{
		{Policy: "rpm", Unit: limits.UnitRequests, Algorithm: limits.TokenBucket, Limit: 50, Remaining: 49, Reset: 1200 * time.Millisecond},
		{Policy: "rpd", Unit: limits.UnitRequests, Algorithm: limits.FixedWindow, Limit: 1000, Remaining: 10, Reset: time.Hour},
		{Policy: "conc", Unit: limits.UnitRequests, Algorithm: limits.Concurrency, Limit: 2, Remaining: 0},
		{Policy: "itpm", Unit: limits.UnitInputTokens, Algorithm: limits.TokenBucket, Limit: 30000, Remaining: 29000, Reset: 2 * time.Second},
		{Policy: "otpm", Unit: limits.UnitOutputTokens, Algorithm: limits.TokenBucket, Limit: 8000, Remaining: -5, Reset: time.Minute},
		{Policy: "spend", Unit: limits.UnitCost, Algorithm: limits.Quota, Limit: 100, Remaining: 0, Reset: time.Hour},
	}
	h := http.Header{}
	setAnthropicHeaders(h, sts, now)
	want := map[string]string{
		"Anthropic-Ratelimit-Requests-Limit":          "1000",
		"Anthropic-Ratelimit-Requests-Remaining":      "10",
		"Anthropic-Ratelimit-Requests-Reset":          "2026-12-01T10:00:00Z",
		"Anthropic-Ratelimit-Input-Tokens-Limit":      "30000",
		"Anthropic-Ratelimit-Input-Tokens-Remaining":  "29000",
		"Anthropic-Ratelimit-Input-Tokens-Reset":      "2026-12-01T09:00:02Z",
		"Anthropic-Ratelimit-Output-Tokens-Limit":     "8000",
		"Anthropic-Ratelimit-Output-Tokens-Remaining": "0",
		"Anthropic-Ratelimit-Output-Tokens-Reset":     "2026-12-01T09:01:00Z",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q; want %q", k, got, v)
		}
	}
	if len(h) != len(want) {
		t.Errorf("headers %v; want only %d", h, len(want))
	}
}

// Upstream, the Messages API gets the gateway's key in x-api-key and the
// client's anthropic-version and anthropic-beta; never the client's
// credential. The provider's own limits and organization stay out of
// the answer.
func TestAnthropicUpstreamHeaders(t *testing.T) {
	g := &Gateway{cfg: Config{Anthropic: Anthropic{Key: "sk-gw"}}}
	dst := http.Header{"X-Api-Key": {"sk-client"}}
	g.setAnthropicUpstream(dst, http.Header{"Anthropic-Beta": {"prompt-caching-2024-07-31"}, "X-Api-Key": {"sk-client"}})
	if dst.Get("X-Api-Key") != "sk-gw" || dst.Get("Anthropic-Version") != DefaultAnthropicVersion || dst.Get("Anthropic-Beta") != "prompt-caching-2024-07-31" {
		t.Errorf("upstream headers %v", dst)
	}
	g.cfg.Anthropic.Version = "2099-01-01"
	dst = http.Header{}
	g.setAnthropicUpstream(dst, http.Header{"Anthropic-Version": {"2023-06-01"}})
	if dst.Get("Anthropic-Version") != "2023-06-01" {
		t.Errorf("the client's anthropic-version was replaced: %v", dst)
	}
	dst = http.Header{}
	g.setAnthropicUpstream(dst, http.Header{})
	if dst.Get("Anthropic-Version") != "2099-01-01" {
		t.Errorf("the configured anthropic-version was not sent: %v", dst)
	}
	for _, k := range []string{"Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset", "Anthropic-Organization-Id"} {
		if !dropResponseHeader(http.CanonicalHeaderKey(k)) {
			t.Errorf("dropResponseHeader(%s) = false; want true", k)
		}
	}
}

// The marker of a Messages API answer is found through the writers
// wrapped around it, and only there.
func TestAnthropicShaped(t *testing.T) {
	rec := httptest.NewRecorder()
	cw := &clientWriter{ResponseWriter: anthropicWriter{rec}}
	if !anthropicShaped(cw) || !anthropicShaped(anthropicWriter{rec}) || anthropicShaped(rec) || anthropicShaped(&clientWriter{ResponseWriter: rec}) {
		t.Error("anthropicShaped does not find the marker where it is, or finds it where it is not")
	}
	writeError(anthropicWriter{rec}, http.StatusTooManyRequests, "tokens", "tokens_limit_exceeded", "", "m")
	if got := rec.Body.String(); got != `{"type":"error","error":{"type":"rate_limit_error","message":"m"}}` {
		t.Errorf("writeError on a Messages route = %s", got)
	}
}
