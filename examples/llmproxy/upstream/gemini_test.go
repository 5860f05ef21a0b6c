package upstream

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
)

// The simulator serves the Gemini API: generateContent with its
// usageMetadata, a stream of chunks (alt=sse) whose last has the
// finishReason and the whole usage, countTokens, and Google's 429 with
// RetryInfo and QuotaFailure, under a fault or past Config.Limits.
func TestGeminiSimulator(t *testing.T) {
	clk := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	s := httptest.NewServer(New(Config{OutputTokens: 4, ChunkTokens: 1, Limits: Limits{Requests: 4, Window: time.Minute}}, WithClock(clk)))
	defer s.Close()
	post := func(path string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1beta/models/gemini-2.5-flash"+path, strings.NewReader(`{"contents":[{"role":"user","parts":[{"text":"Why is the sky blue?"}]}]}`))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.WriteString(string(buf[:n]))
			if err != nil {
				break
			}
		}
		return resp, b.String()
	}
	var one struct {
		Candidates []struct {
			FinishReason string
			Content      struct{ Parts []struct{ Text string } }
		}
		UsageMetadata struct{ PromptTokenCount, CandidatesTokenCount, ThoughtsTokenCount, TotalTokenCount int }
	}
	resp, b := post(":generateContent", "X-Sim-Reasoning-Tokens", "7")
	if err := json.Unmarshal([]byte(b), &one); err != nil || resp.StatusCode != 200 || len(one.Candidates) != 1 || one.Candidates[0].FinishReason != "STOP" {
		t.Fatalf("generateContent: %d %s (%v)", resp.StatusCode, b, err)
	}
	u := one.UsageMetadata
	if u.PromptTokenCount != 3+3+1+5 || u.CandidatesTokenCount != 4 || u.ThoughtsTokenCount != 7 || u.TotalTokenCount != u.PromptTokenCount+11 {
		t.Errorf("usage %+v; want a prompt of 12, 4 out, 7 thoughts", u)
	}
	resp, b = post(":streamGenerateContent?alt=sse")
	events := strings.Split(strings.TrimSpace(b), "\n\n")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || len(events) != 5 ||
		!strings.Contains(events[4], `"finishReason":"STOP"`) || !strings.Contains(events[4], `"candidatesTokenCount":4`) {
		t.Errorf("stream: %d %q; want 4 chunks of text and a last with the finish reason and usage", resp.StatusCode, events)
	}
	if resp, b = post(":countTokens"); resp.StatusCode != 200 || strings.TrimSpace(b) != `{"totalTokens":12}` {
		t.Errorf("countTokens: %d %q", resp.StatusCode, b)
	}
	resp, b = post(":generateContent", "X-Sim-Fault", "429", "X-Sim-Retry-After", "13")
	if resp.StatusCode != 429 || !strings.Contains(b, `"status":"RESOURCE_EXHAUSTED"`) || !strings.Contains(b, `"retryDelay":"13s"`) || !strings.Contains(b, "QuotaFailure") {
		t.Errorf("fault 429: %d %s", resp.StatusCode, b)
	}
	post(":generateContent")
	post(":generateContent") // the fourth request of the minute (countTokens and faults are not counted)
	resp, b = post(":generateContent")
	if resp.StatusCode != 429 || !strings.Contains(b, `"quotaValue":"4"`) || !strings.Contains(b, "RetryInfo") || resp.Header.Get("X-Ratelimit-Limit-Requests") != "" {
		t.Errorf("past the limits: %d %s %v; want Google's 429 on the requests quota, no headers", resp.StatusCode, b, resp.Header)
	}
}
