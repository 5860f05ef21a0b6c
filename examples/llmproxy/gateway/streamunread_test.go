package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/shadow/requestlog"
	"github.com/sluicehq/sluice/weights"
)

// TestStreamUnreadEventChargedAsReserved: an upstream stream event too
// large for the gateway to read (over weights.DefaultMaxEventBytes) is
// passed to the client, but its text cannot be counted and a usage it
// carried is lost: the stream is then charged at least its reservation
// (the prompt and max_tokens), never only the text counted around it.
// A usage report after it is charged as reported when it is at least the
// reservation, and as reserved when it is less.
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
		{"usage after", chunk(huge) + usage("700") + done, func(n, _ int64) bool { return n == 708 }},
		// Nothing bounds a report after the unread text from below: one
		// of less than the reservation is raised to it.
		{"usage after, below the reservation", chunk(huge) + usage("1") + done, func(n, reserved int64) bool { return n == reserved }},
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

// TestStreamUnreadResponseChargedAsReserved: a Responses API stream whose
// response.completed event is too large to read (a long answer, images)
// loses the usage and the list of tool calls that event carries: it is
// settled at no less than its reservation, tool fees included, not at
// the tokens alone.
func TestStreamUnreadResponseChargedAsReserved(t *testing.T) {
	huge := strings.Repeat("word ", weights.DefaultMaxEventBytes/5+1<<18)
	typed := func(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }
	stream := typed("response.created", `{"type":"response.created","response":{"id":"resp_1","status":"in_progress","output":[],"usage":null}}`) +
		typed("response.output_text.delta", `{"type":"response.output_text.delta","delta":"Hi"}`) +
		typed("response.completed", `{"type":"response.completed","response":{"id":"resp_1","status":"completed","output":[`+
			`{"type":"web_search_call","id":"ws_1","status":"completed"},{"type":"message","content":[{"type":"output_text","text":"`+huge+`"}]}],`+
			`"usage":{"input_tokens":8,"output_tokens":2}}}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, stream)
	}))
	t.Cleanup(up.Close)
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	srv := acmeGatewayConfig(t, `{name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 100M}`,
		gateway.Config{Upstream: up.URL + "/v1"}, gateway.WithRequestLog(rl))
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/responses", strings.NewReader(
		`{"model":"gpt-4o-mini","input":"Search the news.","max_output_tokens":40,"stream":true,"tools":[{"type":"web_search"}]}`))
	req.Header.Set("Authorization", "Bearer sk-acme")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || n < int64(len(stream)) {
		t.Fatalf("status %d, %d bytes, %v; want the upstream's stream", resp.StatusCode, n, err)
	}
	recs := logged(t, rl, path, "POST /v1/responses", srv)
	if len(recs) != 1 || !recs[0].Actual.CostKnown || recs[0].Actual.Cost < recs[0].Cost {
		t.Fatalf("records %+v; want one, settled at no less than its reserved cost", recs)
	}
}
