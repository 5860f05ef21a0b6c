package upstream_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/upstream"
)

var received = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// fig builds a Figure with every field known; a negative field is unknown.
func fig(limit, remaining int64, reset time.Duration) upstream.Figure {
	return upstream.Figure{
		Limit: max(limit, 0), Remaining: max(remaining, 0), Reset: max(reset, 0),
		HasLimit: limit >= 0, HasRemaining: remaining >= 0, HasReset: reset >= 0,
	}
}

func TestParse(t *testing.T) {
	unknown := upstream.Figure{}
	tests := []struct {
		name   string
		h      http.Header
		status int
		want   upstream.Report
	}{
		{"openai", headers(
			"x-ratelimit-limit-requests", "10000", "x-ratelimit-remaining-requests", "9998", "x-ratelimit-reset-requests", "6m0s",
			"x-ratelimit-limit-tokens", "2000000", "x-ratelimit-remaining-tokens", "1999000", "x-ratelimit-reset-tokens", "59.1ms",
		), 200, upstream.Report{Figures: [4]upstream.Figure{fig(10000, 9998, 6*time.Minute), fig(2_000_000, 1_999_000, 59100*time.Microsecond)}}},
		{"openai reset in seconds and composite durations", headers(
			"x-ratelimit-reset-requests", "1s", "x-ratelimit-reset-tokens", "1h2m3.5s",
		), 200, upstream.Report{Figures: [4]upstream.Figure{fig(-1, -1, time.Second), fig(-1, -1, time.Hour+2*time.Minute+3500*time.Millisecond)}}},
		{"bare seconds", headers("x-ratelimit-reset-tokens", "20", "x-ratelimit-reset-requests", "0.5"),
			200, upstream.Report{Figures: [4]upstream.Figure{fig(-1, -1, 500*time.Millisecond), fig(-1, -1, 20*time.Second)}}},
		{"azure remaining only", headers("x-ratelimit-remaining-requests", "119", "x-ratelimit-remaining-tokens", "119000"),
			200, upstream.Report{Figures: [4]upstream.Figure{fig(-1, 119, -1), fig(-1, 119000, -1)}}},
		{"anthropic", headers(
			"Date", "Tue, 01 Dec 2026 12:00:00 GMT",
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49", "anthropic-ratelimit-requests-reset", "2026-12-01T12:00:01Z",
			"anthropic-ratelimit-tokens-limit", "100000", "anthropic-ratelimit-tokens-remaining", "90000", "anthropic-ratelimit-tokens-reset", "2026-12-01T12:00:06.5Z",
			"anthropic-ratelimit-input-tokens-limit", "80000", "anthropic-ratelimit-input-tokens-remaining", "75000", "anthropic-ratelimit-input-tokens-reset", "2026-12-01T12:00:06Z",
			"anthropic-ratelimit-output-tokens-limit", "20000", "anthropic-ratelimit-output-tokens-remaining", "15000", "anthropic-ratelimit-output-tokens-reset", "2026-12-01T13:00:06+01:00",
		), 200, upstream.Report{Figures: [4]upstream.Figure{fig(50, 49, time.Second), fig(100000, 90000, 6500*time.Millisecond), fig(80000, 75000, 6*time.Second), fig(20000, 15000, 6*time.Second)}}},
		// The provider's clock is 10 minutes behind: its reset instant is
		// 30s after its own Date, so 30s from receipt, not 10m30s ago.
		{"anthropic skew behind", headers(
			"Date", "Tue, 01 Dec 2026 11:50:00 GMT", "anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", "2026-12-01T11:50:30Z",
		), 429, upstream.Report{Throttled: true, Figures: [4]upstream.Figure{unknown, fig(-1, 0, 30*time.Second)}}},
		{"anthropic skew ahead", headers(
			"Date", "Tue, 01 Dec 2026 12:05:00 GMT", "anthropic-ratelimit-requests-reset", "2026-12-01T12:05:02Z",
		), 200, upstream.Report{Figures: [4]upstream.Figure{fig(-1, -1, 2*time.Second)}}},
		{"anthropic without date counts from receipt", headers("anthropic-ratelimit-requests-reset", "2026-12-01T12:00:03Z"),
			200, upstream.Report{Figures: [4]upstream.Figure{fig(-1, -1, 3*time.Second)}}},
		{"reset passed", headers("anthropic-ratelimit-requests-reset", "2026-12-01T11:00:00Z"),
			200, upstream.Report{Figures: [4]upstream.Figure{fig(-1, -1, 0)}}},
		{"both vendors: the tighter", headers(
			"x-ratelimit-limit-tokens", "1000", "x-ratelimit-remaining-tokens", "500", "x-ratelimit-reset-tokens", "1s",
			"anthropic-ratelimit-tokens-limit", "2000", "anthropic-ratelimit-tokens-remaining", "400", "anthropic-ratelimit-tokens-reset", "2026-12-01T12:00:05Z",
		), 200, upstream.Report{Figures: [4]upstream.Figure{unknown, fig(1000, 400, 5*time.Second)}}},
		{"429 retry-after seconds", headers("retry-after", "20"), 429,
			upstream.Report{Throttled: true, RetryAfter: 20 * time.Second, HasRetryAfter: true}},
		{"429 retry-after-ms wins", headers("retry-after", "20", "retry-after-ms", "1500.5"), 429,
			upstream.Report{Throttled: true, RetryAfter: 1500500 * time.Microsecond, HasRetryAfter: true}},
		{"503 retry-after date, provider clock", headers("Date", "Tue, 01 Dec 2026 11:00:00 GMT", "retry-after", "Tue, 01 Dec 2026 11:00:07 GMT"), 503,
			upstream.Report{Throttled: true, RetryAfter: 7 * time.Second, HasRetryAfter: true}},
		{"429 without retry-after", headers(), 429, upstream.Report{Throttled: true}},
		{"garbage ignored", headers(
			"x-ratelimit-limit-requests", "-5", "x-ratelimit-remaining-requests", "1e3", "x-ratelimit-reset-requests", "-1s",
			"x-ratelimit-limit-tokens", "99999999999999999999", "x-ratelimit-remaining-tokens", "2000000000000000", "x-ratelimit-reset-tokens", "NaN",
			"anthropic-ratelimit-requests-reset", "yesterday", "anthropic-ratelimit-tokens-reset", "2027-12-01T12:00:00Z",
			"retry-after", "Inf", "retry-after-ms", "NaN", "Date", "now",
		), 200, upstream.Report{}},
		{"waits beyond a day ignored", headers("x-ratelimit-reset-tokens", "25h", "x-ratelimit-reset-requests", "86401", "retry-after", "86401"), 429,
			upstream.Report{Throttled: true}},
		{"oversized value ignored", headers("x-ratelimit-remaining-tokens", strings.Repeat("1", 65)), 200, upstream.Report{}},
		{"surrounding space trimmed", headers("x-ratelimit-remaining-tokens", " 42 "), 200,
			upstream.Report{Figures: [4]upstream.Figure{unknown, fig(-1, 42, -1)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := upstream.Parse(tt.h.Get, tt.status, received)
			tt.want.Received = received
			if got != tt.want {
				t.Errorf("Parse = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}

// FuzzParse: whatever an upstream sends, Parse does not panic and every
// figure it keeps is within bounds.
func FuzzParse(f *testing.F) {
	f.Add("x-ratelimit-reset-tokens", "6m0s", "retry-after", "20", 429)
	f.Add("anthropic-ratelimit-tokens-reset", "2026-12-01T12:00:06Z", "Date", "Tue, 01 Dec 2026 12:00:00 GMT", 200)
	f.Add("retry-after-ms", "1e308", "x-ratelimit-remaining-requests", "9223372036854775807", 503)
	f.Add("retry-after", "Tue, 01 Dec 2126 12:00:00 GMT", "anthropic-ratelimit-requests-remaining", "-0", 429)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, status int) {
		h := headers(k1, v1, k2, v2)
		r := upstream.Parse(h.Get, status, received)
		for d, fg := range r.Figures {
			if fg.Limit < 0 || fg.Limit > limits.MaxAmount || fg.Remaining < 0 || fg.Remaining > limits.MaxAmount {
				t.Errorf("figure %d = %+v: amount out of [0, MaxAmount]", d, fg)
			}
			if fg.Reset < 0 || fg.Reset > upstream.MaxReset {
				t.Errorf("figure %d reset %v out of [0, MaxReset]", d, fg.Reset)
			}
		}
		if r.RetryAfter < 0 || r.RetryAfter > upstream.MaxReset {
			t.Errorf("retry-after %v out of [0, MaxReset]", r.RetryAfter)
		}
	})
}
