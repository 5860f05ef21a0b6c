package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/internal/poll"
)

// startProxy starts the proxy on a free loopback port with the simulated
// upstream answering at once, applies edits to the options, and shuts it
// down when the test ends.
func startProxy(t testing.TB, edits ...func(*options)) *server {
	t.Helper()
	o := options{
		addr:            "127.0.0.1:0",
		metricsAddr:     "127.0.0.1:0",
		simLatency:      0,
		simRate:         0,
		simTokens:       20,
		shutdownTimeout: 5 * time.Second,
		cut:             "all",
		logLevel:        "error",
		logOutput:       io.Discard,
	}
	for _, e := range edits {
		e(&o)
	}
	s, err := start(o)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.shutdown(ctx)
	})
	return s
}

// withPolicy writes a policy file with the given policies section and
// tenants (each tenant's key is "sk-test-<tenant>") and points the proxy
// at it. extra is appended at the top level (plans, http settings).
func withPolicy(t testing.TB, policies string, tenants []string, extra string) func(*options) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writePolicy(t, path, policies, tenants, extra)
	return func(o *options) { o.configPath = path }
}

func writePolicy(t testing.TB, path, policies string, tenants []string, extra string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("version: 1\npolicies:\n")
	b.WriteString(policies)
	b.WriteString("\ntenants:\n")
	for _, tn := range tenants {
		b.WriteString("  " + tn + ":\n    api_keys: [" + apikey.Sum(testKey(tn)).String() + "]\n")
	}
	b.WriteString("identity:\n  anonymous: deny\n")
	b.WriteString(extra)
	// Write then rename, so a watcher never reads half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func testKey(tenant string) string { return "sk-test-" + tenant }

// sdk returns an official OpenAI client for the proxy with the given key
// and no retries unless opts say otherwise.
func sdk(s *server, key string, opts ...option.RequestOption) openai.Client {
	all := append([]option.RequestOption{
		option.WithBaseURL(s.URL + "/v1/"),
		option.WithAPIKey(key),
		option.WithMaxRetries(0),
		option.WithRequestTimeout(30 * time.Second),
	}, opts...)
	return openai.NewClient(all...)
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// chatParams is a small chat request.
func chatParams(text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    openai.ChatModelGPT4oMini,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
	}
}

// remaining returns what the tenant's partition of the policy has left, by
// asking the controller with a request of cost 0.
func remaining(t testing.TB, s *server, tenant, policy string) int64 {
	t.Helper()
	tk, err := s.ctl.TryAdmit(context.Background(), admission.Request{
		Tenant: tenant, Operation: "POST /v1/chat/completions", Model: "gpt-4o-mini",
	})
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	defer tk.Done()
	for _, st := range tk.Statuses(nil) {
		if st.Policy == policy {
			return st.Remaining
		}
	}
	t.Fatalf("probe: no status for policy %q", policy)
	return 0
}

// post sends a raw request to the proxy and returns the response and its
// body.
func post(t testing.TB, s *server, path, key, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 30*time.Second), http.MethodPost, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// apiError is the OpenAI error shape.
type apiError struct {
	Error struct {
		Message *string `json:"message"`
		Type    *string `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// checkError checks an answer is an OpenAI-shaped error with the status and
// code wanted.
func checkError(t testing.TB, what string, resp *http.Response, body []byte, status int, code string) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(body, &e); err != nil {
		t.Errorf("%s: body %q is not JSON: %v", what, body, err)
		return e
	}
	if resp.StatusCode != status {
		t.Errorf("%s: status = %d; want %d (body %s)", what, resp.StatusCode, status, body)
	}
	if e.Error.Message == nil || *e.Error.Message == "" || e.Error.Type == nil {
		t.Errorf("%s: body %s lacks error.message or error.type", what, body)
	}
	if got := deref(e.Error.Code); got != code {
		t.Errorf("%s: error.code = %q; want %q (body %s)", what, got, code, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type = %q; want application/json", what, ct)
	}
	return e
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// scrape returns the samples of the metrics, on the operator listener,
// whose name is name and whose labels include every label=value pair
// given, summed.
func scrape(t testing.TB, s *server, name string, labels ...string) float64 {
	t.Helper()
	v, _ := scrapeN(t, s, name, labels...)
	return v
}

// inflight returns the cost held by concurrency permits across policies,
// failing when the metric is missing.
func inflight(t testing.TB, s *server) float64 {
	t.Helper()
	v, n := scrapeN(t, s, "admission_inflight")
	if n == 0 {
		t.Fatal("/metrics has no admission_inflight")
	}
	return v
}

// scrapeN is scrape that also returns the number of samples summed.
func scrapeN(t testing.TB, s *server, name string, labels ...string) (float64, int) {
	t.Helper()
	n := 0
	resp, err := http.Get(s.OpsURL + s.file.Metrics.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(rest, labels[i]+`="`+labels[i+1]+`"`) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err == nil {
			sum += v
			n++
		}
	}
	return sum, n
}

// eventually waits until cond holds, with no deadline (package poll),
// logging every d that it still waits.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, d, what, cond)
}

// statusOf returns the HTTP status of an SDK error, 0 for none.
func statusOf(err error) int {
	var ae *openai.Error
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}

func codeOf(err error) string {
	var ae *openai.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}
