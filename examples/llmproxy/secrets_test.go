package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

// The password planted in every configured URL, which no output may show.
const plantedPassword = "hunter2pw"

// TestConfiguredSecretsNotEchoed plants a password in each URL the proxy
// is configured with (upstreams, Redis, OTLP, the directory's database,
// the policy file's webhook), malformed and well formed, and reads every
// output: the start error, the log, the banner, and after a refused
// reload the status page, its JSON and the metrics.
func TestConfiguredSecretsNotEchoed(t *testing.T) {
	const bad = "http://alice:" + plantedPassword + "@127.0.0.1:9x/"
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared.yaml")
	if err := os.WriteFile(shared, []byte("policies:\n  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m, store: shared}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	postgres := filepath.Join(dir, "postgres.yaml")
	if err := os.WriteFile(postgres, []byte("policies:\n  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m}\ndirectory: {source: postgres, dsn_env: LLMPROXY_TEST_SECRET_DSN}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LLMPROXY_TEST_SECRET_DSN", "postgres://alice:"+plantedPassword+"@127.0.0.1:9x/sluice")
	for _, tt := range []struct {
		name string
		edit func(*options)
	}{
		{"upstream", func(o *options) { o.gw.Upstream = bad }},
		{"anthropic upstream", func(o *options) { o.gw.Anthropic.Upstream = bad }},
		{"redis URL", func(o *options) { o.configPath, o.redis = shared, "redis://alice:"+plantedPassword+"@127.0.0.1:9x/0" }},
		{"redis address", func(o *options) { o.configPath, o.redis = shared, "alice:"+plantedPassword+"@127.0.0.1:6379" }},
		{"otlp endpoint", func(o *options) { o.otlp.endpoint = bad }},
		{"directory dsn", func(o *options) { o.configPath = postgres }},
		{"webhook", withPolicy(t, "  - {name: spend, key: tenant, algorithm: quota, period: month, limit: 500, warn: [80%]}\n", nil,
			"budgets:\n  webhook: {url: \""+bad+"\", secret_env: LLMPROXY_TEST_SECRET_ENV}\n")},
	} {
		var log syncbuf.Buffer
		o := options{addr: "127.0.0.1:0", metricsAddr: "127.0.0.1:0", cut: "all", logLevel: "debug", logOutput: &log, shutdownTimeout: 5 * time.Second}
		tt.edit(&o)
		s, err := start(o)
		if err == nil {
			_ = s.shutdown(context.Background())
			t.Errorf("%s: start succeeded; want it refused", tt.name)
			continue
		}
		if out := err.Error() + log.String(); strings.Contains(out, plantedPassword) {
			t.Errorf("%s: the password is shown:\n%s", tt.name, out)
		}
	}

	// Well-formed URLs with credentials: the banner shows them redacted.
	var log syncbuf.Buffer
	s := startProxy(t, func(o *options) {
		o.gw.Upstream = "http://alice:" + plantedPassword + "@127.0.0.1:1/v1"
		o.otlp.endpoint = "http://alice:" + plantedPassword + "@127.0.0.1:1"
		o.logOutput, o.logLevel = &log, "debug"
	}, withPolicy(t, "  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m}\n", []string{"acme"}, ""))
	var banner bytes.Buffer
	s.banner(&banner)
	if !strings.Contains(banner.String(), "http://alice:xxxxx@127.0.0.1:1/v1") {
		t.Errorf("banner does not show the upstream redacted:\n%s", &banner)
	}
	// A reload of a file with the malformed webhook URL is refused.
	writePolicy(t, s.opts.configPath, "  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m}\n", []string{"acme"},
		"budgets:\n  webhook: {url: \""+bad+"\", secret_env: LLMPROXY_TEST_SECRET_ENV}\n")
	rerr := s.watcher.Reload()
	if rerr == nil {
		t.Fatal("reload of the malformed webhook URL applied; want it refused")
	}
	outputs := map[string]string{"banner": banner.String(), "reload error": rerr.Error()}
	for _, path := range []string{"/status", "/status.json", s.file.Metrics.Path} {
		resp, err := http.Get(s.OpsURL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		outputs[path] = string(b)
	}
	if want := config.RedactURL(bad); !strings.Contains(outputs["/status.json"], want) {
		t.Errorf("/status.json does not show the refused reload with %s:\n%.2000s", want, outputs["/status.json"])
	}
	outputs["log"] = log.String()
	for what, out := range outputs {
		if strings.Contains(out, plantedPassword) {
			t.Errorf("%s shows the password:\n%.2000s", what, out)
		}
	}
}

// TestBodySecretsNotLogged: the credentials a body carries for the
// provider to use (a Messages request's mcp_servers authorization_token,
// a Responses mcp tool's authorization and headers) reach neither the
// log, at debug level, nor the request log, whether the request is
// served or refused.
func TestBodySecretsNotLogged(t *testing.T) {
	const secret = "mcpsecret7"
	var log syncbuf.Buffer
	reqLog := filepath.Join(t.TempDir(), "requests.jsonl")
	s := startProxy(t, func(o *options) {
		o.logOutput, o.logLevel, o.requestLog = &log, "debug", reqLog
	}, withPolicy(t, rpmPolicy, []string{"a"}, ""))
	messages := `{"model":"claude-sonnet-4-5","max_tokens":16,"mcp_servers":[{"type":"url","url":"https://mcp.example.com/sse","name":"x","authorization_token":"` + secret + `"}],"messages":[{"role":"user","content":"Hi"}]%s}`
	responses := `{"model":"gpt-4o-mini","max_output_tokens":16,"input":"Hi","tools":[{"type":"mcp","server_label":"x","server_url":"https://mcp.example.com","authorization":"` + secret + `","headers":{"X-Key":"` + secret + `"}}]%s}`
	for _, tc := range []struct {
		path, body string
		code       int
	}{
		{"/v1/messages", fmt.Sprintf(messages, ""), 200},
		{"/v1/messages", fmt.Sprintf(messages, `,"max_tokens":1`), 400},
		{"/v1/responses", fmt.Sprintf(responses, ""), 200},
		{"/v1/responses", fmt.Sprintf(responses, `,"MAX_OUTPUT_TOKENS":1`), 400},
	} {
		resp, b := post(t, s, tc.path, testKey("a"), tc.body)
		if resp.StatusCode != tc.code {
			t.Errorf("%s: %d %s; want %d", tc.path, resp.StatusCode, b, tc.code)
		}
		if strings.Contains(string(b), secret) {
			t.Errorf("%s: the answer shows the secret: %s", tc.path, b)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(reqLog)
	if err != nil || !bytes.Contains(written, []byte(`"decision":"rejected"`)) && !bytes.Contains(written, []byte("begin_only")) {
		t.Fatalf("request log: %v\n%.2000s", err, written)
	}
	for what, out := range map[string]string{"log": log.String(), "request log": string(written)} {
		if strings.Contains(out, secret) {
			t.Errorf("the %s shows the secret:\n%.2000s", what, out)
		}
	}
}
