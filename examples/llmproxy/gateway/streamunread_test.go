package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/weights"
)

// TestStreamUnreadEventChargedAsReserved: an upstream stream event too
// large for the gateway to read (over weights.DefaultMaxEventBytes) is
// passed to the client, but its text cannot be counted and a usage it
// carried is lost: the stream is then charged at least its reservation
// (the prompt and max_tokens), never only the text counted around it.
// A usage report after it is still charged as reported.
func TestStreamUnreadEventChargedAsReserved(t *testing.T) {
	huge := strings.Repeat("word ", weights.DefaultMaxEventBytes/5+1<<18) // about 1.3M tokens, 5 MiB
	chunk := func(content string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"` + content + `"}}]}` + "\n\n"
	}
	usage := func(completion string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o","choices":[],"usage":{"prompt_tokens":8,"completion_tokens":` + completion + `}}` + "\n\n"
	}
	const done = "data: [DONE]\n\n"
	for _, tc := range []struct {
		name     string
		upstream string
		charged  func(n, reserved int64) bool
	}{
		{"no usage", chunk("Hi") + chunk(huge) + done, func(n, reserved int64) bool { return n >= reserved }},
		{"cut", chunk("Hi") + chunk(huge), func(n, reserved int64) bool { return n >= reserved }},
		{"oversized usage", chunk("Hi") + strings.TrimSuffix(usage("400"), "}\n\n") + `,"pad":"` + huge + `"}` + "\n\n" + done,
			func(n, reserved int64) bool { return n >= reserved }},
		{"usage after", chunk(huge) + usage("300") + done, func(n, _ int64) bool { return n == 308 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				if calls.Add(1) == 1 {
					_, _ = io.WriteString(w, tc.upstream)
					return
				}
				_, _ = io.WriteString(w, chunk("Hi")+usage("1")+done)
			}))
			t.Cleanup(up.Close)
			srv := acmeGatewayConfig(t, `{name: tokens, key: [tenant], unit: tokens, algorithm: quota, period: month, limit: 10M}`,
				gateway.Config{Upstream: up.URL + "/v1"})
			const body = `{"model":"gpt-4o","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
			// The remaining tokens a response shows are net of its own
			// reservation: between two identical requests, they fall by
			// what the first was charged.
			left := func() int64 {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer sk-acme")
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", resp.StatusCode)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					t.Fatal(err)
				}
				return remainingTokens(t, resp)
			}
			first := left()
			charged := first - left()
			if reserved := 10_000_000 - first; !tc.charged(charged, reserved) {
				t.Errorf("charged %d tokens (%d reserved)", charged, reserved)
			}
		})
	}
}
