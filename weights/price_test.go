package weights

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestPriceCost(t *testing.T) {
	gpt4o := Price{Input: 2.5, Output: 10, CachedInput: 1.25}
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
		{"gpt-4-turbo", 30, true},
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
		"Gpt-4o": {Input: 1},
		"gpt-4o": {Input: 1},
	})
	if err == nil {
		t.Fatal("NewPrices(bad table) = nil error")
	}
	for _, want := range []string{`prices[""]: model name`, `prices["a"].input`, `prices["b"].output`, `prices["c"].cached_input`, "duplicates"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewPrices error does not mention %q:\n%v", want, err)
		}
	}
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
