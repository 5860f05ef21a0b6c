package gateway_test

import (
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/weights"
)

// quotaGateway serves a gateway whose tenant acme (key sk-acme) has a
// quota of quotaTokens tokens, in front of the upstream up; spent
// returns the tokens acme has been charged so far.
func quotaGateway(t *testing.T, up http.Handler) (url string, spent func() int64) {
	t.Helper()
	f, err := config.Parse("quota.yaml", []byte(`
policies:
  - {name: q, key: [tenant], unit: tokens, algorithm: quota, limit: 10M, per: 720h}
tenants:
  acme: {api_keys: [`+apikey.Sum("sk-acme").String()+`]}
identity: {anonymous: deny}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		t.Fatal(err)
	}
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	gw, err := gateway.New(ctl, est, f, gateway.Config{Upstream: us.URL + "/v1"}, gateway.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	gw.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL, func() int64 {
		t.Helper()
		sts, err := ctl.Remaining(context.Background(), admission.Request{Tenant: "acme", Operation: "POST " + gateway.OpChatCompletions}, nil)
		if err != nil || len(sts) != 1 {
			t.Fatalf("Remaining = %v, %v", sts, err)
		}
		return quotaTokens - sts[0].Remaining
	}
}

const quotaTokens = 10_000_000

// An upstream that compresses its answer though the gateway asked for
// none (it sends no Accept-Encoding) gives the gateway bytes it can
// neither meter nor rewrite. Passed on, a gzipped stream reached the
// client whole while the gateway, reading no event of it, charged the
// prompt alone: 300 words of output for free, past any token limit. Such
// an answer is refused as a bad upstream response: a 200 is charged as
// reserved (the provider generated it), an error nothing, and the client
// gets a readable 502, never the encoded bytes nor their
// Content-Encoding.
func TestEncodedUpstreamAnswersAreNotPassedUnmetered(t *testing.T) {
	chunk := `data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"` +
		strings.Repeat("word ", 100) + `"}}]}` + "\n\n"
	for _, tc := range []struct {
		name     string
		status   int
		ct, body string
		stream   bool
		charged  int64 // tokens; the reservation is 8 + 500
	}{
		{"stream", 200, "text/event-stream", chunk + chunk + chunk + "data: [DONE]\n\n", true, 508},
		{"answer", 200, "application/json", `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],` +
			`"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}}`, false, 508},
		{"error", 503, "application/json", `{"error":{"message":"overloaded","type":"server_error","code":null}}`, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, spent := quotaGateway(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if ae := r.Header.Get("Accept-Encoding"); ae != "" {
					t.Errorf("the gateway asked for Accept-Encoding %q", ae)
				}
				w.Header().Set("Content-Type", tc.ct)
				w.Header().Set("Content-Encoding", "gzip")
				w.WriteHeader(tc.status)
				zw := gzip.NewWriter(w)
				_, _ = io.WriteString(zw, tc.body)
				_ = zw.Close()
			}))
			stream := "false"
			if tc.stream {
				stream = "true"
			}
			req, _ := http.NewRequest(http.MethodPost, url+gateway.OpChatCompletions,
				strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":500,"stream":`+stream+`,"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer sk-acme")
			// Asked for by the client itself, an encoded answer reaches
			// the test as it is sent.
			req.Header.Set("Accept-Encoding", "gzip")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Encoding") != "" || !strings.Contains(string(b), `"code":"bad_upstream_response"`) {
				t.Errorf("answer: %d, Content-Encoding %q, %.200q; want a plain 502 bad_upstream_response",
					resp.StatusCode, resp.Header.Get("Content-Encoding"), b)
			}
			if got := spent(); got != tc.charged {
				t.Errorf("charged %d tokens; want %d", got, tc.charged)
			}
		})
	}
}
