package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/shadow/replay"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

// records parses a generated log, failing on any malformed record.
func records(t *testing.T, log string) []requestlog.Record {
	t.Helper()
	lr := requestlog.NewReader(strings.NewReader(log))
	var out []requestlog.Record
	for {
		var rec requestlog.Record
		err := lr.Read(&rec)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
}

func TestLoadgenDeterministic(t *testing.T) {
	args := []string{"loadgen", "--tenants", "5", "--rate", "200", "--duration", "5s", "--noisy-rate", "50", "--seed", "42"}
	code, a, errs := runArgs("", args...)
	if code != 0 {
		t.Fatalf("loadgen = %d: %s", code, errs)
	}
	if _, b, _ := runArgs("", args...); a != b {
		t.Error("the same seed gave different logs")
	}
	if _, c, _ := runArgs("", append(args[:len(args)-1:len(args)-1], "43")...); a == c {
		t.Error("another seed gave the same log")
	}
	recs := records(t, a)
	// 250 requests a second for 5 seconds, give or take Poisson noise.
	if n := len(recs); n < 1100 || n > 1400 {
		t.Errorf("%d records; want about 1250", n)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	byTenant := map[string]int{}
	for i, r := range recs {
		if i > 0 && r.Time.Before(recs[i-1].Time) {
			t.Fatalf("record %d is out of time order", i+1)
		}
		if r.Time.Before(start) || !r.Time.Before(start.Add(5*time.Second)) {
			t.Fatalf("record %d at %v, outside the 5 s from %v", i+1, r.Time, start)
		}
		if r.Tokens < 1 || !r.Actual.TokensKnown || r.Operation != "POST /v1/chat/completions" || !r.Addr.IsValid() {
			t.Fatalf("record %d: %+v", i+1, r)
		}
		byTenant[r.Tenant]++
	}
	// Zipf: the first tenant has the largest share; the noisy one about 20%.
	if byTenant["tenant-01"] <= byTenant["tenant-02"] || byTenant["tenant-02"] <= byTenant["tenant-05"] {
		t.Errorf("tenant shares are not skewed: %v", byTenant)
	}
	if n := byTenant["noisy"]; n < 200 || n > 300 {
		t.Errorf("noisy tenant sent %d; want about 250", n)
	}
	if code, out, _ := runArgs("", "loadgen", "--count", "7", "--seed", "42"); code != 0 || len(records(t, out)) != 7 {
		t.Errorf("loadgen --count 7 = %d and %d records", code, len(records(t, out)))
	}
}

// loadgen | replay is a pipeline.
func TestLoadgenPipeline(t *testing.T) {
	_, log, _ := runArgs("", "loadgen", "--rate", "100", "--duration", "10s", "--noisy-rate", "40")
	code, out, errs := runArgs(log, "replay", "--log", "-", "--config", current, "--config", candidate, "--format", "json")
	if code != 0 {
		t.Fatalf("replay of loadgen's log = %d: %s", code, errs)
	}
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Records != int64(len(records(t, log))) || rep.Reordered != 0 {
		t.Errorf("replayed %d records, %d reordered; the log has %d", rep.Records, rep.Reordered, len(records(t, log)))
	}
	if top := rep.Candidates[0].Policies[1].Tenants; len(top) == 0 || top[0].Tenant != "noisy" {
		t.Errorf("the noisy tenant is not the most rejected: %+v", top)
	}
}

func TestLoadgenUsage(t *testing.T) {
	for _, args := range [][]string{
		{"loadgen", "--zipf", "0.5"},
		{"loadgen", "--rate", "0"},
		{"loadgen", "--tenants", "0"},
		{"loadgen", "--start", "yesterday"},
		{"loadgen", "--target", "http://127.0.0.1:1"},
		{"loadgen", "--target", "ftp://x", "--keys", "k"},
		{"loadgen", "extra"},
	} {
		if code, out, errs := runArgs("", args...); code != 2 || out != "" || errs == "" {
			t.Errorf("%v = %d, %q, %q; want 2 and a message", args, code, out, errs)
		}
	}
	if code, _, errs := runArgs("", "loadgen", "--keys", filepath.Join(t.TempDir(), "none")); code != 1 || !strings.Contains(errs, "no such file") {
		t.Errorf("loadgen with a missing keys file = %d, %q; want 1", code, errs)
	}
}

// fakeLLM is an OpenAI-style endpoint on loopback: it answers 429 to the
// noisy tenant's key, 401 to unknown keys, 200 to the others, and records
// what it was sent.
type fakeLLM struct {
	mu       sync.Mutex
	bodies   []string
	byTenant map[string]int
	keys     map[string]string // key → tenant
}

func (f *fakeLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Model    string `json:"model"`
		Messages []struct {
			Role, Content string
		} `json:"messages"`
		MaxTokens int `json:"max_tokens"`
	}
	raw, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" || json.Unmarshal(raw, &body) != nil ||
		body.Model == "" || len(body.Messages) != 1 || body.MaxTokens < 1 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	tenant, ok := f.keys[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	f.mu.Lock()
	f.bodies = append(f.bodies, tenant+" "+string(raw))
	f.byTenant[tenant]++
	f.mu.Unlock()
	switch {
	case !ok:
		w.WriteHeader(http.StatusUnauthorized)
	case tenant == "noisy":
		w.WriteHeader(http.StatusTooManyRequests)
	default:
		w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"total_tokens":3}}`))
	}
}

func TestLoadgenHTTP(t *testing.T) {
	keys := map[string]string{"acme": "sk-test-acme", "globex": "sk-test-globex", "initech": "sk-test-initech", "noisy": "sk-test-noisy"}
	keyFile := filepath.Join(t.TempDir(), "keys.txt")
	os.WriteFile(keyFile, []byte("# tenant key\nacme sk-test-acme\nglobex sk-test-globex\n\ninitech sk-test-initech\nnoisy sk-test-noisy\n"), 0o600)
	byKey := map[string]string{}
	for tenant, k := range keys {
		byKey[k] = tenant
	}
	logArgs := []string{"loadgen", "--keys", keyFile, "--rate", "400", "--noisy-rate", "100", "--duration", "10s", "--tokens", "50", "--seed", "3"}
	httpArgs := func(target string, extra ...string) []string {
		return append(append(slices.Clone(logArgs), "--target", target, "--max-requests", "120", "--concurrency", "4"), extra...)
	}
	runHTTP := func(extra ...string) (*fakeLLM, string) {
		f := &fakeLLM{byTenant: map[string]int{}, keys: byKey}
		srv := httptest.NewServer(f) // 127.0.0.1
		defer srv.Close()
		code, out, errs := runArgs("", httpArgs(srv.URL, extra...)...)
		if code != 0 {
			t.Fatalf("loadgen --target = %d: %s", code, errs)
		}
		return f, out
	}
	f, out := runHTTP("--no-pace")
	if len(f.bodies) != 120 {
		t.Fatalf("the server got %d requests; want --max-requests 120", len(f.bodies))
	}
	if f.byTenant[""] != 0 || f.byTenant["noisy"] == 0 || f.byTenant["acme"] <= f.byTenant["initech"] {
		t.Errorf("requests by tenant: %v", f.byTenant)
	}
	for _, want := range []string{"sent 120 requests to http://127.0.0.1:", "/v1/chat/completions", "(concurrency 4)",
		"status 200: " + strconv.Itoa(120-f.byTenant["noisy"]), "status 429: " + strconv.Itoa(f.byTenant["noisy"]), "latency p50 "} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// The same seed sends the same requests (the order of arrival may vary).
	g, _ := runHTTP("--no-pace")
	a, b := slices.Sorted(slices.Values(f.bodies)), slices.Sorted(slices.Values(g.bodies))
	if !slices.Equal(a, b) {
		t.Error("the same seed sent different requests")
	}
	// Paced at the log's times: 120 requests at 500/s take about 0.24 s;
	// --max-time stops the run earlier. In a testing/synctest bubble, with
	// the requests answered in memory, the run ends at 100ms on the
	// bubble's clock, having sent the log's records due before then.
	code, log, errs := runArgs("", logArgs...)
	if code != 0 {
		t.Fatalf("loadgen = %d: %s", code, errs)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // --start's default
	due := 0
	for _, rec := range records(t, log) {
		if rec.Time.Sub(start) < 100*time.Millisecond {
			due++
		}
	}
	if due == 0 || due >= 120 {
		t.Fatalf("%d of the log's records are due in its first 100ms; want some, fewer than 120", due)
	}
	synctest.Test(t, func(t *testing.T) {
		h := &fakeLLM{byTenant: map[string]int{}, keys: byKey}
		var out, errb bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, transport: handlerTransport{h}}
		began := time.Now()
		code := run(context.Background(), e, httpArgs("http://llm.test", "--max-time", "100ms"))
		took := time.Since(began)
		if code != 0 {
			t.Fatalf("loadgen --max-time 100ms = %d: %s", code, errb.String())
		}
		if n := len(h.bodies); n != due || took != 100*time.Millisecond {
			t.Errorf("paced run with --max-time 100ms sent %d requests and ended after %v; want the %d due by then, after 100ms:\n%s", n, took, due, out.String())
		}
	})
}

// handlerTransport answers requests with an http.Handler, in memory.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, r)
	return w.Result(), nil
}

// With --keys and no target, the log's tenants are the file's and each
// record carries its key's id, never the key.
func TestLoadgenKeysLog(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys.txt")
	os.WriteFile(keyFile, []byte("acme sk-test-acme\nglobex sk-test-globex\n"), 0o600)
	code, out, errs := runArgs("", "loadgen", "--keys", keyFile, "--count", "50")
	if code != 0 {
		t.Fatalf("loadgen --keys = %d: %s", code, errs)
	}
	if strings.Contains(out, "sk-test") {
		t.Fatal("the log contains an API key")
	}
	for _, r := range records(t, out) {
		want := map[string]string{"acme": apikey.Sum("sk-test-acme").ID(), "globex": apikey.Sum("sk-test-globex").ID()}[r.Tenant]
		if want == "" || r.KeyID != want {
			t.Fatalf("record of tenant %q has key id %q; want %q", r.Tenant, r.KeyID, want)
		}
	}
}

// A redirect from the target is reported, not followed: loadgen sends
// only to the target it was given (a 307 would resend the request, its
// body and, to the same host, its key elsewhere).
func TestLoadgenNoRedirect(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys.txt")
	os.WriteFile(keyFile, []byte("acme sk-test-acme\n"), 0o600)
	var mu sync.Mutex
	hosts := map[string]int{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts[r.URL.Host]++
		mu.Unlock()
		http.Redirect(w, r, "http://elsewhere.test/v1/chat/completions", http.StatusTemporaryRedirect)
	})
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, transport: handlerTransport{h}}
	code := run(context.Background(), e, []string{"loadgen", "--keys", keyFile, "--target", "http://llm.test", "--max-requests", "5", "--no-pace"})
	if code != 0 {
		t.Fatalf("loadgen = %d: %s", code, errb.String())
	}
	if len(hosts) != 1 || hosts["llm.test"] != 5 {
		t.Errorf("requests by host %v; want 5, all to llm.test", hosts)
	}
	if !strings.Contains(out.String(), "status 307: 5") {
		t.Errorf("report does not count the redirects:\n%s", out.String())
	}
}
