package weights

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestPriceCost(t *testing.T) {
	gpt4o := Price{Input: 2.5, Output: 10, CachedInput: 1.25}
	sonnet := Price{Input: 3, Output: 15, CachedInput: 0.3, CacheWrite: 3.75}
	tests := []struct {
		price Price
		u     Usage
		want  int64
	}{
		// A dollar per million tokens is a micro-dollar per token.
		{Price{Input: 1, Output: 1}, Usage{InputTokens: 1000, OutputTokens: 500}, 1500},
		{gpt4o, Usage{InputTokens: 1000, OutputTokens: 100}, 2500 + 1000},
		{gpt4o, Usage{InputTokens: 1000, CachedInputTokens: 800, OutputTokens: 100}, 200*2.5 + 800*1.25 + 1000},
		{Price{Input: 2.5, Output: 10}, Usage{InputTokens: 1000, CachedInputTokens: 800}, 2500}, // no cached price: the input price
		{gpt4o, Usage{InputTokens: 10, CachedInputTokens: 50}, 13},                              // cached capped at input: 10×1.25 = 12.5, rounded up
		{Price{Input: 0.15, Output: 0.6}, Usage{InputTokens: 1, OutputTokens: 1}, 1},            // 0.75 µ$ rounds up
		{Price{Input: 0.1}, Usage{InputTokens: 7}, 1},                                           // 0.7 µ$
		{Price{Input: 0.1}, Usage{InputTokens: 10}, 1},                                          // exactly 1 µ$
		{Price{}, Usage{InputTokens: 1000, OutputTokens: 1000}, 0},
		{gpt4o, Usage{InputTokens: -5, OutputTokens: -1}, 0},
		{Price{Input: maxPrice, Output: maxPrice}, Usage{InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64}, math.MaxInt64/picoPerMicro + 1}, // saturated
		// Cache writes at their own price (Claude Sonnet: $3 in, $0.30
		// read, $3.75 written), else at the input price; reads first,
		// then writes, within the prompt.
		{sonnet, Usage{InputTokens: 1000, CachedInputTokens: 600, CacheWriteInputTokens: 300, OutputTokens: 10}, 100*3 + 600*0.3 + 300*3.75 + 150},
		{Price{Input: 3, Output: 15}, Usage{InputTokens: 1000, CacheWriteInputTokens: 1000}, 3000},
		{sonnet, Usage{InputTokens: 1000, CachedInputTokens: 800, CacheWriteInputTokens: 800}, 800*0.3 + 200*3.75},
		{sonnet, Usage{InputTokens: 100, CacheWriteInputTokens: -50}, 300},
		// The batch discount is for Price.Batch, not for CostMicros.
		{Price{Input: 2, Output: 8, BatchDiscount: 0.5}, Usage{InputTokens: 1000, OutputTokens: 1000}, 10000},
	}
	for _, tt := range tests {
		if got := tt.price.CostMicros(tt.u); got != tt.want {
			t.Errorf("%+v.CostMicros(%+v) = %d; want %d", tt.price, tt.u, got, tt.want)
		}
	}
	if got := gpt4o.EstimateMicros(1000, 100); got != 3500 {
		t.Errorf("EstimateMicros(1000, 100) = %d; want 3500 (cached price not applied to estimates)", got)
	}
}

// TestPriceBatch: a batch is priced at its discount off every part of
// the price, and a discount out of range never makes it free nor dearer.
func TestPriceBatch(t *testing.T) {
	for _, tt := range []struct {
		p    Price
		want Price
	}{
		{Price{Input: 2, Output: 8, CachedInput: 0.5, CacheWrite: 2.5, BatchDiscount: 0.5}, Price{Input: 1, Output: 4, CachedInput: 0.25, CacheWrite: 1.25}},
		{Price{Input: 2, Output: 8, BatchDiscount: 0.25}, Price{Input: 1.5, Output: 6}},
		{Price{Input: 2, Output: 8}, Price{Input: 2, Output: 8}},
		{Price{Input: 2, Output: 8, BatchDiscount: 1}, Price{Input: 2, Output: 8}},
		{Price{Input: 2, Output: 8, BatchDiscount: -1}, Price{Input: 2, Output: 8}},
		{Price{Input: 2, Output: 8, BatchDiscount: math.NaN()}, Price{Input: 2, Output: 8}},
	} {
		if got := tt.p.Batch(); got != tt.want {
			t.Errorf("%+v.Batch() = %+v; want %+v", tt.p, got, tt.want)
		}
	}
	if got := DefaultPrices()["gpt-4o-mini"].Batch().EstimateMicros(1_000_000, 1_000_000); got != 375_000 {
		t.Errorf("gpt-4o-mini batch of 1M in, 1M out = %d µ$; want 375000 (half of $0.15 + $0.60)", got)
	}
}

func TestPricesLookup(t *testing.T) {
	p, err := NewPrices(map[string]Price{
		"gpt-4o":      {Input: 2.5, Output: 10},
		"GPT-4o-mini": {Input: 0.15, Output: 0.6},
		"gpt-4":       {Input: 30, Output: 60},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		model string
		want  float64
		ok    bool
	}{
		{"gpt-4o", 2.5, true},
		{"gpt-4o-2024-08-06", 2.5, true},
		{"gpt-4o-mini", 0.15, true},
		{"gpt-4o-mini-2024-07-18", 0.15, true},
		{"openai/gpt-4o-mini", 0.15, true},
		{"gpt-4-turbo", 30, true}, // the caller's entries are plain prefixes
		{"gpt-5", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := p.Lookup(tt.model)
		if ok != tt.ok || got.Input != tt.want {
			t.Errorf("Lookup(%q) = %v, %v; want input %v, %v", tt.model, got, ok, tt.want, tt.ok)
		}
	}
	var none *Prices
	if _, ok := none.Lookup("gpt-4o"); ok {
		t.Error("nil Prices found a price")
	}
}

func TestNewPricesValidation(t *testing.T) {
	_, err := NewPrices(map[string]Price{
		"":       {Input: 1},
		"a":      {Input: -1},
		"b":      {Output: math.NaN()},
		"c":      {CachedInput: 2e6},
		"d":      {CacheWrite: -1},
		"e":      {BatchDiscount: 1},
		"f":      {BatchDiscount: math.NaN()},
		"Gpt-4o": {Input: 1},
		"gpt-4o": {Input: 1},
	})
	if err == nil {
		t.Fatal("NewPrices(bad table) = nil error")
	}
	for _, want := range []string{`prices[""]: model name`, `prices["a"].input`, `prices["b"].output`, `prices["c"].cached_input`, `prices["d"].cache_write`, `prices["e"].batch_discount`, `prices["f"].batch_discount`, "duplicates"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewPrices error does not mention %q:\n%v", want, err)
		}
	}
}

// TestPricesResolve: every model is priced by its entry, its base model
// or the fallback, or reported unpriced; never priced at nothing by
// omission.
func TestPricesResolve(t *testing.T) {
	fallback := &Price{Input: 10, Output: 30}
	def := must(NewPriceTable(PricesConfig{}))
	withFallback := must(NewPriceTable(PricesConfig{Fallback: fallback}))
	custom := must(NewPriceTable(PricesConfig{Models: map[string]Price{
		"GPT-4o-mini":    {Input: 0.2, Output: 0.8},  // replaces the built-in entry
		"ft:gpt-4o-mini": {Input: 0.3, Output: 1.2},  // fine-tunes of one base priced apart
		"llama-3":        {Input: 0.05, Output: 0.1}, // a model the built-in table lacks
	}}))
	only := must(NewPriceTable(PricesConfig{Models: map[string]Price{"llama-3": {Input: 0.05, Output: 0.1}}, OmitBuiltin: true, Fallback: fallback}))
	tests := []struct {
		p      *Prices
		model  string
		input  float64
		source PriceSource
	}{
		{def, "gpt-4o-mini", 0.15, PriceListed},
		{def, "GPT-4o-Mini-2024-07-18", 0.15, PriceListed},
		{def, "o1-pro", 150, PriceListed},
		{def, "o1-pro-2025-03-19", 150, PriceListed},
		{def, "o1-2024-12-17", 15, PriceListed},
		{def, "azure/gpt-4.1-nano", 0.10, PriceListed},
		{def, "ft:gpt-4o-mini-2024-07-18:org:custom:id", 0.15, PriceBaseModel},
		{def, "ft:gpt-4.1-2025-04-14:acme::BxYz12", 2, PriceBaseModel},
		{def, "FT:GPT-3.5-TURBO-0613:ORG::ID", 0.5, PriceBaseModel},
		{def, "openai/ft:o4-mini-2025-04-16:org:x:1", 1.10, PriceBaseModel},
		{def, "davinci-002:ft-acme-2023-08-01-00-00-00", 2, PriceListed}, // the legacy form starts with its base
		{def, "ft:", 0, PriceUnpriced},
		{def, "ft:unknown-base:org::id", 0, PriceUnpriced},
		{def, "my-local-llm", 0, PriceUnpriced},
		{def, "", 0, PriceUnpriced},
		{withFallback, "my-local-llm", 10, PriceFallback},
		{withFallback, "ft:unknown-base:org::id", 10, PriceFallback},
		{withFallback, "", 10, PriceFallback},
		{withFallback, "gpt-5", 1.25, PriceListed},
		{custom, "gpt-4o-mini-2024-07-18", 0.2, PriceListed},
		{custom, "ft:gpt-4o-mini-2024-07-18:org:custom:id", 0.3, PriceListed},
		{custom, "ft:gpt-4o-2024-08-06:org:custom:id", 2.5, PriceBaseModel},
		{custom, "llama-3-70b", 0.05, PriceListed},
		{custom, "gpt-4o", 2.5, PriceListed},
		{only, "llama-3-8b", 0.05, PriceListed},
		{only, "gpt-4o", 10, PriceFallback},
	}
	for _, tt := range tests {
		got, source, ok := tt.p.Resolve(tt.model)
		if got.Input != tt.input || source != tt.source || ok != (source != PriceUnpriced) {
			t.Errorf("Resolve(%q) = %+v, %v, %v; want input %v from %v", tt.model, got, source, ok, tt.input, tt.source)
		}
		if lp, lok := tt.p.Lookup(tt.model); lp != got || lok != ok {
			t.Errorf("Lookup(%q) = %+v, %v; want Resolve's %+v, %v", tt.model, lp, lok, got, ok)
		}
		if ok && got.Output == 0 && !strings.HasPrefix(strings.ToLower(tt.model), "text-embedding") {
			t.Errorf("Resolve(%q) = %+v: a generative model with a free output", tt.model, got)
		}
	}
	var none *Prices
	if _, src, ok := none.Resolve("gpt-4o"); ok || src != PriceUnpriced {
		t.Errorf("nil Prices resolved gpt-4o: %v, %v", src, ok)
	}
	for i, want := range []string{"unpriced", "listed", "base_model", "fallback", "unknown"} {
		if got := PriceSource(i).String(); got != want {
			t.Errorf("PriceSource(%d) = %q; want %q", i, got, want)
		}
	}
}

// TestDefaultPrices: the built-in table keeps every price the gateway
// shipped with, covers OpenAI's current models, and is a copy.
func TestDefaultPrices(t *testing.T) {
	shipped := map[string]Price{
		"gpt-4o":                 {Input: 2.50, Output: 10.00, CachedInput: 1.25},
		"gpt-4o-mini":            {Input: 0.15, Output: 0.60, CachedInput: 0.075},
		"gpt-4.1":                {Input: 2.00, Output: 8.00, CachedInput: 0.50},
		"gpt-4.1-mini":           {Input: 0.40, Output: 1.60, CachedInput: 0.10},
		"gpt-4.1-nano":           {Input: 0.10, Output: 0.40, CachedInput: 0.025},
		"gpt-5":                  {Input: 1.25, Output: 10.00, CachedInput: 0.125},
		"gpt-5-mini":             {Input: 0.25, Output: 2.00, CachedInput: 0.025},
		"o4-mini":                {Input: 1.10, Output: 4.40, CachedInput: 0.275},
		"gpt-3.5-turbo":          {Input: 0.50, Output: 1.50},
		"text-embedding-3-small": {Input: 0.02},
		"text-embedding-3-large": {Input: 0.13},
		"text-embedding-ada-002": {Input: 0.10},
	}
	d := DefaultPrices()
	for name, want := range shipped {
		want.BatchDiscount = 0.5 // both providers bill batches at half price
		if got := d[name]; got != want {
			t.Errorf("DefaultPrices()[%q] = %+v; want %+v", name, got, want)
		}
	}
	p := must(NewPriceTable(PricesConfig{}))
	for _, model := range []string{
		"gpt-5", "gpt-5-mini", "gpt-5-nano", "gpt-5-pro", "gpt-5-codex", "gpt-5-chat-latest",
		"gpt-4.5-preview", "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano", "gpt-4o", "gpt-4o-mini",
		"chatgpt-4o-latest", "gpt-4o-realtime-preview", "o1", "o1-mini", "o1-pro", "o3", "o3-mini",
		"o3-pro", "o4-mini", "codex-mini-latest", "gpt-4", "gpt-4-turbo", "gpt-3.5-turbo",
		"gpt-35-turbo", "text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002",
	} {
		if _, _, ok := p.Resolve(model); !ok {
			t.Errorf("%q has no built-in price", model)
		}
	}
	d["gpt-4o"] = Price{}
	if DefaultPrices()["gpt-4o"].Input != 2.5 {
		t.Error("DefaultPrices returned the table itself")
	}
}

func TestNewPriceTableValidation(t *testing.T) {
	for _, tt := range []struct {
		fallback Price
		want     string
	}{
		{Price{}, "fallback: input and output must be above zero"},
		{Price{Input: 1}, "fallback: input and output must be above zero"},
		{Price{Input: -1, Output: 1}, "fallback.input: must be between 0"},
		{Price{Input: 1, Output: math.Inf(1)}, "fallback.output: must be between 0"},
	} {
		fb := tt.fallback
		_, err := NewPriceTable(PricesConfig{Fallback: &fb})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewPriceTable(fallback %+v) error = %v; want %q", fb, err, tt.want)
		}
	}
	long := strings.Repeat("m", maxModelName+1)
	if _, err := NewPriceTable(PricesConfig{Models: map[string]Price{long: {Input: 1}}}); err == nil {
		t.Error("NewPriceTable accepted a model name of 257 bytes")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestOperationCosts(t *testing.T) {
	tbl, err := NewOperationCosts(1, []OperationCost{
		{Method: "POST", Route: "/v1/exports", Units: 50},
		{Method: "GET", Route: "/v1/exports", Units: 2},
		{Route: "/v1/items/{id}", Units: 1},
		{Method: "delete", Route: "/v1/items/{id}", Units: 5},
		{Route: "/v1/admin/*", Units: 20},
		{Method: "POST", Route: "/v1/admin/reindex/*", Units: 500},
		{Route: "/healthz", Units: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, route string
		want          int64
	}{
		{"POST", "/v1/exports", 50},
		{"GET", "/v1/exports", 2},
		{"PUT", "/v1/exports", 1}, // no entry for PUT, no any-method entry: the default
		{"GET", "/v1/items/{id}", 1},
		{"DELETE", "/v1/items/{id}", 5},
		{"delete", "/v1/items/{id}", 5},
		{"GET", "/v1/admin/users", 20},
		{"GET", "/v1/admin", 20},
		{"POST", "/v1/admin/reindex/all", 500},
		{"GET", "/v1/admin/reindex/all", 20}, // longest prefix has no GET: the shorter prefix
		{"GET", "/v1/administrator", 1},
		{"GET", "/healthz", 0},
		{"GET", "/unknown", 1},
	}
	for _, tt := range tests {
		if got := tbl.Cost(tt.method, tt.route); got != tt.want {
			t.Errorf("Cost(%q, %q) = %d; want %d", tt.method, tt.route, got, tt.want)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { tbl.Cost("POST", "/v1/admin/reindex/all") }); allocs != 0 {
		t.Errorf("Cost allocates %v times per call; want 0", allocs)
	}
	var none *OperationCosts
	if got := none.Cost("GET", "/"); got != 0 {
		t.Errorf("nil table Cost = %d; want 0", got)
	}
}

func TestNewOperationCostsValidation(t *testing.T) {
	_, err := NewOperationCosts(-1, []OperationCost{
		{Route: "v1/x", Units: 1},
		{Method: "FETCH", Route: "/a", Units: 1},
		{Route: "/b", Units: -2},
		{Route: "/c/*/d", Units: 1},
		{Method: "get", Route: "/e", Units: 1},
		{Method: "GET", Route: "/e", Units: 2},
	})
	if err == nil {
		t.Fatal("NewOperationCosts(bad table) = nil error")
	}
	for _, want := range []string{"default: must be >= 0", "costs[0].route", "costs[1].method", "costs[2].units", "costs[3].route", "costs[5]: GET /e duplicates costs[4]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewOperationCosts error does not mention %q:\n%v", want, err)
		}
	}
}

// TestOperationCostsBounded: a cost above what an admission controller
// accepts as an amount (MaxTokens, limits.MaxAmount) is a problem of the
// table, not a refusal of every call it prices.
func TestOperationCostsBounded(t *testing.T) {
	if _, err := NewOperationCosts(MaxTokens, []OperationCost{{Route: "/a", Units: MaxTokens}}); err != nil {
		t.Errorf("NewOperationCosts(MaxTokens) = %v; want nil", err)
	}
	_, err := NewOperationCosts(MaxTokens+1, []OperationCost{{Route: "/a", Units: 1}, {Route: "/b", Units: math.MaxInt64}})
	if err == nil {
		t.Fatal("NewOperationCosts(costs above MaxTokens) = nil error")
	}
	for _, want := range []string{"default: must be <= 1125899906842624", "costs[1].units: must be <= 1125899906842624"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewOperationCosts error does not mention %q:\n%v", want, err)
		}
	}
}

func TestImageTokens(t *testing.T) {
	// Figures from OpenAI's vision guide (gpt-4o): a 1024×1024 image at high
	// detail costs 765 tokens, 2048×4096 costs 1105, any image at low 85.
	tests := []struct {
		w, h   int
		detail string
		want   int64
	}{
		{1024, 1024, "high", 765},
		{2048, 4096, "high", 1105},
		{4096, 8192, "low", 85},
		{512, 512, "auto", 255},
		{100, 100, "", 255},
		{768, 2048, "high", 85 + 170*8},
		{1, 10000, "high", 85 + 170*4},
	}
	for _, tt := range tests {
		if got := ImageTokens(tt.w, tt.h, tt.detail); got != tt.want {
			t.Errorf("ImageTokens(%d, %d, %q) = %d; want %d", tt.w, tt.h, tt.detail, got, tt.want)
		}
	}
}

// tinyPNG is a 1×1 PNG; dataURLSize must read its size from the header.
const tinyPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

func TestImageDataURL(t *testing.T) {
	if w, h, ok := dataURLSize("data:image/png;base64," + tinyPNG); !ok || w != 1 || h != 1 {
		t.Errorf("dataURLSize(1×1 PNG) = %d, %d, %v; want 1, 1, true", w, h, ok)
	}
	for _, u := range []string{"https://example.com/x.png", "data:image/png;base64,!!!", "data:image/png,raw", "data:"} {
		if _, _, ok := dataURLSize(u); ok {
			t.Errorf("dataURLSize(%q) ok; want not", u)
		}
	}
	e := newTestEstimator(t)
	body := fmt.Sprintf(`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,%s","detail":"high"}}]}]}`, tinyPNG)
	est, err := e.Estimate("/v1/chat/completions", []byte(body))
	// 3 + "user" (1) + 85 + 170 (one tile) + 3.
	if err != nil || est.InputTokens != 262 || est.Images != 1 {
		t.Errorf("Estimate(1×1 PNG) = %d tokens, %d images, %v; want 262, 1", est.InputTokens, est.Images, err)
	}
	flat, err := NewEstimator(Config{Images: ImageCost{FlatTokens: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	est, err = flat.Estimate("/v1/chat/completions", []byte(body))
	if err != nil || est.InputTokens != 1007 {
		t.Errorf("flat image price: %d tokens, %v; want 1007", est.InputTokens, err)
	}
}

func ExampleOperationCosts_Cost() {
	costs, err := NewOperationCosts(1, []OperationCost{
		{Method: "POST", Route: "/v1/exports", Units: 50},
		{Route: "/v1/items/{id}", Units: 1},
		{Route: "/v1/admin/*", Units: 10},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(costs.Cost("POST", "/v1/exports"))
	fmt.Println(costs.Cost("GET", "/v1/items/{id}"))
	fmt.Println(costs.Cost("GET", "/v1/admin/users"))
	fmt.Println(costs.Cost("GET", "/v1/search"))
	// Output:
	// 50
	// 1
	// 10
	// 1
}

func ExamplePrices() {
	prices, err := NewPrices(map[string]Price{
		"gpt-4o":      {Input: 2.50, Output: 10.00, CachedInput: 1.25},
		"gpt-4o-mini": {Input: 0.15, Output: 0.60},
	})
	if err != nil {
		panic(err)
	}
	p, _ := prices.Lookup("gpt-4o-2024-08-06")
	// 2,000 prompt tokens (1,500 from the cache) and 300 completion tokens:
	// 500×2.5 + 1500×1.25 + 300×10 micro-dollars.
	fmt.Println(p.CostMicros(Usage{InputTokens: 2000, CachedInputTokens: 1500, OutputTokens: 300}))
	// Output:
	// 6125
}

// A gateway resolves the price of a request's model once: listed, priced
// as its base model, charged the fallback, or refused.
func ExamplePrices_Resolve() {
	prices, err := NewPriceTable(PricesConfig{
		Models: map[string]Price{"llama-3.3-70b": {Input: 0.59, Output: 0.79}},
	})
	if err != nil {
		panic(err)
	}
	for _, model := range []string{"gpt-4o-mini-2024-07-18", "ft:gpt-4o-mini-2024-07-18:acme:support:9xYz", "llama-3.3-70b-versatile", "my-local-model"} {
		p, source, ok := prices.Resolve(model)
		fmt.Println(model, p.Input, p.Output, source, ok)
	}
	// Output:
	// gpt-4o-mini-2024-07-18 0.15 0.6 listed true
	// ft:gpt-4o-mini-2024-07-18:acme:support:9xYz 0.15 0.6 base_model true
	// llama-3.3-70b-versatile 0.59 0.79 listed true
	// my-local-model 0 0 unpriced false
}

// TestBuiltinClaudePrices: Claude's dated and provider-qualified names
// find the built-in price of their family, the newer families apart.
func TestBuiltinClaudePrices(t *testing.T) {
	p, err := NewPrices(DefaultPrices())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		model       string
		in, out, cr float64
	}{
		{"claude-sonnet-4-5-20250929", 3, 15, 0.30},
		{"claude-sonnet-4-20250514", 3, 15, 0.30},
		{"claude-opus-4-1-20250805", 15, 75, 1.50},
		{"claude-opus-4-5", 5, 25, 0.50},
		{"claude-haiku-4-5", 1, 5, 0.10},
		{"claude-3-5-haiku-latest", 0.80, 4, 0.08},
		{"anthropic/claude-3-7-sonnet-latest", 3, 15, 0.30},
	} {
		got, ok := p.Lookup(tt.model)
		if !ok || got.Input != tt.in || got.Output != tt.out || got.CachedInput != tt.cr {
			t.Errorf("Lookup(%q) = %+v, %v; want %v/%v/%v", tt.model, got, ok, tt.in, tt.out, tt.cr)
		}
	}
}

func TestPriceAliases(t *testing.T) {
	fb := Price{Input: 100, Output: 100}
	p, err := NewPriceTable(PricesConfig{
		Models:   map[string]Price{"llama-3.3-70b": {Input: 0.59, Output: 0.79}},
		Fallback: &fb,
		Aliases: map[string]string{
			"prod-chat":     "gpt-4o-mini",                          // a built-in entry
			"Prod-Chat-Big": "openai/gpt-4o-2024-08-06",             // by prefix, without the provider part
			"llama":         "llama-3.3-70b",                        // the file's entry
			"tuned":         "ft:gpt-4o-mini-2024-07-18:acme::abc1", // a fine-tune's base
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	builtin := DefaultPrices()
	for _, tt := range []struct {
		model string
		want  Price
	}{
		{"prod-chat", builtin["gpt-4o-mini"]},
		{"PROD-CHAT-2025", builtin["gpt-4o-mini"]}, // an alias is a prefix, like an entry
		{"prod-chat-big", builtin["gpt-4o"]},       // the longest alias wins
		{"azure/llama", Price{Input: 0.59, Output: 0.79}},
		{"tuned", builtin["gpt-4o-mini"]},
	} {
		pr, src, ok := p.Resolve(tt.model)
		if !ok || src != PriceListed || pr != tt.want {
			t.Errorf("Resolve(%q) = %+v, %v, %v; want %+v, listed", tt.model, pr, src, ok, tt.want)
		}
	}
	for _, tt := range []struct {
		aliases map[string]string
		want    string
	}{
		{map[string]string{"x": "no-such-model"}, `aliases["x"]: "no-such-model" has no price`},
		{map[string]string{"llama-3.3-70b": "gpt-4o"}, `aliases["llama-3.3-70b"]: is also priced as prices["llama-3.3-70b"]`},
		{map[string]string{"": "gpt-4o"}, `aliases[""]: model names must not be empty`},
		{map[string]string{"a": "gpt-4o", "b": "a"}, `aliases["b"]: "a" has no price`}, // no alias prices another
	} {
		_, err := NewPriceTable(PricesConfig{Models: map[string]Price{"llama-3.3-70b": {Input: 1, Output: 1}}, Fallback: &fb, Aliases: tt.aliases})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("aliases %v: error = %v; want %q", tt.aliases, err, tt.want)
		}
	}
}
