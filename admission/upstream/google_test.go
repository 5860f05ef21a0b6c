package upstream

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestParseGoogleError reads a Gemini 429's RetryInfo and QuotaFailure
// details, and ignores what a hostile body puts there.
func TestParseGoogleError(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       GoogleError
	}{
		{"gemini 429", `{"error":{"code":429,"message":"You exceeded your current quota.","status":"RESOURCE_EXHAUSTED","details":[
			{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[
				{"quotaMetric":"generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count","quotaId":"GenerateContentPaidTierInputTokensPerModelPerMinute","quotaDimensions":{"location":"global","model":"gemini-2.5-pro"},"quotaValue":"2000000"},
				{"quotaMetric":"generativelanguage.googleapis.com/generate_content_paid_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel","quotaValue":"150"},
				{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier","quotaValue":"250000"}]},
			{"@type":"type.googleapis.com/google.rpc.Help","links":[{"url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},
			{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"13s"}]}}`,
			GoogleError{RetryAfter: 13 * time.Second, HasRetryAfter: true, Quotas: []GoogleQuota{{Tokens, 250000}, {Requests, 150}}}},
		{"fractional delay", `{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"0.500s"}]}}`,
			GoogleError{RetryAfter: 500 * time.Millisecond, HasRetryAfter: true}},
		{"hostile", `{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"999999999s"},
			{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"Tokens","quotaValue":"-5"},{"quotaId":"Tokens","quotaValue":"1e99"},{"quotaId":"Requests","quotaValue":"0"}]}]}}`,
			GoogleError{}},
		{"negative delay", `{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"-1s"}]}}`, GoogleError{}},
		{"not json", `<html>busy</html>`, GoogleError{}},
		{"openai shape", `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, GoogleError{}},
	} {
		if got := ParseGoogleError([]byte(tc.body)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: ParseGoogleError = %+v; want %+v", tc.name, got, tc.want)
		}
	}
}

// A Gemini 429 carries its retry delay and the quota it ran into in its
// body, not in headers.
func ExampleParseGoogleError() {
	body := []byte(`{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"You exceeded your current quota.","details":[
		{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count","quotaValue":"2000000"}]},
		{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"13s"}]}}`)
	ge := ParseGoogleError(body)
	fmt.Println(ge.RetryAfter, ge.Quotas[0].Dimension, ge.Quotas[0].Limit)
	// Output: 13s tokens 2000000
}
