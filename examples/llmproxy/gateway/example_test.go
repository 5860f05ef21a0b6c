package gateway_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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

// The gateway inside a program's own echo server: a policy file, a
// controller built from it, an estimator, and the upstream (here the
// simulator). Register adds the OpenAI-compatible routes; a
// reload.Watcher would hand later versions of the file to gw.Apply.
func Example() {
	f, err := config.Parse("policies.yaml", []byte(`
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1, per: 1m}
tenants:
  acme: {api_keys: [`+apikey.Sum("sk-acme").String()+`]}
identity: {anonymous: deny}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	// A fake clock keeps the output exact; a program uses the default.
	ctl, _ := admission.New(f.Config, admission.WithClock(admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))))
	est, _ := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	up := httptest.NewServer(upstream.New(upstream.Config{OutputTokens: 5}))
	defer up.Close()
	gw, err := gateway.New(ctl, est, f, gateway.Config{
		Upstream: up.URL + "/v1",
	}, gateway.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	e := echo.New()
	gw.Register(e)
	srv := httptest.NewServer(e)
	defer srv.Close()

	for _, key := range []string{"sk-acme", "sk-acme", "sk-unknown"} {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			fmt.Println(resp.StatusCode, "remaining", resp.Header.Get("X-Ratelimit-Remaining-Requests"))
			continue
		}
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}
	// Output:
	// 200 remaining 0
	// 429 {"error":{"message":"Rate limit reached on requests per 1m0s (policy rpm): limit 1, remaining 0. Please try again in 1m0s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}
	// 401 {"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}
}
