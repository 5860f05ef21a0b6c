package weights

import (
	"bytes"
	"testing"
)

// anthropicResponse is a Messages API response in the documented shape,
// with prompt caching: 25 tokens after the last cache breakpoint, 2,048
// written to the cache and 1,800 read from it.
const anthropicResponse = `{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hi! My name is Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":2048,"cache_read_input_tokens":1800,"cache_creation":{"ephemeral_5m_input_tokens":2048,"ephemeral_1h_input_tokens":0},"output_tokens":503,"service_tier":"standard"}}`

// anthropicStream is a streamed Messages API response in the documented
// event sequence: message_start with the prompt's figures, text and tool
// input deltas, a ping, message_delta with the cumulative output, and
// message_stop.
const anthropicStream = "event: message_start\n" +
	`data: {"type":"message_start","message":{"id":"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":2048,"cache_read_input_tokens":1800,"output_tokens":1}}}` + "\n\n" +
	"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
	"event: ping\n" + `data: {"type": "ping"}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"!"}}` + "\n\n" +
	"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
	"event: content_block_start\n" + `data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ncisco, CA\"}"}}` + "\n\n" +
	"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":1}` + "\n\n" +
	"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}` + "\n\n" +
	"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"

// TestReadUsageProviders reads the usage of both providers' documented
// shapes with cached and reasoning tokens, and the units they settle.
func TestReadUsageProviders(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		want  Usage
		units TokenUnits
	}{
		{"anthropic cache", anthropicResponse,
			Usage{InputTokens: 3873, OutputTokens: 503, CachedInputTokens: 1800, CacheWriteInputTokens: 2048},
			TokenUnits{Input: 2073, Output: 503, CachedInput: 1800}},
		{"anthropic without cache", `{"type":"message","usage":{"input_tokens":12,"output_tokens":6}}`,
			Usage{InputTokens: 12, OutputTokens: 6}, TokenUnits{Input: 12, Output: 6}},
		// OpenAI's chat completions: 1,920 of 2,006 prompt tokens cached,
		// 1,024 of 1,300 completion tokens reasoning.
		{"openai cached and reasoning", `{"object":"chat.completion","model":"o3","usage":{"prompt_tokens":2006,"completion_tokens":1300,"total_tokens":3306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":1024,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`,
			Usage{InputTokens: 2006, OutputTokens: 1300, CachedInputTokens: 1920, ReasoningTokens: 1024},
			TokenUnits{Input: 86, Output: 1300, CachedInput: 1920}},
		{"responses cached and reasoning", `{"object":"response","usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":10},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":123}}`,
			Usage{InputTokens: 36, OutputTokens: 87, CachedInputTokens: 10, ReasoningTokens: 64},
			TokenUnits{Input: 26, Output: 87, CachedInput: 10}},
	}
	est := Estimate{InputTokens: 3000, OutputTokens: 2048}
	for _, tt := range tests {
		rep, err := ReadUsage([]byte(tt.body))
		if err != nil || rep.Usage != tt.want || rep.Input != FallbackNone || rep.Output != FallbackNone {
			t.Errorf("%s: ReadUsage = %+v, %v; want %+v", tt.name, rep, err, tt.want)
			continue
		}
		u, fb := est.CheckUsage(rep)
		if u != tt.want || fb != FallbackNone {
			t.Errorf("%s: CheckUsage = %+v, %v; want it unchanged", tt.name, u, fb)
		}
		if got := u.Units(); got != tt.units || got.Total() != u.TotalTokens() {
			t.Errorf("%s: Units() = %+v (total %d); want %+v (total %d)", tt.name, got, got.Total(), tt.units, u.TotalTokens())
		}
	}
	// A bad cache figure makes the prompt unusable: charged as estimated,
	// never as a prompt without its cache writes.
	for _, body := range []string{
		`{"usage":{"input_tokens":25,"cache_creation_input_tokens":-5,"output_tokens":3}}`,
		`{"usage":{"input_tokens":25,"cache_read_input_tokens":"1800","output_tokens":3}}`,
	} {
		rep, _ := ReadUsage([]byte(body))
		u, fb := est.CheckUsage(rep)
		if u.InputTokens != 3000 || u.OutputTokens != 3 || fb == FallbackNone {
			t.Errorf("ReadUsage(%s) charged %+v, %v; want the estimated prompt", body, u, fb)
		}
	}
	if got := (Estimate{InputTokens: 40, OutputTokens: 16}).Units(); got != (TokenUnits{Input: 40, Output: 16}) {
		t.Errorf("Estimate.Units() = %+v", got)
	}
}

// TestAnthropicStream reads a streamed Messages API response: the prompt
// and cache figures from message_start, the output from message_delta,
// the text and tool input counted on the way, whatever the chunking.
func TestAnthropicStream(t *testing.T) {
	cfg := StreamConfig{InputTokens: 3000, OutputTokens: 1024}
	want := StreamResult{
		Usage:    Usage{InputTokens: 3873, OutputTokens: 89, CachedInputTokens: 1800, CacheWriteInputTokens: 2048},
		Reported: true, Completed: true, Events: 12,
	}
	for name, r := range map[string]func() *chunkReader{
		"whole":        func() *chunkReader { return &chunkReader{chunks: [][]byte{[]byte(anthropicStream)}} },
		"byte by byte": func() *chunkReader { return &chunkReader{chunks: oneByteChunks([]byte(anthropicStream))} },
	} {
		s := NewStreamReader(r(), cfg)
		out, res := readAll(t, s), s.Result()
		if !bytes.Equal(out, []byte(anthropicStream)) || res != want {
			t.Errorf("%s: Result() = %+v; want %+v", name, res, want)
		}
		// "Hello", "!", the tool's name and its input: 50 bytes, counted
		// at 4 bytes a token.
		if got := s.StreamedTokens(); got != 13 {
			t.Errorf("%s: StreamedTokens() = %d; want 13", name, got)
		}
	}

	// Cut before message_delta: the prompt is known, the stream is not
	// complete, and the output so far is message_start's.
	cut := anthropicStream[:bytes.Index([]byte(anthropicStream), []byte("event: message_delta"))]
	s := NewStreamReader(bytes.NewReader([]byte(cut)), cfg)
	readAll(t, s)
	if res := s.Result(); res.Completed || !res.Reported || res.Usage.InputTokens != 3873 || res.Usage.CachedInputTokens != 1800 {
		t.Errorf("cut stream: Result() = %+v; want the prompt's figures, not completed", res)
	}

	// An error event: its message is kept.
	_, res := readStream(t, bytes.NewReader(streamFixtures()["anthropic error"]), cfg)
	if res.ErrorMessage != "Overloaded" || res.Completed || res.Usage.InputTokens != 9 {
		t.Errorf("error stream: Result() = %+v; want the error's message and the prompt", res)
	}
}

func readAll(t *testing.T, s *StreamReader) []byte {
	t.Helper()
	var out []byte
	buf := make([]byte, 512)
	for {
		n, err := s.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out
		}
	}
}
