package gateway_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
)

// spendPolicy is a monthly spend cap of $100, in micro-dollars.
const spendPolicy = `
policies:
  - {name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 100M}
`

// oneHourCost returns what a call costs in micro-dollars, rounded up,
// at input, five-minute cache-write, one-hour cache-write and output
// prices in micro-dollars per token: the arithmetic of the providers'
// bills, written out apart from the price table's.
func oneHourCost(uncached, write5m, write1h, output int64, input, price5m, price1h, out float64) int64 {
	pico := float64(uncached)*input*1e6 + float64(write5m)*price5m*1e6 + float64(write1h)*price1h*1e6 + float64(output)*out*1e6
	return (int64(pico) + 999_999) / 1_000_000
}

// The anthropic-sdk-go's messages, plain and streamed, with a system
// prompt cached for an hour (cache_control's ttl "1h"): the simulator
// reports the write as cache_creation.ephemeral_1h_input_tokens, and the
// gateway settles it at the one-hour cache-write price, twice the input
// price for the built-in Claude entries ($6 for Sonnet 4.5's $3), or the
// policy file's cache_write_1h; the spend left, as a count_tokens call
// (priced nothing) shows right after, is the cap less exactly that.
func TestMessagesSDKOneHourCacheWriteSettled(t *testing.T) {
	for _, tc := range []struct {
		name, prices string
		price1h      float64
	}{
		{"built-in price", "", 6},
		{"file's price", "prices:\n  models:\n    claude-sonnet-4-5: {input: 3, output: 15, cache_write: 3.75, cache_write_1h: 7.5}\n", 7.5},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name+"/stream="+strconv.FormatBool(stream), func(t *testing.T) {
				s := anthropicGateway(t, spendPolicy+tc.prices, false)
				c := s.client(keyA)
				ctx := ctxT(t, 10*time.Second)
				params := cachedParams()
				params.System[0].CacheControl = anthropic.CacheControlEphemeralParam{TTL: anthropic.CacheControlEphemeralTTLTTL1h}
				var msg anthropic.Message
				if stream {
					st := c.Messages.NewStreaming(ctx, params)
					for st.Next() {
						if err := msg.Accumulate(st.Current()); err != nil {
							t.Fatal(err)
						}
					}
					if err := st.Err(); err != nil {
						t.Fatal(err)
					}
				} else {
					m, err := c.Messages.New(ctx, params)
					if err != nil {
						t.Fatal(err)
					}
					msg = *m
				}
				u := msg.Usage
				if u.OutputTokens != 5 || u.CacheCreationInputTokens == 0 || u.CacheCreation.Ephemeral1hInputTokens != u.CacheCreationInputTokens ||
					u.CacheCreation.Ephemeral5mInputTokens != 0 || u.CacheReadInputTokens != 0 || u.InputTokens == 0 {
					t.Fatalf("usage %+v: want 5 tokens out and the system prompt written to the one-hour cache", u)
				}
				cost := oneHourCost(u.InputTokens, 0, u.CacheCreation.Ephemeral1hInputTokens, u.OutputTokens, 3, 3.75, tc.price1h, 15)
				if fiveMinutes := oneHourCost(u.InputTokens, u.CacheCreationInputTokens, 0, u.OutputTokens, 3, 3.75, tc.price1h, 15); cost <= fiveMinutes {
					t.Fatalf("the one-hour write costs %d µ$, the five-minute write %d µ$: want it dearer", cost, fiveMinutes)
				}

				var probe *http.Response
				if _, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
					Model:    claude,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
				}, option.WithResponseInto(&probe)); err != nil {
					t.Fatal(err)
				}
				want := `"spend";r=` + strconv.FormatInt(100_000_000-cost, 10) + ";"
				if got := probe.Header.Get("RateLimit"); !strings.HasPrefix(got, want) {
					t.Errorf("after the message, RateLimit = %q; want %s… (cost %d µ$ of usage %+v)", got, want, cost, u)
				}
			})
		}
	}
}

// The bedrockruntime SDK's Converse and ConverseStream with a cache point
// of one hour (CachePointBlock.Ttl "1h"): the simulator reports the
// write in cacheDetails, and the gateway settles it at the built-in
// one-hour cache-write price of Claude 3.5 Sonnet, $6 per million tokens
// (twice its input price); the spend left, as a refused probe shows, is
// the cap less exactly that.
func TestBedrockSDKOneHourCacheWriteSettled(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			s := bedrockGateway(t, spendPolicy)
			c := s.client(t, keyA, nil)
			ctx := ctxT(t, 10*time.Second)
			in := conversation()
			in.Messages[0].Content[1] = &types.ContentBlockMemberCachePoint{Value: types.CachePointBlock{Type: types.CachePointTypeDefault, Ttl: types.CacheTTLOneHour}}
			var u *types.TokenUsage
			if stream {
				out, err := c.ConverseStream(ctx, &bedrockruntime.ConverseStreamInput{ModelId: in.ModelId, System: in.System, Messages: in.Messages, InferenceConfig: in.InferenceConfig})
				if err != nil {
					t.Fatal(err)
				}
				st := out.GetStream()
				for ev := range st.Events() {
					if m, ok := ev.(*types.ConverseStreamOutputMemberMetadata); ok {
						u = m.Value.Usage
					}
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				st.Close()
			} else {
				out, err := c.Converse(ctx, in)
				if err != nil {
					t.Fatal(err)
				}
				u = out.Usage
			}
			if u == nil || len(u.CacheDetails) != 1 || u.CacheDetails[0].Ttl != types.CacheTTLOneHour ||
				aws.ToInt32(u.CacheDetails[0].InputTokens) != aws.ToInt32(u.CacheWriteInputTokens) || aws.ToInt32(u.CacheWriteInputTokens) == 0 {
				t.Fatalf("usage %+v: want the prompt written to the one-hour cache", u)
			}
			uncached, written, output := int64(aws.ToInt32(u.InputTokens)), int64(aws.ToInt32(u.CacheWriteInputTokens)), int64(aws.ToInt32(u.OutputTokens))
			cost := oneHourCost(uncached, 0, written, output, 3, 3.75, 6, 15)
			if got, want := s.remainingSpend(t, keyA), 100_000_000-cost; got != want {
				t.Errorf("spend left after the call = %d µ$; want %d (cost %d µ$ of usage %+v)", got, want, cost, u)
			}
		})
	}
}

// remainingSpend asks for more output than the spend cap can pay for
// (the refusal is decided before anything is charged) and returns what
// its answer's RateLimit field says remains, in micro-dollars.
func (s *bedrockStack) remainingSpend(t *testing.T, key string) int64 {
	t.Helper()
	resp, b := s.post(t, "/model/"+bedrockModel+"/converse", `{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":10000000}}`,
		"Authorization", "Bearer "+key)
	field := resp.Header.Get("RateLimit")
	_, rest, _ := strings.Cut(field, `"spend";r=`)
	r, _, _ := strings.Cut(rest, ";")
	n, err := strconv.ParseInt(r, 10, 64)
	if resp.StatusCode < 400 || err != nil {
		t.Fatalf("probe: %d, RateLimit %q (%s); want a refusal with the spend left", resp.StatusCode, field, b)
	}
	return n
}
