package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// TestProviderAcceptedStreamNotCut: a stream reserves 5 output tokens
// (MaxOutputReserve) and produces 300, charged at every chunk; the provider's
// budget (100 tokens a minute, on the upstream store) runs out during it.
// The provider accepted the stream and charges it whatever happens, so it
// runs to its end, its overrun charged to the provider's budget (the next
// request waits for it); a tenant policy that runs out still cuts it.
func TestProviderAcceptedStreamNotCut(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tenantTPM string
		cut       bool
	}{
		{"provider budget only", "1M", false},
		{"tenant budget too", "100", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := admissiontest.NewClock(time.Now())
			sim := &lockstep{h: upstream.New(upstream.Config{OutputTokens: 300}, upstream.WithClock(clk))}
			sim.cond = sync.NewCond(&sim.mu)
			pg := newProviderGatewayOn(t, sim, `
stores:
  openai: {kind: upstream}
policies:
  - {name: provider-tpm, store: openai, key: [model], unit: tokens, algorithm: token_bucket, limit: 100, per: 1m}
  - {name: tenant-tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: `+tc.tenantTPM+`, per: 1m}
tenants:
  acme: {api_keys: [`+apikey.Sum("sk-acme").String()+`]}
identity: {anonymous: deny}
`, clk, nil, func(c *gateway.Config) { c.MaxOutputReserve, c.ChargeInterval = 5, time.Nanosecond })
			status, body, err := sim.send(pg.url, `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
			if err != nil {
				t.Fatal(err)
			}
			cut := strings.Contains(body, "tokens_limit_exceeded")
			if status != 200 || cut != tc.cut || cut == strings.Contains(body, "[DONE]") {
				t.Fatalf("status %d, cut %v: %s; want 200, cut %v", status, cut, body, tc.cut)
			}
			// The overrun was charged to the provider's budget: the next
			// request does not fit in it now.
			status, body, err = sendBody(pg.url, `{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "X-Stainless-Timeout", "0.05")
			if err != nil {
				t.Fatal(err)
			}
			if status != 429 {
				t.Errorf("the next request: status %d: %s; want 429 (the provider's budget is spent)", status, body)
			}
		})
	}
}

// lockstep serves h, passing a stream of send's request on one write at
// a time: each write waits until send's client has read every byte
// written before it, so that the gateway reads the stream chunk by chunk,
// as from a model generating it, however fast or loaded the machine
// (read at once, a whole stream would end before any charge could cut
// it).
type lockstep struct {
	h      http.Handler
	active atomic.Bool // send's request is on its way
	mu     sync.Mutex
	cond   *sync.Cond
	read   int64 // the bytes send's client has read
	closed bool  // send's client has read the whole answer
}

func (l *lockstep) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !l.active.Load() {
		l.h.ServeHTTP(w, r)
		return
	}
	l.h.ServeHTTP(&stepWriter{ResponseWriter: w, l: l}, r)
}

// send is sendBody, in lockstep with the upstream's writes.
func (l *lockstep) send(url, body string) (int, string, error) {
	l.active.Store(true)
	defer l.active.Store(false)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-acme")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		l.mu.Lock()
		l.read += int64(n)
		l.closed = err != nil
		l.cond.Broadcast()
		l.mu.Unlock()
		if err == io.EOF {
			return resp.StatusCode, string(got), nil
		}
		if err != nil {
			return resp.StatusCode, string(got), err
		}
	}
}

// stepWriter is the upstream's side of a lockstep.
type stepWriter struct {
	http.ResponseWriter
	l       *lockstep
	written int64
}

func (s *stepWriter) Write(p []byte) (int, error) {
	n, err := s.ResponseWriter.Write(p)
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	s.written += int64(n)
	s.l.mu.Lock()
	for s.l.read < s.written && !s.l.closed {
		s.l.cond.Wait()
	}
	s.l.mu.Unlock()
	return n, err
}

// Unwrap lets http.ResponseController reach the server's writer.
func (s *stepWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
