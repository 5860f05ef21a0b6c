package weights

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
)

// ok is the report of a usage with both counts read.
func ok(in, out int64) UsageReport {
	return UsageReport{Usage: Usage{InputTokens: in, OutputTokens: out}}
}

func TestReadUsage(t *testing.T) {
	chat := func(usage string) string {
		return `{"id":"x","object":"chat.completion","choices":[],"usage":` + usage + `}`
	}
	counts := func(in, out string) string {
		return chat(`{"prompt_tokens":` + in + `,"completion_tokens":` + out + `}`)
	}
	tests := []struct {
		name, body string
		want       UsageReport
	}{
		{"chat", chat(testUsage), UsageReport{Usage: testUsageWant}},
		{"embeddings", `{"object":"list","data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}`, UsageReport{Usage: Usage{InputTokens: 8}, Output: FallbackMissing}},
		{"responses", `{"object":"response","usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":10},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":123}}`,
			UsageReport{Usage: Usage{InputTokens: 36, OutputTokens: 87, CachedInputTokens: 10, ReasoningTokens: 64}}},
		{"responses event", `{"type":"response.completed","response":{"usage":{"input_tokens":1,"output_tokens":2}}}`, ok(1, 2)},
		{"total only", `{"usage":{"total_tokens":9}}`, UsageReport{Usage: Usage{InputTokens: 9}, Output: FallbackMissing}},
		{"no usage", `{"choices":[]}`, noReport},
		{"null usage", `{"usage":null}`, noReport},
		{"empty usage", `{"usage":{}}`, noReport},
		{"response not an object", `{"response":"done"}`, noReport},
		// Every JSON number form reads; a fraction rounds up.
		{"exponent", counts("1e3", "2E2"), ok(1000, 200)},
		{"float", counts("1000.0", "0.5"), ok(1000, 1)},
		{"exponent fraction", counts("1.5e1", "2.5e-1"), ok(15, 1)},
		{"minus zero", counts("-0", "-0.0"), ok(0, 0)},
		// Huge counts read saturated, for the plausibility check to judge.
		{"1e18 integer", counts("1000000000000000000", "1"), ok(1_000_000_000_000_000_000, 1)},
		{"1e18", counts("1e18", "1"), ok(1_000_000_000_000_000_000, 1)},
		{"beyond int64", counts("100000000000000000000000", "1e400"), ok(math.MaxInt64, math.MaxInt64)},
		// Bad counts are recorded, never an error.
		{"negative", counts("-1", "5"), UsageReport{Usage: Usage{OutputTokens: 5}, Input: FallbackNegative}},
		{"negative exponent", counts("3", "-1e18"), UsageReport{Usage: Usage{InputTokens: 3}, Output: FallbackNegative}},
		{"huge negative", counts("-100000000000000000000", `"-Infinity"`), UsageReport{Input: FallbackNegative, Output: FallbackMalformed}},
		{"string", counts(`"12"`, "4"), UsageReport{Usage: Usage{OutputTokens: 4}, Input: FallbackMalformed}},
		{"NaN-ish", counts(`"NaN"`, "true"), UsageReport{Input: FallbackMalformed, Output: FallbackMalformed}},
		{"object count", counts(`{}`, `[1]`), UsageReport{Input: FallbackMalformed, Output: FallbackMalformed}},
		{"null count", counts("null", "7"), UsageReport{Usage: Usage{OutputTokens: 7}, Input: FallbackMissing}},
		{"usage a string", chat(`"lots"`), malformedReport},
		{"usage a list", chat(`[1,2]`), malformedReport},
		{"usage a number", chat(`12`), malformedReport},
		// Bad details are dropped, the counts kept.
		{"bad details", chat(`{"prompt_tokens":4,"completion_tokens":2,"prompt_tokens_details":"x","completion_tokens_details":{"reasoning_tokens":-3}}`), ok(4, 2)},
		{"response usage bad", `{"response":{"usage":"x"}}`, malformedReport},
	}
	for _, tt := range tests {
		got, err := ReadUsage([]byte(tt.body))
		if err != nil || got != tt.want {
			t.Errorf("%s: ReadUsage(%s) = %+v, %v; want %+v, nil", tt.name, tt.body, got, err, tt.want)
		}
	}
	for _, body := range []string{``, `[]`, `"usage"`, `{"usage":`, `{"usage":{"prompt_tokens":1e}}`, "{\"usage\":{\"prompt_tokens\":1}}\x00", `{"usage":null} x`} {
		if got, err := ReadUsage([]byte(body)); err == nil || got != malformedReport {
			t.Errorf("ReadUsage(%q) = %+v, %v; want the malformed report and an error", body, got, err)
		}
	}
}

func TestCheckUsage(t *testing.T) {
	est := Estimate{InputTokens: 100, OutputTokens: 200}
	reserved := Usage{InputTokens: 100, OutputTokens: 200, Estimated: true}
	maxIn := int64(4*100 + UsageSlack)
	maxOut := int64(200 + UsageSlack)
	tests := []struct {
		name string
		est  Estimate
		rep  UsageReport
		want Usage
		fb   UsageFallback
	}{
		{"as reported", est, ok(120, 30), Usage{InputTokens: 120, OutputTokens: 30}, FallbackNone},
		{"at the bounds", est, ok(maxIn, maxOut), Usage{InputTokens: maxIn, OutputTokens: maxOut}, FallbackNone},
		{"lowest input", est, ok(1, 0), Usage{InputTokens: 1}, FallbackNone},
		{"no usage", est, noReport, reserved, FallbackMissing},
		{"not JSON", est, malformedReport, reserved, FallbackMalformed},
		{"input above", est, ok(maxIn+1, 30), Usage{InputTokens: 100, OutputTokens: 30, Estimated: true}, FallbackImplausibleInput},
		{"input 1e18", est, ok(1e18, 30), Usage{InputTokens: 100, OutputTokens: 30, Estimated: true}, FallbackImplausibleInput},
		{"files priced high", Estimate{InputTokens: 300_000, OutputTokens: 100}, ok(9_000, 100), Usage{InputTokens: 9_000, OutputTokens: 100}, FallbackNone},
		{"nothing estimated", Estimate{}, ok(0, 0), Usage{}, FallbackNone},
		{"zero input", est, ok(0, 0), Usage{InputTokens: 100, Estimated: true}, FallbackImplausibleInput},
		{"output above", est, ok(120, maxOut+1), Usage{InputTokens: 120, OutputTokens: 200, Estimated: true}, FallbackImplausibleOutput},
		{"output saturated", est, ok(120, math.MaxInt64), Usage{InputTokens: 120, OutputTokens: 200, Estimated: true}, FallbackImplausibleOutput},
		{"negative input", est, UsageReport{Usage: Usage{OutputTokens: 30}, Input: FallbackNegative}, Usage{InputTokens: 100, OutputTokens: 30, Estimated: true}, FallbackNegative},
		{"malformed output", est, UsageReport{Usage: Usage{InputTokens: 120}, Output: FallbackMalformed}, Usage{InputTokens: 120, OutputTokens: 200, Estimated: true}, FallbackMalformed},
		{"missing output", est, UsageReport{Usage: Usage{InputTokens: 120}, Output: FallbackMissing}, Usage{InputTokens: 120, OutputTokens: 200, Estimated: true}, FallbackMissing},
		{"both bad: the prompt's reason", est, UsageReport{Input: FallbackMalformed, Output: FallbackNegative}, reserved, FallbackMalformed},
		{"implausible both", est, ok(1e18, 1e18), reserved, FallbackImplausibleInput},
		// A Usage built by the caller is checked too.
		{"caller's negative", est, ok(-5, -1), reserved, FallbackNegative},
		// An embedding reserves no output and reports none.
		{"embedding", Estimate{InputTokens: 8}, UsageReport{Usage: Usage{InputTokens: 8}, Output: FallbackMissing}, Usage{InputTokens: 8}, FallbackNone},
		{"embedding without usage", Estimate{InputTokens: 8}, noReport, Usage{InputTokens: 8, Estimated: true}, FallbackMissing},
		// Parts are clamped to their whole.
		{"cached above input", est, UsageReport{Usage: Usage{InputTokens: 120, OutputTokens: 30, CachedInputTokens: 500, ReasoningTokens: 40}},
			Usage{InputTokens: 120, OutputTokens: 30, CachedInputTokens: 120, ReasoningTokens: 30}, FallbackNone},
		{"negative parts", est, UsageReport{Usage: Usage{InputTokens: 120, OutputTokens: 30, CachedInputTokens: -1, ReasoningTokens: -1}},
			Usage{InputTokens: 120, OutputTokens: 30}, FallbackNone},
		{"cached of a replaced input", est, UsageReport{Usage: Usage{InputTokens: 1e18, OutputTokens: 30, CachedInputTokens: 1e17}},
			Usage{InputTokens: 100, OutputTokens: 30, Estimated: true}, FallbackImplausibleInput},
		// A huge estimate saturates its bound instead of wrapping.
		{"huge estimate", Estimate{InputTokens: math.MaxInt64 / 2, OutputTokens: math.MaxInt64}, ok(math.MaxInt64, math.MaxInt64),
			Usage{InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64}, FallbackNone},
	}
	for _, tt := range tests {
		got, fb := tt.est.CheckUsage(tt.rep)
		if got != tt.want || fb != tt.fb {
			t.Errorf("%s: %+v.CheckUsage(%+v) = %+v, %v; want %+v, %v", tt.name, tt.est, tt.rep, got, fb, tt.want, tt.fb)
		}
	}
}

// TestCheckUsageFallbackUncached: a prompt count that cannot be used is
// charged as the admission reserved it, all of it uncached input; the
// cache figures of the same report do not make it cheaper nor take it out
// of an input-tokens limit.
func TestCheckUsageFallbackUncached(t *testing.T) {
	est := Estimate{InputTokens: 1000, OutputTokens: 100}
	for _, usage := range []string{
		`{"prompt_tokens":-1,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":1000}}`,
		`{"prompt_tokens":1e18,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":1e17}}`,
		`{"prompt_tokens":0,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":900}}`,
		`{"input_tokens":"many","cache_read_input_tokens":100000,"output_tokens":5}`,
		`{"input_tokens":10,"cache_read_input_tokens":1e19,"cache_creation_input_tokens":50,"output_tokens":5}`,
		`{"input_tokens":-1,"cache_creation_input_tokens":800,"cache_creation":{"ephemeral_1h_input_tokens":800},"output_tokens":5}`,
	} {
		rep, err := ReadUsage([]byte(`{"usage":` + usage + `}`))
		if err != nil {
			t.Fatal(err)
		}
		u, fb := est.CheckUsage(rep)
		want := TokenUnits{Input: 1000, Output: 5}
		if got := u.Units(); got != want || fb == FallbackNone || u.CacheWriteInputTokens != 0 || u.CacheWrite1hInputTokens != 0 {
			t.Errorf("usage %s: CheckUsage = %+v (units %+v), %v; want units %+v and no cache figures, with a fallback", usage, u, got, fb, want)
		}
	}
}

// TestUntrustedResponseUsage is the regression test of hostile usage in a
// JSON response: every body below is valid JSON, so it reads without an
// error (the client gets it), and what is charged stays within the
// request's plausible range and is never nothing.
func TestUntrustedResponseUsage(t *testing.T) {
	e := newTestEstimator(t)
	est, err := e.Estimate("/v1/chat/completions", []byte(`{"model":"gpt-4o-mini","max_tokens":50,"messages":[{"role":"user","content":"Say hello"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, usage := range []string{
		`{"prompt_tokens":1000000000000000000,"completion_tokens":5}`,
		`{"prompt_tokens":9223372036854775807,"completion_tokens":9223372036854775807}`,
		`{"prompt_tokens":-1,"completion_tokens":5}`,
		`{"prompt_tokens":1e18,"completion_tokens":1e18}`,
		`{"prompt_tokens":10,"completion_tokens":-9223372036854775808}`,
		`{"prompt_tokens":"10","completion_tokens":"5"}`,
		`{"input_tokens":1e400,"output_tokens":-1e400}`,
		`{"prompt_tokens":0,"completion_tokens":0}`,
		`"a lot"`,
		`{}`,
	} {
		body := `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"message":{"role":"assistant","content":"Hello"}}],"usage":` + usage + `}`
		rep, err := ReadUsage([]byte(body))
		if err != nil {
			t.Errorf("ReadUsage(usage %s) error %v; want none: the response is valid JSON", usage, err)
		}
		u, fb := est.CheckUsage(rep)
		if fb == FallbackNone {
			t.Errorf("usage %s: CheckUsage = %+v, none; want a fallback", usage, u)
		}
		if err := usageWithin(est, 0, u); err != nil {
			t.Errorf("usage %s: %v", usage, err)
		}
		if u.InputTokens < 1 {
			t.Errorf("usage %s: charged %+v; want at least the prompt", usage, u)
		}
	}
}

// usageWithin reports whether u is in the plausible range CheckUsage
// documents for est (and streamed tokens of output text).
func usageWithin(est Estimate, streamed int64, u Usage) error {
	in, out := max(est.InputTokens, 0), max(est.OutputTokens, 0)
	switch {
	case u.InputTokens < min(in, 1) || u.InputTokens > satAdd(satMul(in, UsageFactor), UsageSlack):
		return fmt.Errorf("input %d outside [%d, 4×%d+slack]", u.InputTokens, min(in, 1), in)
	case u.OutputTokens < streamed/UsageFactor || u.OutputTokens > satAdd(max(out, streamed), UsageSlack):
		return fmt.Errorf("output %d outside [%d, %d+slack]", u.OutputTokens, streamed/UsageFactor, max(out, streamed))
	case u.CachedInputTokens < 0 || u.CachedInputTokens > u.InputTokens || u.ReasoningTokens < 0 || u.ReasoningTokens > u.OutputTokens,
		u.CacheWriteInputTokens < 0 || u.CacheWriteInputTokens > u.InputTokens-u.CachedInputTokens,
		u.CacheWrite1hInputTokens < 0 || u.CacheWrite1hInputTokens > u.CacheWriteInputTokens:
		return fmt.Errorf("parts outside their counts: %+v", u)
	}
	return nil
}

// TestUntrustedStreamUsage: the same hostile counts in a stream's usage
// chunk are checked against the reservation and the streamed text, and a
// report far below the streamed text is implausible.
func TestUntrustedStreamUsage(t *testing.T) {
	words := strings.Fields(corpusText(englishCorpus, 2000, 5))
	deltas := make([]string, len(words))
	for i, w := range words {
		deltas[i] = " " + w
	}
	tests := []struct {
		usage string
		fb    UsageFallback
	}{
		{`{"prompt_tokens":12,"completion_tokens":480}`, FallbackNone},
		{`{"prompt_tokens":1000000000000000000,"completion_tokens":480}`, FallbackImplausibleInput},
		{`{"prompt_tokens":-1,"completion_tokens":480}`, FallbackNegative},
		{`{"prompt_tokens":12,"completion_tokens":1e18}`, FallbackImplausibleOutput},
		{`{"prompt_tokens":12,"completion_tokens":0}`, FallbackImplausibleOutput},
		{`{"prompt_tokens":12,"completion_tokens":"many"}`, FallbackMalformed},
		{`[]`, FallbackMalformed},
	}
	for _, tt := range tests {
		in := chatStream(deltas, tt.usage, true, "\n")
		cfg := StreamConfig{InputTokens: 10, OutputTokens: 300, StripUsage: true}
		s := NewStreamReader(bytes.NewReader(in), cfg)
		out, err := io.ReadAll(s)
		if err != nil {
			t.Fatal(err)
		}
		res, streamed := s.Result(), s.StreamedTokens()
		if res.Fallback != tt.fb || !res.Reported || res.Stripped != 1 || bytes.Contains(out, []byte(`"choices":[],"usage"`)) {
			t.Errorf("usage %s: Result() = %+v; want fallback %v, reported and stripped", tt.usage, res, tt.fb)
		}
		if err := usageWithin(Estimate{InputTokens: 10, OutputTokens: 300}, streamed, res.Usage); err != nil {
			t.Errorf("usage %s: %v", tt.usage, err)
		}
		if tt.fb != FallbackNone && tt.fb != FallbackImplausibleInput && tt.fb != FallbackNegative && res.Usage.OutputTokens != max(300, streamed) {
			t.Errorf("usage %s: output %d; want the larger of the reservation and the streamed text, %d", tt.usage, res.Usage.OutputTokens, max(300, streamed))
		}
	}
}

func TestUsageFallbackString(t *testing.T) {
	want := []string{"none", "missing", "malformed", "negative", "implausible_input", "implausible_output", "unknown"}
	for i, w := range want {
		if got := UsageFallback(i).String(); got != w {
			t.Errorf("UsageFallback(%d).String() = %q; want %q", i, got, w)
		}
	}
}

// FuzzReadUsage: for any body and estimate, reading never panics, an error
// comes only with the malformed report, and the checked usage is never
// negative and never outside the documented bounds; a report charged as is
// is exactly what was read.
func FuzzReadUsage(f *testing.F) {
	f.Add([]byte(`{"usage":`+testUsage+`}`), int64(19), int64(10))
	f.Add([]byte(`{"usage":{"input_tokens":1,"output_tokens":2,"input_tokens_details":{"cached_tokens":1}}}`), int64(1), int64(4096))
	f.Add([]byte(`{"response":{"usage":{"total_tokens":3}}}`), int64(3), int64(0))
	f.Add([]byte(`{"usage":{"prompt_tokens":1e18,"completion_tokens":-1}}`), int64(100), int64(200))
	f.Add([]byte(`{"usage":{"prompt_tokens":1000.5,"completion_tokens":"7"}}`), int64(-4), int64(math.MaxInt64))
	f.Add([]byte(`{"usage":null}`), int64(0), int64(0))
	f.Add([]byte(anthropicResponse), int64(3000), int64(1024))
	f.Add([]byte(`{"usage":{"input_tokens":3,"cache_creation_input_tokens":-1,"cache_read_input_tokens":"x","output_tokens":2}}`), int64(3), int64(2))
	f.Add([]byte(`{"usage":{"input_tokens":3,"cache_creation_input_tokens":5,"cache_creation":{"ephemeral_1h_input_tokens":9},"output_tokens":2}}`), int64(8), int64(2))
	f.Add([]byte(`{"usage":{"inputTokens":3,"outputTokens":2,"cacheWriteInputTokens":5,"cacheDetails":[{"ttl":"1h","inputTokens":4},{"ttl":"5m","inputTokens":-1}]}}`), int64(8), int64(2))
	f.Fuzz(func(t *testing.T, body []byte, in, out int64) {
		rep, err := ReadUsage(body)
		if err != nil && rep != malformedReport {
			t.Fatalf("ReadUsage error %v with report %+v", err, rep)
		}
		if u := rep.Usage; u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.ReasoningTokens < 0 ||
			u.CacheWrite1hInputTokens < 0 || u.CacheWrite1hInputTokens > u.CacheWriteInputTokens {
			t.Fatalf("negative count read: %+v", rep)
		}
		est := Estimate{InputTokens: in, OutputTokens: out}
		u, fb := est.CheckUsage(rep)
		if err := usageWithin(est, 0, u); err != nil {
			t.Fatalf("CheckUsage(%+v) = %+v, %v: %v", rep, u, fb, err)
		}
		if fb == FallbackNone && (u.InputTokens != rep.Usage.InputTokens || u.OutputTokens != rep.Usage.OutputTokens || u.Estimated) {
			t.Fatalf("CheckUsage(%+v) = %+v changed an accepted report", rep, u)
		}
		if !rep.Found() && fb != FallbackMissing && fb != FallbackMalformed {
			t.Fatalf("CheckUsage of no usage = %+v, %v; want a fallback", u, fb)
		}
		if fb != FallbackNone && u.InputTokens != max(in, 0) && u.OutputTokens != max(out, 0) {
			t.Fatalf("CheckUsage(%+v) = %+v, %v: a fallback replaced nothing", rep, u, fb)
		}
	})
}

// A gateway checks what the upstream reported against the request before
// it settles, and counts the fallbacks.
func ExampleEstimate_CheckUsage() {
	est := Estimate{InputTokens: 120, OutputTokens: 400} // as reserved
	for _, body := range []string{
		`{"object":"chat.completion","usage":{"prompt_tokens":118,"completion_tokens":3.5e1}}`,
		`{"object":"chat.completion","usage":{"prompt_tokens":1e18,"completion_tokens":35}}`,
		`{"object":"chat.completion","usage":{"prompt_tokens":-1,"completion_tokens":"35"}}`,
		`{"object":"chat.completion"}`,
	} {
		rep, err := ReadUsage([]byte(body)) // err only when the body is not JSON
		u, fb := est.CheckUsage(rep)
		fmt.Println(u.InputTokens, u.OutputTokens, fb, err)
	}
	// Output:
	// 118 35 none <nil>
	// 120 35 implausible_input <nil>
	// 120 400 negative <nil>
	// 120 400 missing <nil>
}
