package gateway

import (
	"strings"
	"testing"
)

// TestAnsweredModel: the model an answer names, in each API's shape, plain
// or streamed, and nothing for a name no model has or an answer that is
// not what it claims.
func TestAnsweredModel(t *testing.T) {
	for _, tt := range []struct{ body, want string }{
		{`{"id":"c","object":"chat.completion","model":"gpt-4o-2024-08-06","choices":[]}`, "gpt-4o-2024-08-06"},
		{` {"object":"response","model":"o3-2025-04-16","usage":{}}`, "o3-2025-04-16"},
		{`{"type":"message","model":"claude-sonnet-4-5-20250929"}`, "claude-sonnet-4-5-20250929"},
		{"data: {\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[]}\n\n", "gpt-4o-mini"},
		{"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-4.1\"}}\n\n", "gpt-4.1"},
		{"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-4-1\"}}\n\n", "claude-opus-4-1"},
		{`{"model":"accounts/fireworks/models/llama-v3p1-8b-instruct"}`, "accounts/fireworks/models/llama-v3p1-8b-instruct"},
		// The last of repeated keys, as a parser reads them.
		{`{"model":"a","model":"b"}`, "b"},
		// Not a model name: spaces, markup, escapes, control bytes, too long, empty, not a string.
		{`{"model":"gpt-4o <script>"}`, ""},
		{`{"model":"gpt\u002d4o"}`, ""},
		{"{\"model\":\"gpt-4o\x7f\"}", ""},
		{`{"model":"` + strings.Repeat("m", maxModelName+1) + `"}`, ""},
		{`{"model":""}`, ""},
		{`{"model":42}`, ""},
		// Nested only one level, and only under response or message.
		{`{"response":{"response":{"model":"x"}}}`, ""},
		{`{"choices":[{"model":"x"}]}`, ""},
		// Not JSON, truncated, or an event line not whole.
		{`{"model":"gpt-4o"`, ""},
		{`not json`, ""},
		{`data: {"model":"gpt-4o"}`, ""},
		{`[{"model":"gpt-4o"}]`, ""},
		{``, ""},
	} {
		if got := answeredModel([]byte(tt.body)); got != tt.want {
			t.Errorf("answeredModel(%.60q) = %q; want %q", tt.body, got, tt.want)
		}
	}
}

// FuzzAnsweredModel: whatever an upstream sends, the model read from it
// is empty or a valid name found in the answer as is, and reading never
// panics.
func FuzzAnsweredModel(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o"}`,
		"data: {\"model\":\"gpt-4o\"}\n\n",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-3\"}}\n",
		`{"response":{"model":"o3"},"model":7}`,
		`{"model":"a\"b"}`,
		"[[[[",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := answeredModel(b)
		if m == "" {
			return
		}
		if validModel(m) != m || !strings.Contains(string(b), `"`+m+`"`) {
			t.Errorf("answeredModel(%q) = %q; want a valid name quoted in the answer", b, m)
		}
	})
}

// TestGenAIProvider: the gen_ai.provider.name of a request is the API its
// route speaks: Anthropic's Messages, Google's Gemini, and the configured
// provider of the OpenAI-shaped upstream for the rest.
func TestGenAIProvider(t *testing.T) {
	g := &Gateway{cfg: Config{GenAIProvider: "openai"}}
	st := &state{models: map[string]bool{"gpt-4o": true}}
	for _, tt := range []struct {
		rt   route
		want string
	}{
		{llmRoutes[0], "openai"},
		{messagesRoute, "anthropic"},
		{geminiRoutes["generateContent"], "gcp.gemini"},
		{geminiRoutes["streamGenerateContent"], "gcp.gemini"},
	} {
		if got := g.genAIKey(st, tt.rt, "gpt-4o").provider; got != tt.want {
			t.Errorf("%s: provider %q; want %q", tt.rt.pattern, got, tt.want)
		}
	}
}
