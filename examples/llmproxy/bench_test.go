package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// The benchmarks compare the gateway with the least a proxy in its place
// must do, on the same loopback path: a client with keep-alive sends
// non-streaming chat requests with a 1 KB prompt through the proxy under
// test to the simulated upstream (answering at once), 8 requests in flight
// per CPU.
//
//	BenchmarkPeerReverseProxy          httputil.ReverseProxy, tuned transport
//	BenchmarkPeerReverseProxyTokenize  the same, plus a raw tiktoken-go count
//	                                   of the prompt: the least work of any
//	                                   token-aware gateway
//	BenchmarkProxy                     the gateway: estimate, three policies
//	                                   (requests/min, tokens/min, concurrency),
//	                                   metrics, settlement
//
// Each reports ns/op (wall time over requests, 8 in flight per CPU) and
// cpu-ns/op: the CPU time of the whole process per request, which is
// what to compare on a shared machine.
//
// Run: go test -run '^$' -bench . -benchmem ./examples/llmproxy

// benchPrompt is about 1 KB of English text.
var benchPrompt = func() string {
	const s = "The gateway admits each request against the tenant's limits before it reaches the model, " +
		"and settles the reservation with the usage the upstream reports once the answer is complete. "
	return strings.Repeat(s, 1024/len(s)+1)[:1024]
}()

var benchBody = func() []byte {
	b, _ := json.Marshal(map[string]any{
		"model":      "gpt-4o-mini",
		"max_tokens": 16,
		"messages":   []any{map[string]any{"role": "user", "content": benchPrompt}},
	})
	return b
}()

// benchUpstream is the simulated upstream shared by the benchmarks.
var benchUpstream = sync.OnceValue(func() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: upstream.New(upstream.Config{OutputTokens: 16})}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/v1"
})

// serve starts h on a loopback port for the benchmark.
func serve(b *testing.B, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// reverseProxy is the peer: httputil.ReverseProxy with the gateway's
// transport, rewriting /v1/... onto the upstream base URL.
func reverseProxy() *httputil.ReverseProxy {
	base, _ := url.Parse(benchUpstream())
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = base.Scheme, base.Host
			r.Out.URL.Path = base.Path + strings.TrimPrefix(r.In.URL.Path, "/v1")
			r.Out.Host = base.Host
		},
		Transport: gateway.NewTransport(),
	}
}

// drive sends the benchmark request to target, 8 in flight per CPU.
func drive(b *testing.B, target, key string) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256, IdleConnTimeout: time.Minute}}
	send := func() error {
		req, _ := http.NewRequest(http.MethodPost, target+"/v1/chat/completions", bytes.NewReader(benchBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return &statusError{resp.StatusCode}
		}
		return nil
	}
	if err := send(); err != nil { // warm up: connections, tokenizers
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(8)
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := send(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	// CPU time of the whole process (client, proxy and upstream) per
	// request: comparable between the peers even on a busy machine.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime returns the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "status " + http.StatusText(e.code) }

func BenchmarkPeerReverseProxy(b *testing.B) {
	drive(b, serve(b, reverseProxy()), "sk-bench")
}

func BenchmarkPeerReverseProxyTokenize(b *testing.B) {
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	enc, err := tiktoken.GetEncoding("o200k_base")
	if err != nil {
		b.Fatal(err)
	}
	rp := reverseProxy()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n := 0
		for _, m := range req.Messages {
			n += len(enc.Encode(m.Content, nil, nil))
		}
		if n == 0 {
			http.Error(w, "empty prompt", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	})
	drive(b, serve(b, h), "sk-bench")
}

// startBenchProxy starts the gateway of BenchmarkProxy: three policies
// (requests/min, tokens/min, concurrency) in front of the shared
// simulated upstream, with edits applied.
func startBenchProxy(b *testing.B, edits ...func(*options)) *server {
	return startProxy(b, append([]func(*options){withPolicy(b, `
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1G, per: 1m}
  - name: tpm
    match: {routes: [/v1/chat/completions], methods: [POST]}
    key: [tenant]
    unit: tokens
    algorithm: token_bucket
    limit: 1G
    per: 1m
  - {name: concurrency, key: [tenant], algorithm: concurrency, limit: 10000}
`, []string{"bench"}, ""), func(o *options) { o.gw.Upstream = benchUpstream() }}, edits...)...)
}

func BenchmarkProxy(b *testing.B) {
	drive(b, startBenchProxy(b).URL, testKey("bench"))
}

// BenchmarkProxyTracing is BenchmarkProxy with traces off, on with a
// sampler that records nothing (always_off), and on with one that
// records every request (always_on: a server span with its decision and
// settlement events and a client span per request, batched over
// OTLP/HTTP to a receiver that discards them).
func BenchmarkProxyTracing(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	b.Cleanup(sink.Close)
	for _, tc := range []struct{ name, sampler string }{{"off", ""}, {"unsampled", "always_off"}, {"sampled", "always_on"}} {
		b.Run(tc.name, func(b *testing.B) {
			b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
			b.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
			b.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			s := startBenchProxy(b, func(o *options) {
				if tc.sampler != "" {
					o.traces = sink.URL
				}
			})
			drive(b, s.URL, testKey("bench"))
		})
	}
}
