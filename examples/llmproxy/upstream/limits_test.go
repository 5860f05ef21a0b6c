package upstream

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
)

// The rolling window: requests and tokens per model are refused past
// what is left with OpenAI's 429 and headers, every answer carries the
// figures, and the budgets come back continuously, full a window after
// they were spent.
func TestLimits(t *testing.T) {
	// A chat request of "hi" costs 3+3+1 = 7 prompt tokens plus its output.
	const chat = `{"model":"%s","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`
	type step struct {
		at        time.Duration // since the start
		model     string
		out       int
		status    int
		remaining [2]string // requests, tokens
		reset     string    // of tokens
		retryMs   string    // on a 429
	}
	tests := []struct {
		name   string
		limits Limits
		steps  []step
	}{
		{"tokens", Limits{Requests: 100, Tokens: 50, Window: 10 * time.Second}, []step{
			{at: 0, out: 13, status: 200, remaining: [2]string{"99", "30"}, reset: "4s"},
			// 5 tokens a second come back.
			{at: time.Second, out: 13, status: 200, remaining: [2]string{"99", "15"}, reset: "7s"},
			// 20 tokens do not fit in 17.5: in 0.5s they do.
			{at: 1500 * time.Millisecond, out: 13, status: 429, remaining: [2]string{"100", "17"}, reset: "6.5s", retryMs: "500"},
			{at: 2 * time.Second, out: 13, status: 200, remaining: [2]string{"99", "0"}, reset: "10s"},
			// Each model has its own budgets.
			{at: 2 * time.Second, model: "gpt-4o-mini", out: 13, status: 200, remaining: [2]string{"99", "30"}, reset: "4s"},
		}},
		{"requests", Limits{Requests: 4, Window: 4 * time.Second}, []step{
			{status: 200, remaining: [2]string{"3", ""}},
			{status: 200, remaining: [2]string{"2", ""}},
			{status: 200, remaining: [2]string{"1", ""}},
			{status: 200, remaining: [2]string{"0", ""}},
			{at: 500 * time.Millisecond, status: 429, remaining: [2]string{"0", ""}, retryMs: "500"},
			{at: time.Second, status: 200, remaining: [2]string{"0", ""}},
		}},
		// An estimate from characters: (3+3+2 bytes) / 0.5 = 16 prompt
		// tokens, where the usage counts 7; at 8 bytes a token, 1.
		{"counted from characters", Limits{Tokens: 1000, CharsPerToken: 0.5}, []step{
			{out: 13, status: 200, remaining: [2]string{"", "971"}},
		}},
		{"counted from characters, below the usage", Limits{Tokens: 1000, CharsPerToken: 8}, []step{
			{out: 13, status: 200, remaining: [2]string{"", "986"}},
		}},
		{"larger than the limit", Limits{Tokens: 10, Window: time.Minute}, []step{
			{at: 0, out: 20, status: 429, remaining: [2]string{"", "10"}, reset: "0s", retryMs: "60000"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := admissiontest.NewClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
			start := clk.Now()
			sim := New(Config{Limits: tc.limits}, WithClock(clk))
			srv := httptest.NewServer(sim)
			defer srv.Close()
			refused := int64(0)
			for i, s := range tc.steps {
				clk.Advance(start.Add(s.at).Sub(clk.Now()))
				model := s.model
				if model == "" {
					model = "gpt-4o"
				}
				body := strings.NewReader(strings.NewReplacer("%s", model, "%d", itoa(s.out)).Replace(chat))
				resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", body)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				h := resp.Header
				if resp.StatusCode != s.status {
					t.Fatalf("step %d: status %d; want %d: %s", i, resp.StatusCode, s.status, b)
				}
				if got := [2]string{h.Get("X-Ratelimit-Remaining-Requests"), h.Get("X-Ratelimit-Remaining-Tokens")}; got != s.remaining {
					t.Errorf("step %d: remaining %q; want %q", i, got, s.remaining)
				}
				if s.reset != "" && h.Get("X-Ratelimit-Reset-Tokens") != s.reset {
					t.Errorf("step %d: reset-tokens %q; want %q", i, h.Get("X-Ratelimit-Reset-Tokens"), s.reset)
				}
				if got := h.Get("Retry-After-Ms"); got != s.retryMs {
					t.Errorf("step %d: retry-after-ms %q; want %q", i, got, s.retryMs)
				}
				if s.status == 429 {
					refused++
					if !strings.Contains(string(b), `"code":"rate_limit_exceeded"`) || h.Get("Retry-After") == "" {
						t.Errorf("step %d: 429 without OpenAI's shape or retry-after: %s %v", i, b, h)
					}
				}
			}
			if sim.Limited() != refused {
				t.Errorf("Limited() = %d; want %d", sim.Limited(), refused)
			}
		})
	}
}

// Without Limits the simulator sends no limit headers and refuses
// nothing.
func TestNoLimits(t *testing.T) {
	srv := httptest.NewServer(New(Config{}))
	defer srv.Close()
	for range 3 {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-4o","messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Limit-Tokens") != "" {
			t.Fatalf("status %d, headers %v; want 200 without limit headers", resp.StatusCode, resp.Header)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// The tokens limit counts a request as OpenAI's does when it accepts it:
// max_tokens when the request sets one, whatever it then generates, else
// Limits.DefaultMaxTokens, else the output it generates.
func TestLimitsCountOutputLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits Limits
		body   string
		want   string // remaining tokens after the request
	}{
		// "hi": 7 prompt tokens; the simulator generates 32 tokens.
		{"max_tokens above the output", Limits{Tokens: 1000}, `{"model":"gpt-4o","max_tokens":300,"messages":[{"role":"user","content":"hi"}]}`, "693"},
		{"max_tokens below the output", Limits{Tokens: 1000}, `{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "988"},
		{"no max_tokens, a default", Limits{Tokens: 1000, DefaultMaxTokens: 256}, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "737"},
		{"no max_tokens, two choices", Limits{Tokens: 1000, DefaultMaxTokens: 256}, `{"model":"gpt-4o","n":2,"messages":[{"role":"user","content":"hi"}]}`, "481"},
		{"no max_tokens, no default", Limits{Tokens: 1000}, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "961"},
		{"max_completion_tokens over a default", Limits{Tokens: 1000, DefaultMaxTokens: 256}, `{"model":"gpt-4o","max_completion_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, "983"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(New(Config{Limits: tc.limits}))
			defer srv.Close()
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("X-Ratelimit-Remaining-Tokens"); resp.StatusCode != 200 || got != tc.want {
				t.Errorf("status %d, remaining tokens %q; want 200, %q", resp.StatusCode, got, tc.want)
			}
		})
	}
}
