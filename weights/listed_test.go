package weights

import (
	"regexp"
	"strings"
	"testing"
)

// TestPricesNeverOlderFamily resolves current model names against the
// built-in table: a snapshot, a preview or a variant of a family gets its
// family's price, and a newer family (a later version, or a tier the
// provider prices apart) gets no price at all, never an older family's.
func TestPricesNeverOlderFamily(t *testing.T) {
	p := must(NewPriceTable(PricesConfig{}))
	builtin := DefaultPrices()
	for _, tt := range []struct{ model, entry string }{
		{"claude-opus-4-20250514", "claude-opus-4"},
		{"claude-opus-4-0", "claude-opus-4"},
		{"claude-opus-4-1-20250805", "claude-opus-4-1"},
		{"claude-opus-4-5-20251101", "claude-opus-4-5"},
		{"claude-opus-4-6", ""},
		{"claude-opus-4-7-20260601", ""},
		{"claude-sonnet-4-20250514", "claude-sonnet-4"},
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5"},
		{"claude-sonnet-4-6", ""},
		{"claude-haiku-4-5-20251001", "claude-haiku-4-5"},
		{"claude-haiku-4-6", ""},
		{"gpt-4.1-2025-04-14", "gpt-4.1"},
		{"gpt-4.1-mini-2025-04-14", "gpt-4.1-mini"},
		{"gpt-4.1-nano", "gpt-4.1-nano"},
		{"gpt-4.15", ""},
		{"gpt-5-2025-08-07", "gpt-5"},
		{"gpt-5-codex", "gpt-5"},
		{"gpt-5-chat-latest", "gpt-5"},
		{"gpt-5-mini-2025-08-07", "gpt-5-mini"},
		{"gpt-5-pro-2025-10-06", "gpt-5-pro"},
		{"gpt-5.1-2025-11-13", "gpt-5.1"},
		{"gpt-5.1-codex", "gpt-5.1"},
		{"gpt-5.1-codex-mini", ""},
		{"gpt-5.2", ""},
		{"gpt-5.2-pro", ""},
		{"gpt-6", ""},
		{"o3-2025-04-16", "o3"},
		{"o3-mini-2025-01-31", "o3-mini"},
		{"o3-pro-2025-06-10", "o3-pro"},
		{"o3-deep-research-2025-06-26", "o3-deep-research"},
		{"o4-mini-2025-04-16", "o4-mini"},
		{"o4-mini-deep-research", "o4-mini-deep-research"},
		{"o4", ""},
		{"gemini-2.5-pro-preview-06-05", "gemini-2.5-pro"},
		{"gemini-2.5-flash-preview-09-2025", "gemini-2.5-flash"},
		{"gemini-2.5-flash-lite-preview-09-2025", "gemini-2.5-flash-lite"},
		{"gemini-2.5-flash-image-preview", "gemini-2.5-flash-image"},
		{"gemini-2.5-flash-native-audio-preview", ""},
		{"gemini-2.5-computer-use-preview-10-2025", ""},
		{"gpt-4o-2024-08-06", "gpt-4o"},
		{"gpt-4o-audio-preview", ""},
		{"gpt-4-0613", "gpt-4"},
		{"gemini-2.0-flash-001", "gemini-2.0-flash"},
	} {
		got, src, ok := p.Resolve(tt.model)
		switch {
		case tt.entry == "" && ok:
			t.Errorf("Resolve(%q) = %+v (%v); want no price: a newer family has none until an entry names it", tt.model, got, src)
		case tt.entry != "" && (!ok || got != builtin[tt.entry]):
			t.Errorf("Resolve(%q) = %+v, %v; want %s's price %+v", tt.model, got, ok, tt.entry, builtin[tt.entry])
		}
	}
	// The caller's entries are the operator's: plain prefixes.
	own := must(NewPriceTable(PricesConfig{Models: map[string]Price{"llama": {Input: 1, Output: 1}, "claude-opus-4": {Input: 15, Output: 75}}}))
	for _, m := range []string{"llama-3.3-70b", "claude-opus-4-6"} {
		if pr, _, ok := own.Resolve(m); !ok || pr.Input == 0 {
			t.Errorf("Resolve(%q) = %+v, %v; want the file's entry, a plain prefix", m, pr, ok)
		}
	}
}

// TestBuiltinPricesSourced: every built-in entry names the provider's
// pricing page it was taken from and the month it dates from, once;
// BuiltinPrices lists them by name, and they are DefaultPrices.
func TestBuiltinPricesSourced(t *testing.T) {
	month := regexp.MustCompile(`^20[2-9][0-9]-(0[1-9]|1[0-2])$`)
	pages := map[string]bool{SourceOpenAI: true, SourceAnthropic: true, SourceGoogle: true, SourceAzure: true}
	list := BuiltinPrices()
	d := DefaultPrices()
	if len(list) != len(d) {
		t.Fatalf("%d listed entries, %d default prices", len(list), len(d))
	}
	for i, e := range list {
		if !month.MatchString(e.Since) || !pages[e.Source] || !strings.HasPrefix(e.Source, "https://") {
			t.Errorf("%s: since %q, source %q; want a month and a provider's page", e.Model, e.Since, e.Source)
		}
		if i > 0 && list[i-1].Model >= e.Model {
			t.Errorf("%s listed after %s", e.Model, list[i-1].Model)
		}
		if d[e.Model] != e.Price || e.Price.BatchDiscount != 0.5 {
			t.Errorf("%s: listed %+v, default %+v", e.Model, e.Price, d[e.Model])
		}
		if strings.HasPrefix(e.Model, "gemini-") != (e.Source == SourceGoogle) || (e.Source == SourceGoogle && !e.Unverified) {
			t.Errorf("%s: source %s, unverified %v; the Gemini entries are Google's, unverified", e.Model, e.Source, e.Unverified)
		}
	}
	list[0].Price.Input = -1
	if BuiltinPrices()[0].Price.Input < 0 {
		t.Error("BuiltinPrices returned the table itself")
	}
}
