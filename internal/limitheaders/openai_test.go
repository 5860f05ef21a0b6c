package limitheaders_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
)

func TestOpenAIHeaders(t *testing.T) {
	sts := []admission.Status{
		{Policy: "rpm", Algorithm: limits.TokenBucket, Limit: 600, Remaining: 599, Reset: 100 * time.Millisecond},
		{Policy: "rpd", Algorithm: limits.Quota, Limit: 10000, Remaining: 20, Reset: 6 * time.Hour},
		{Policy: "tpm", Unit: limits.UnitTokens, Algorithm: limits.SlidingWindow, Limit: 100000, Remaining: 4200, Reset: 16100 * time.Millisecond},
		{Policy: "inflight", Algorithm: limits.Concurrency, Limit: 2, Remaining: 0},
	}
	h := http.Header{}
	limitheaders.SetOpenAIHeaders(h, sts)
	want := map[string]string{
		"x-ratelimit-limit-requests":     "10000",
		"x-ratelimit-remaining-requests": "20",
		"x-ratelimit-reset-requests":     "6h0m0s",
		"x-ratelimit-limit-tokens":       "100000",
		"x-ratelimit-remaining-tokens":   "4200",
		"x-ratelimit-reset-tokens":       "16.1s",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q; want %q", k, got, v)
		}
	}
}

func TestRetryHints(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		retry    time.Duration
		deadline time.Time
		after    string
		ms       string
		should   string
	}{
		{1500 * time.Millisecond, time.Time{}, "2", "1500", "true"},
		{1500 * time.Millisecond, now.Add(10 * time.Second), "2", "1500", "true"},
		// Waiting would pass the deadline: do not retry, but say when.
		{20 * time.Second, now.Add(10 * time.Second), "20", "20000", "false"},
		{limits.Never, time.Time{}, "", "", "false"},
	}
	for _, tt := range tests {
		h := http.Header{}
		limitheaders.SetRetryHints(h, tt.retry, now, tt.deadline)
		if h.Get("Retry-After") != tt.after || h.Get("retry-after-ms") != tt.ms || h.Get("x-should-retry") != tt.should {
			t.Errorf("SetRetryHints(%v, deadline %v) = %v; want Retry-After %q, retry-after-ms %q, x-should-retry %q",
				tt.retry, tt.deadline, h, tt.after, tt.ms, tt.should)
		}
	}
}

func TestFormatReset(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{-time.Second, "0s"},
		{time.Microsecond, "1ms"},
		{17*time.Millisecond + 300*time.Microsecond, "18ms"},
		{time.Second, "1s"},
		{6 * time.Minute, "6m0s"},
		{6156 * time.Millisecond, "6.156s"},
		{time.Minute + 1500*time.Microsecond, "1m0.002s"},
		{time.Minute + 100*time.Microsecond, "1m0.001s"},
		{400 * time.Microsecond, "1ms"},
	} {
		if got := limitheaders.FormatReset(tc.d); got != tc.want {
			t.Errorf("limitheaders.FormatReset(%v) = %q; want %q", tc.d, got, tc.want)
		}
		if _, err := time.ParseDuration(limitheaders.FormatReset(tc.d)); err != nil {
			t.Errorf("limitheaders.FormatReset(%v) = %q is not a Go duration", tc.d, limitheaders.FormatReset(tc.d))
		}
	}
}
