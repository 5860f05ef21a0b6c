package weights

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// TestReadUsageCacheTTL reads the one-hour part of the cache writes in
// both APIs' shapes: Anthropic's cache_creation breakdown and Bedrock's
// cacheDetails list. The part is at most the writes; a breakdown that is
// absent or null means no one-hour writes; one that cannot be used makes
// the prompt unusable, so that the request is charged as reserved.
func TestReadUsageCacheTTL(t *testing.T) {
	anthropic := func(ttls string) string {
		return `{"type":"message","usage":{"input_tokens":25,"cache_creation_input_tokens":2048,"cache_read_input_tokens":100` + ttls + `,"output_tokens":7}}`
	}
	bedrock := func(details string) string {
		return `{"stopReason":"end_turn","usage":{"inputTokens":25,"outputTokens":7,"totalTokens":2180,"cacheReadInputTokens":100,"cacheWriteInputTokens":2048` + details + `}}`
	}
	split := func(long int64) Usage {
		return Usage{InputTokens: 2173, OutputTokens: 7, CachedInputTokens: 100, CacheWriteInputTokens: 2048, CacheWrite1hInputTokens: long}
	}
	tests := []struct {
		name, body string
		want       Usage
		input      UsageFallback
	}{
		{"anthropic split", anthropic(`,"cache_creation":{"ephemeral_5m_input_tokens":1024,"ephemeral_1h_input_tokens":1024}`), split(1024), FallbackNone},
		{"anthropic all 1h", anthropic(`,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":2048}`), split(2048), FallbackNone},
		{"anthropic all 5m", anthropic(`,"cache_creation":{"ephemeral_5m_input_tokens":2048,"ephemeral_1h_input_tokens":0}`), split(0), FallbackNone},
		{"anthropic missing", anthropic(``), split(0), FallbackNone},
		{"anthropic null", anthropic(`,"cache_creation":null`), split(0), FallbackNone},
		{"anthropic without 1h", anthropic(`,"cache_creation":{"ephemeral_5m_input_tokens":2048}`), split(0), FallbackNone},
		{"anthropic 1h null", anthropic(`,"cache_creation":{"ephemeral_1h_input_tokens":null}`), split(0), FallbackNone},
		{"anthropic 1h above the writes", anthropic(`,"cache_creation":{"ephemeral_1h_input_tokens":9000}`), split(2048), FallbackNone},
		{"anthropic 1h huge", anthropic(`,"cache_creation":{"ephemeral_1h_input_tokens":1e30}`), split(2048), FallbackNone},
		{"anthropic 1h fraction", anthropic(`,"cache_creation":{"ephemeral_1h_input_tokens":99.5}`), split(100), FallbackNone},
		{"anthropic 1h negative", anthropic(`,"cache_creation":{"ephemeral_1h_input_tokens":-1}`), split(0), FallbackNegative},
		{"anthropic 1h string", anthropic(`,"cache_creation":{"ephemeral_1h_input_tokens":"1024"}`), split(0), FallbackMalformed},
		{"anthropic not an object", anthropic(`,"cache_creation":[1024]`), split(0), FallbackMalformed},
		{"anthropic a number", anthropic(`,"cache_creation":1024`), split(0), FallbackMalformed},
		{"anthropic last key wins", anthropic(`,"cache_creation":{"ephemeral_1h_input_tokens":5},"cache_creation":{"ephemeral_1h_input_tokens":6}`), split(6), FallbackNone},

		{"bedrock split", bedrock(`,"cacheDetails":[{"ttl":"1h","inputTokens":1024},{"ttl":"5m","inputTokens":1024}]`), split(1024), FallbackNone},
		{"bedrock all 5m", bedrock(`,"cacheDetails":[{"ttl":"5m","inputTokens":2048}]`), split(0), FallbackNone},
		{"bedrock missing", bedrock(``), split(0), FallbackNone},
		{"bedrock empty", bedrock(`,"cacheDetails":[]`), split(0), FallbackNone},
		{"bedrock null", bedrock(`,"cacheDetails":null`), split(0), FallbackNone},
		{"bedrock entries summed", bedrock(`,"cacheDetails":[{"ttl":"1h","inputTokens":1000},{"inputTokens":24,"ttl":"1h"}]`), split(1024), FallbackNone},
		{"bedrock a longer ttl", bedrock(`,"cacheDetails":[{"ttl":"24h","inputTokens":512}]`), split(512), FallbackNone},
		{"bedrock 1h above the writes", bedrock(`,"cacheDetails":[{"ttl":"1h","inputTokens":2048},{"ttl":"1h","inputTokens":2048}]`), split(2048), FallbackNone},
		{"bedrock saturated", bedrock(`,"cacheDetails":[{"ttl":"1h","inputTokens":9223372036854775807},{"ttl":"1h","inputTokens":9223372036854775807}]`), split(2048), FallbackNone},
		{"bedrock 1h negative", bedrock(`,"cacheDetails":[{"ttl":"1h","inputTokens":-2048}]`), split(0), FallbackNegative},
		{"bedrock 5m negative", bedrock(`,"cacheDetails":[{"ttl":"5m","inputTokens":-2048}]`), split(0), FallbackNone},
		{"bedrock count a string", bedrock(`,"cacheDetails":[{"ttl":"1h","inputTokens":"2048"}]`), split(0), FallbackMalformed},
		{"bedrock not a list", bedrock(`,"cacheDetails":{"ttl":"1h","inputTokens":2048}`), split(0), FallbackMalformed},
		{"bedrock entry not an object", bedrock(`,"cacheDetails":[{"ttl":"1h","inputTokens":1},"1h"]`), split(0), FallbackMalformed},
	}
	est := Estimate{InputTokens: 3000, OutputTokens: 2048}
	for _, tt := range tests {
		rep, err := ReadUsage([]byte(tt.body))
		if err != nil || rep.Usage != tt.want || rep.Input != tt.input || rep.Output != FallbackNone {
			t.Errorf("%s: ReadUsage = %+v, %v; want %+v, input %v", tt.name, rep, err, tt.want, tt.input)
			continue
		}
		u, fb := est.CheckUsage(rep)
		switch {
		case tt.input == FallbackNone && (u != tt.want || fb != FallbackNone):
			t.Errorf("%s: CheckUsage = %+v, %v; want it unchanged", tt.name, u, fb)
		case tt.input != FallbackNone && (u.InputTokens != est.InputTokens || fb != tt.input):
			t.Errorf("%s: CheckUsage = %+v, %v; want the estimated prompt, %v", tt.name, u, fb, tt.input)
		}
	}
}

// TestCheckUsageCacheTTL: the one-hour writes a caller gives are clamped
// to the writes, and never below zero.
func TestCheckUsageCacheTTL(t *testing.T) {
	est := Estimate{InputTokens: 1000, OutputTokens: 100}
	for _, tt := range []struct {
		writes, long, want int64
	}{
		{500, 200, 200},
		{500, 900, 500},
		{500, -5, 0},
		{-1, 300, 0},
		{2000, math.MaxInt64, 1000}, // the writes are at most the prompt
	} {
		r := UsageReport{Usage: Usage{InputTokens: 1000, OutputTokens: 10, CacheWriteInputTokens: tt.writes, CacheWrite1hInputTokens: tt.long}}
		if u, _ := est.CheckUsage(r); u.CacheWrite1hInputTokens != tt.want {
			t.Errorf("CheckUsage(writes %d, 1h %d).CacheWrite1hInputTokens = %d; want %d", tt.writes, tt.long, u.CacheWrite1hInputTokens, tt.want)
		}
	}
}

// TestStreamCacheTTL reads the one-hour writes of both APIs' streams:
// Anthropic's message_start, and a ConverseStream's metadata event.
func TestStreamCacheTTL(t *testing.T) {
	withTTL := strings.Replace(anthropicStream, `"cache_read_input_tokens":1800,`,
		`"cache_read_input_tokens":1800,"cache_creation":{"ephemeral_5m_input_tokens":48,"ephemeral_1h_input_tokens":2000},`, 1)
	if withTTL == anthropicStream {
		t.Fatal("the fixture has no cache_read_input_tokens to extend")
	}
	_, res := readStream(t, strings.NewReader(withTTL), StreamConfig{InputTokens: 3000, OutputTokens: 1024})
	want := Usage{InputTokens: 3873, OutputTokens: 89, CachedInputTokens: 1800, CacheWriteInputTokens: 2048, CacheWrite1hInputTokens: 2000}
	if !res.Reported || res.Usage != want {
		t.Errorf("anthropic stream: Result() = %+v; want usage %+v", res, want)
	}

	stream := converseStream(`{"inputTokens":12,"outputTokens":14,"totalTokens":46,"cacheWriteInputTokens":20,"cacheDetails":[{"ttl":"1h","inputTokens":15},{"ttl":"5m","inputTokens":5}]}`)
	_, res = readStream(t, bytes.NewReader(stream), StreamConfig{EventStream: true, InputTokens: 30, OutputTokens: 100})
	want = Usage{InputTokens: 32, OutputTokens: 14, CacheWriteInputTokens: 20, CacheWrite1hInputTokens: 15}
	if !res.Completed || !res.Reported || res.Usage != want {
		t.Errorf("converse stream: Result() = %+v; want usage %+v", res, want)
	}
}

// TestPriceCostCacheTTL: one-hour cache writes are charged at
// CacheWrite1h, the other writes at CacheWrite; an unset one-hour price
// is the five-minute one (itself the input price when unset).
func TestPriceCostCacheTTL(t *testing.T) {
	sonnet := Price{Input: 3, Output: 15, CachedInput: 0.3, CacheWrite: 3.75, CacheWrite1h: 6}
	for _, tt := range []struct {
		price Price
		u     Usage
		want  int64
	}{
		// 2,000 uncached prompt tokens at $3, 1,000 read at $0.30, 4,000
		// written for five minutes at $3.75 and 3,000 for an hour at $6,
		// 100 out at $15: a dollar per million tokens is a micro-dollar
		// per token.
		{sonnet, Usage{InputTokens: 10_000, CachedInputTokens: 1000, CacheWriteInputTokens: 7000, CacheWrite1hInputTokens: 3000, OutputTokens: 100},
			2000*3 + 1000*0.3 + 4000*3.75 + 3000*6 + 100*15},
		// The same writes, all five-minute, cost less.
		{sonnet, Usage{InputTokens: 10_000, CachedInputTokens: 1000, CacheWriteInputTokens: 7000, OutputTokens: 100},
			2000*3 + 1000*0.3 + 7000*3.75 + 100*15},
		// A million one-hour tokens at twice the input price.
		{sonnet, Usage{InputTokens: 1_000_000, CacheWriteInputTokens: 1_000_000, CacheWrite1hInputTokens: 1_000_000}, 6_000_000},
		{Price{Input: 3, Output: 15, CacheWrite: 3.75}, Usage{InputTokens: 1000, CacheWriteInputTokens: 1000, CacheWrite1hInputTokens: 1000}, 3750},
		{Price{Input: 3, Output: 15}, Usage{InputTokens: 1000, CacheWriteInputTokens: 1000, CacheWrite1hInputTokens: 1000}, 3000},
		// At most the writes, never below zero.
		{sonnet, Usage{InputTokens: 1000, CacheWriteInputTokens: 400, CacheWrite1hInputTokens: 900}, 600*3 + 400*6},
		{sonnet, Usage{InputTokens: 1000, CacheWriteInputTokens: 400, CacheWrite1hInputTokens: -900}, 600*3 + 400*3.75},
		{sonnet, Usage{InputTokens: 1000, CachedInputTokens: 800, CacheWriteInputTokens: 800, CacheWrite1hInputTokens: 800}, 800*0.3 + 200*6},
		// A token at $0.50: half a micro-dollar, rounded up.
		{Price{Input: 0.25, CacheWrite: 0.3, CacheWrite1h: 0.5}, Usage{InputTokens: 1, CacheWriteInputTokens: 1, CacheWrite1hInputTokens: 1}, 1},
		{Price{Input: maxPrice, CacheWrite1h: maxPrice}, Usage{InputTokens: math.MaxInt64, CacheWriteInputTokens: math.MaxInt64, CacheWrite1hInputTokens: math.MaxInt64}, math.MaxInt64/picoPerMicro + 1},
	} {
		if got := tt.price.CostMicros(tt.u); got != tt.want {
			t.Errorf("%+v.CostMicros(%+v) = %d; want %d", tt.price, tt.u, got, tt.want)
		}
	}
	if got, want := sonnet.EstimateMicros(1000, 100), int64(1000*3+100*15); got != want {
		t.Errorf("EstimateMicros(1000, 100) = %d; want %d (an estimate is priced at the input price)", got, want)
	}
	if got, want := DefaultPrices()["claude-sonnet-4-5"].Batch().CacheWrite1h, 3.0; got != want {
		t.Errorf("Batch().CacheWrite1h = %g; want %g", got, want)
	}
	if _, err := NewPrices(map[string]Price{"m": {Input: 1, CacheWrite1h: -1}}); err == nil || !strings.Contains(err.Error(), `prices["m"].cache_write_1h`) {
		t.Errorf("NewPrices(cache_write_1h: -1) = %v; want an error naming prices[\"m\"].cache_write_1h", err)
	}
}

// TestBuiltinCacheWrite1h: every built-in entry with a cache-write price
// (Claude's) prices one-hour writes at twice its input price.
func TestBuiltinCacheWrite1h(t *testing.T) {
	n := 0
	for _, l := range BuiltinPrices() {
		p := l.Price
		if p.CacheWrite == 0 {
			continue
		}
		n++
		if p.CacheWrite1h != 2*p.Input {
			t.Errorf("%s: CacheWrite1h = %g; want %g (twice the input price)", l.Model, p.CacheWrite1h, 2*p.Input)
		}
	}
	if n == 0 {
		t.Error("no built-in entry has a cache-write price")
	}
}

// Reading a usage's cache writes split by time to live, in either shape,
// allocates nothing more than reading the same usage without the split.
func TestReadUsageCacheTTLAllocs(t *testing.T) {
	for _, tt := range []struct{ split, plain string }{
		{`{"type":"message","usage":{"input_tokens":25,"cache_creation_input_tokens":2048,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":1024,"ephemeral_1h_input_tokens":1024},"output_tokens":7}}`,
			`{"type":"message","usage":{"input_tokens":25,"cache_creation_input_tokens":2048,"cache_read_input_tokens":0,"output_tokens":7}}`},
		{`{"usage":{"inputTokens":25,"outputTokens":7,"cacheWriteInputTokens":2048,"cacheDetails":[{"ttl":"1h","inputTokens":1024},{"ttl":"5m","inputTokens":1024}]}}`,
			`{"usage":{"inputTokens":25,"outputTokens":7,"cacheWriteInputTokens":2048}}`},
	} {
		split, plain := []byte(tt.split), []byte(tt.plain)
		var long int64
		n := testing.AllocsPerRun(100, func() {
			rep, _ := ReadUsage(split)
			long = rep.Usage.CacheWrite1hInputTokens
		})
		base := testing.AllocsPerRun(100, func() { _, _ = ReadUsage(plain) })
		if n > base || long != 1024 {
			t.Errorf("ReadUsage(%s): %v allocations (%v without the split), %d one-hour writes; want at most %v and 1024", tt.split, n, base, long, base)
		}
	}
}
