package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
)

// TestStreamEndedNotCut: a stream whose whole answer, [DONE] included,
// arrives in one read, and whose charge then finds the tenant's quota
// spent, is not cut: nothing is left to cut, and an error event after
// [DONE] would be read by no client (or break one). Its overrun is
// charged when it settles: the next request is refused, the quota spent.
// Before, the
// error event was written after [DONE].
func TestStreamEndedNotCut(t *testing.T) {
	var stream strings.Builder
	for range 10 {
		stream.WriteString(`data: {"choices":[{"index":0,"delta":{"content":" word"}}]}` + "\n\n")
	}
	stream.WriteString(`data: {"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":300}}` + "\n\n")
	stream.WriteString("data: [DONE]\n\n")
	if stream.Len() > 1500 {
		t.Fatalf("the answer is %d bytes: it must fit in one write and one of the gateway's reads (2 KiB)", stream.Len())
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		// One write, headers and all, when the handler returns.
		_, _ = io.WriteString(w, stream.String())
	}))
	t.Cleanup(up.Close)
	srv := acmeGatewayConfig(t, `{name: tokens, key: [tenant], unit: tokens, algorithm: quota, period: month, limit: 200}`,
		gateway.Config{Upstream: up.URL + "/v1", ChargeInterval: time.Nanosecond})
	post := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-acme")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	status, body := post(`{"model":"gpt-4o","max_tokens":50,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	if status != http.StatusOK || body != stream.String() {
		t.Fatalf("status %d, answer %q; want 200 and the upstream's answer unchanged, ending with [DONE]", status, body)
	}
	if status, body := post(`{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`); status != http.StatusForbidden || !strings.Contains(body, "quota_exceeded") {
		t.Errorf("the next request: status %d: %s; want 403 quota_exceeded, the overrun charged", status, body)
	}
}
