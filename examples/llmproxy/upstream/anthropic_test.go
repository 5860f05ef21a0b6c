package upstream

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/weights"
)

// The Messages API, as Anthropic shapes it: the prompt (4 tokens of
// system prompt marked for the cache, "hi", the message and reply
// overheads: 11) with its cached prefix written or read, 3 tokens out,
// in JSON and in events, the writes split by time to live (the prefix up
// to a one-hour cache_control written for an hour); count_tokens; errors
// in Anthropic's shape. The usage reads, through package weights, as the
// whole prompt with its cached part, and the one-hour writes, apart.
func TestMessagesShapes(t *testing.T) {
	srv := httptest.NewServer(New(Config{OutputTokens: 3, AnyModel: true}))
	defer srv.Close()
	const body = `{"model":"claude-sonnet-4-5","max_tokens":10,"system":[{"type":"text","text":"0123456789abcdef","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]`
	// The system prompt cached for an hour; then, in mixed, a message
	// (3 + 4 tokens) cached for five minutes after it.
	hour := strings.Replace(body, `{"type":"ephemeral"}`, `{"type":"ephemeral","ttl":"1h"}`, 1)
	mixed := strings.Replace(hour, `"content":"hi"`, `"content":[{"type":"text","text":"hi, rivers wind","cache_control":{"type":"ephemeral","ttl":"5m"}}]`, 1)
	for _, tc := range []struct {
		name, path, body, cache string
		status                  int
		want                    []string
		usage                   weights.Usage
	}{
		{"json/cache write", "/v1/messages", body + "}", "", 200,
			[]string{`"type":"message"`, `"stop_reason":"end_turn"`, `"input_tokens":7`, `"cache_creation_input_tokens":4`, `"cache_read_input_tokens":0`, `"output_tokens":3`,
				`"cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":4}`},
			weights.Usage{InputTokens: 11, CacheWriteInputTokens: 4, OutputTokens: 3}},
		{"json/cache write 1h", "/v1/messages", hour + "}", "", 200,
			[]string{`"cache_creation_input_tokens":4`, `"cache_creation":{"ephemeral_1h_input_tokens":4,"ephemeral_5m_input_tokens":0}`},
			weights.Usage{InputTokens: 11, CacheWriteInputTokens: 4, CacheWrite1hInputTokens: 4, OutputTokens: 3}},
		{"json/cache write 1h and 5m", "/v1/messages", mixed + "}", "", 200,
			[]string{`"input_tokens":3`, `"cache_creation_input_tokens":11`, `"cache_creation":{"ephemeral_1h_input_tokens":4,"ephemeral_5m_input_tokens":7}`},
			weights.Usage{InputTokens: 14, CacheWriteInputTokens: 11, CacheWrite1hInputTokens: 4, OutputTokens: 3}},
		{"stream/cache write 1h", "/v1/messages", hour + `,"stream":true}`, "", 200,
			[]string{"event: message_start", `"ephemeral_1h_input_tokens":4`, "event: message_stop"},
			weights.Usage{InputTokens: 11, CacheWriteInputTokens: 4, CacheWrite1hInputTokens: 4, OutputTokens: 3}},
		{"json/cache read", "/v1/messages", body + "}", "read", 200,
			[]string{`"input_tokens":7`, `"cache_creation_input_tokens":0`, `"cache_read_input_tokens":4`},
			weights.Usage{InputTokens: 11, CachedInputTokens: 4, OutputTokens: 3}},
		{"stream", "/v1/messages", body + `,"stream":true}`, "read", 200,
			[]string{"event: message_start", "event: content_block_start", "event: content_block_delta", `"text_delta"`,
				"event: content_block_stop", "event: message_delta", `"usage":{"output_tokens":3}`, "event: message_stop"},
			weights.Usage{InputTokens: 11, CachedInputTokens: 4, OutputTokens: 3}},
		{"max_tokens", "/v1/messages", strings.Replace(body, `"max_tokens":10`, `"max_tokens":2`, 1) + "}", "", 200,
			[]string{`"stop_reason":"max_tokens"`, `"output_tokens":2`}, weights.Usage{InputTokens: 11, CacheWriteInputTokens: 4, OutputTokens: 2}},
		{"count_tokens", "/v1/messages/count_tokens", body + "}", "", 200, []string{`{"input_tokens":11}`}, weights.Usage{}},
		{"no max_tokens", "/v1/messages", `{"model":"claude-sonnet-4-5","messages":[]}`, "", 400,
			[]string{`"type":"error"`, `"type":"invalid_request_error"`}, weights.Usage{}},
		{"not JSON", "/v1/messages", `{"model":`, "", 400, []string{`"type":"invalid_request_error"`}, weights.Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+tc.path, strings.NewReader(tc.body))
			if tc.cache != "" {
				req.Header.Set("X-Sim-Cache", tc.cache)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got weights.Usage
			var b []byte
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				sr := weights.NewStreamReader(resp.Body, weights.StreamConfig{InputTokens: 11, OutputTokens: 10})
				b, _ = io.ReadAll(sr)
				if res := sr.Result(); !res.Completed || !res.Reported {
					t.Errorf("stream result %+v: want completed with a usage report", res)
				}
				got = sr.Usage()
			} else {
				b, _ = io.ReadAll(resp.Body)
				if tc.usage != (weights.Usage{}) {
					rep, err := weights.ReadUsage(b)
					if err != nil {
						t.Fatal(err)
					}
					got = rep.Usage
				}
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d; want %d: %s", resp.StatusCode, tc.status, b)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("body lacks %s:\n%s", w, b)
				}
			}
			if got != tc.usage {
				t.Errorf("usage %+v; want %+v", got, tc.usage)
			}
		})
	}
}

// Faults in Anthropic's shape, the provider's limit headers on its 429.
func TestMessagesFaults(t *testing.T) {
	srv := httptest.NewServer(New(Config{AnyModel: true}))
	defer srv.Close()
	for fault, want := range map[string]struct {
		status int
		typ    string
	}{
		"500": {500, "api_error"}, "529": {529, "overloaded_error"}, "429": {429, "rate_limit_error"}, "401": {401, "authentication_error"},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("X-Sim-Fault", fault)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want.status || !strings.Contains(string(b), `"type":"`+want.typ+`"`) || !strings.Contains(string(b), `"type":"error"`) {
			t.Errorf("fault %s: %d %s; want %d %s", fault, resp.StatusCode, b, want.status, want.typ)
		}
		if fault == "429" && (resp.Header.Get("Retry-After") == "" || resp.Header.Get("Anthropic-Ratelimit-Requests-Remaining") != "0") {
			t.Errorf("429 headers %v; want retry-after and the provider's limit figures", resp.Header)
		}
	}
}
