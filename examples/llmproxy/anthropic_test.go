package main

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/sluicehq/sluice/admission/admissiontest"
)

// llmproxy with its built-in simulator serves Anthropic's Messages API to
// the official SDK: a message and a stream are admitted on the ITPM/OTPM
// pair and settled at their usage, which count_tokens (priced nothing)
// shows on the fake clock.
func TestAnthropicSDKThroughLLMProxy(t *testing.T) {
	s := startProxy(t, withPolicy(t, `
  - {name: itpm, key: [tenant], unit: input_tokens, algorithm: token_bucket, limit: 1M, per: 1h}
  - {name: otpm, key: [tenant], unit: output_tokens, algorithm: token_bucket, limit: 1M, per: 1h}
`, []string{"a"}, ""), func(o *options) { o.clock = admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)) })
	c := anthropic.NewClient(aoption.WithBaseURL(s.URL+"/"), aoption.WithAPIKey(testKey("a")), aoption.WithMaxRetries(0))
	ctx := ctxT(t, 20*time.Second)
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	m, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	st := c.Messages.NewStreaming(ctx, params)
	var sm anthropic.Message
	for st.Next() {
		if err := sm.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if m.Usage.OutputTokens != 20 || sm.Usage.OutputTokens != 20 || m.Usage.InputTokens == 0 || sm.Usage.InputTokens != m.Usage.InputTokens {
		t.Fatalf("usage %+v and streamed %+v; want the simulator's 20 tokens out and equal prompts", m.Usage, sm.Usage)
	}
	var probe *http.Response
	if _, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: params.Model, Messages: params.Messages}, aoption.WithResponseInto(&probe)); err != nil {
		t.Fatal(err)
	}
	for h, want := range map[string]int64{
		"Anthropic-Ratelimit-Input-Tokens-Remaining":  1_000_000 - 2*m.Usage.InputTokens,
		"Anthropic-Ratelimit-Output-Tokens-Remaining": 1_000_000 - 2*m.Usage.OutputTokens,
	} {
		if got, err := strconv.ParseInt(probe.Header.Get(h), 10, 64); err != nil || got != want {
			t.Errorf("%s = %q; want %d", h, probe.Header.Get(h), want)
		}
	}
}

func TestAnthropicFlags(t *testing.T) {
	t.Setenv(AnthropicKeyEnv, "sk-ant-x")
	o, err := parseFlags([]string{"--anthropic-upstream", "https://api.anthropic.com/v1"}, nil)
	if err != nil || o.gw.Anthropic.Upstream != "https://api.anthropic.com/v1" || o.gw.Anthropic.Key != "sk-ant-x" {
		t.Errorf("parseFlags = %+v, %v; want the Anthropic upstream and the key from $%s", o.gw.Anthropic, err, AnthropicKeyEnv)
	}
}
