package gateway_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
)

// TestStreamCutBetweenEvents: a stream whose tenant runs out while an
// upstream event is only half read is cut between events, so the client
// gets whole events, then the error event (not half an event run into the
// error's line, which an SDK could not parse). When the client asked for
// the usage chunk itself, the gateway passes events on as they come and
// the cut waits for the half-read one to end; when the gateway asked for
// it (to strip it), an event being read is held back and the cut comes
// before it.
func TestStreamCutBetweenEvents(t *testing.T) {
	for _, tc := range []struct {
		name    string
		options string // the request's stream_options
		whole   int    // upstream events the client gets before the error
	}{
		{"the client's usage chunk", `,"stream_options":{"include_usage":true}`, 2},
		{"the gateway's usage chunk", ``, 1},
	} {
		t.Run(tc.name, func(t *testing.T) { streamCutBetweenEvents(t, tc.options, tc.whole) })
	}
}

func streamCutBetweenEvents(t *testing.T, options string, whole int) {
	long := strings.Repeat("word ", 200) // about 200 tokens: more than the tenant has
	chunk := func(text string) string {
		b, _ := json.Marshal(map[string]any{"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o",
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": text}}}})
		return "data: " + string(b) + "\n\n"
	}
	upstreamEvents := []string{chunk(long), chunk("and more")}
	half := len(upstreamEvents[1]) / 2
	seen := make(chan struct{}) // the client has the first bytes
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		flush := w.(http.Flusher).Flush
		w.WriteHeader(http.StatusOK)
		flush()
		time.Sleep(5 * time.Millisecond) // a charge is due at the first chunk
		_, _ = w.Write([]byte(upstreamEvents[0] + upstreamEvents[1][:half]))
		flush()
		<-seen
		_, _ = w.Write([]byte(upstreamEvents[1][half:]))
		flush()
		<-r.Context().Done() // the rest never comes: the cut ends the stream
	}))
	t.Cleanup(up.Close)
	srv := acmeGatewayConfig(t, `{name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 100, per: 1m}`,
		gateway.Config{Upstream: up.URL + "/v1", ChargeInterval: time.Millisecond})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o","max_tokens":5,"stream":true`+options+`,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer sk-acme")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		if events == nil {
			close(seen)
			events = []string{}
		}
		if l := sc.Text(); strings.HasPrefix(l, "data: ") {
			events = append(events, strings.TrimPrefix(l, "data: "))
		}
	}
	if len(events) != whole+1 {
		t.Fatalf("%d events: %.300q; want %d upstream events whole, then the error", len(events), events, whole)
	}
	for i, e := range events[:whole] {
		if want := strings.TrimSuffix(strings.TrimPrefix(upstreamEvents[i], "data: "), "\n\n"); e != want {
			t.Errorf("event %d: %.200q; want the upstream's whole", i, e)
		}
	}
	if e := events[whole]; !json.Valid([]byte(e)) || !strings.Contains(e, `"code":"tokens_limit_exceeded"`) {
		t.Errorf("the last event: %q; want the error", e)
	}
}
