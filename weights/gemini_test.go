package weights

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestGeminiEstimate prices generateContent bodies: text as the chat
// format prices the same messages, the path's model naming the
// tokenizer, generationConfig's limits in either spelling, tools and
// inline images; members that would hide a limit (a case variant, both
// spellings) and content the estimate cannot see (a cached content, a
// file by URI) are refused.
func TestGeminiEstimate(t *testing.T) {
	e := newTestEstimator(t)
	const model = "gemini-2.5-flash"
	chat := func(body string) Estimate {
		t.Helper()
		est, err := e.EstimateEndpoint(EndpointChatCompletions, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return est
	}
	text := `Why is the sky blue? Explain Rayleigh scattering to a child.`
	for _, tc := range []struct {
		name, body string
		in, out    int64 // -1: as the chat body prices it; out 0: the default reservation
		chat       string
	}{
		{name: "text", body: `{"contents":[{"role":"user","parts":[{"text":"` + text + `"}]}]}`,
			in: -1, chat: `{"model":"` + model + `","messages":[{"role":"user","content":"` + text + `"}]}`},
		{name: "system and turns", body: `{"systemInstruction":{"role":"system","parts":[{"text":"Be brief."}]},"contents":[{"role":"user","parts":[{"text":"Hi"},{"text":" there"}]},{"role":"model","parts":[{"text":"Hello!"}]}],"generationConfig":{"maxOutputTokens":100,"temperature":0.2}}`,
			in: -1, out: 100, chat: `{"model":"` + model + `","max_tokens":100,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi there"},{"role":"model","content":"Hello!"}]}`},
		{name: "candidates", body: `{"contents":[{"parts":[{"text":"Hi"}]}],"generationConfig":{"maxOutputTokens":100,"candidateCount":3}}`, out: 300},
		{name: "snake case limit", body: `{"contents":[{"parts":[{"text":"Hi"}]}],"generation_config":{"max_output_tokens":50}}`, out: 50},
	} {
		est, err := e.EstimateModel(EndpointGenerateContent, model, []byte(tc.body))
		if err != nil {
			t.Errorf("%s: EstimateModel = %v", tc.name, err)
			continue
		}
		if est.Model != model || est.Endpoint != EndpointGenerateContent || est.Encoding != O200kBase {
			t.Errorf("%s: estimate %+v; want the path's model, counted with o200k_base", tc.name, est)
		}
		wantOut := tc.out
		if wantOut == 0 {
			wantOut = DefaultMaxOutputTokens
		}
		if est.OutputTokens != wantOut {
			t.Errorf("%s: OutputTokens = %d; want %d", tc.name, est.OutputTokens, wantOut)
		}
		if tc.in == -1 {
			if want := chat(tc.chat).InputTokens; est.InputTokens != want {
				t.Errorf("%s: InputTokens = %d; want %d, the chat format's price of the same messages", tc.name, est.InputTokens, want)
			}
		} else if est.InputTokens <= 0 {
			t.Errorf("%s: InputTokens = %d; want a price", tc.name, est.InputTokens)
		}
	}

	// Tools: a function declaration's name, description and schema are
	// text; Google Search is priced by size.
	bare := `{"contents":[{"parts":[{"text":"Weather in Paris?"}]}]}`
	withTools := `{"contents":[{"parts":[{"text":"Weather in Paris?"}]}],"tools":[{"functionDeclarations":[{"name":"get_weather","description":"Current weather in a city.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]},{"googleSearch":{}}]}`
	b, _ := e.EstimateModel(EndpointGenerateContent, model, []byte(bare))
	w, _ := e.EstimateModel(EndpointGenerateContent, model, []byte(withTools))
	if w.InputTokens < b.InputTokens+20 {
		t.Errorf("tools: InputTokens = %d, without them %d; want the declaration's text priced", w.InputTokens, b.InputTokens)
	}
	// Inline data: an image of known size by Gemini's tiles, anything
	// else by its size.
	img, _ := e.EstimateModel(EndpointGenerateContent, model, []byte(`{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"`+pngOf(1000, 500)+`"}}]}]}`))
	none, _ := e.EstimateModel(EndpointGenerateContent, model, []byte(`{"contents":[{"parts":[]}]}`))
	if got := img.InputTokens - none.InputTokens; got != 2*258 || img.Images != 1 {
		t.Errorf("a 1000×500 image costs %d tokens (%d images); want 516, two tiles", got, img.Images)
	}
	audio := strings.Repeat("QUJD", 1000) // 4,000 bytes of base64
	aud, _ := e.EstimateModel(EndpointGenerateContent, model, []byte(`{"contents":[{"parts":[{"inline_data":{"mime_type":"audio/mp3","data":"`+audio+`"}}]}]}`))
	if got := aud.InputTokens - none.InputTokens; got != 1000 {
		t.Errorf("4,000 bytes of audio cost %d tokens; want 1000, one per four bytes", got)
	}

	for _, tc := range []struct{ name, body, field string }{
		{"both spellings", `{"contents":[{"parts":[{"text":"Hi"}]}],"generationConfig":{"maxOutputTokens":10},"generation_config":{"max_output_tokens":100000}}`, "generationConfig"},
		{"both spellings inside", `{"contents":[{"parts":[{"text":"Hi"}]}],"generationConfig":{"maxOutputTokens":10,"max_output_tokens":100000}}`, "generationConfig.maxOutputTokens"},
		{"case variant", `{"contents":[{"parts":[{"text":"Hi"}]}],"generationConfig":{"MaxOutputTokens":100000}}`, "generationConfig.maxOutputTokens"},
		{"repeated", `{"contents":[{"parts":[{"text":"Hi"}]}],"generationConfig":{"maxOutputTokens":10,"maxOutputTokens":100000}}`, "generationConfig.maxOutputTokens"},
		{"cached content", `{"cachedContent":"cachedContents/abc","contents":[{"parts":[{"text":"Hi"}]}]}`, "cachedContent"},
		{"file by URI", `{"contents":[{"parts":[{"fileData":{"mimeType":"video/mp4","fileUri":"https://generativelanguage.googleapis.com/v1beta/files/abc"}}]}]}`, "contents.parts.fileData"},
		{"no contents", `{"contents":[]}`, "contents"},
		{"negative limit", `{"contents":[{"parts":[{"text":"Hi"}]}],"generationConfig":{"maxOutputTokens":-1}}`, "max_output_tokens"},
		{"no candidates", `{"contents":[{"parts":[{"text":"Hi"}]}],"generationConfig":{"candidateCount":0}}`, "generationConfig.candidateCount"},
		{"parts not an array", `{"contents":[{"parts":"Hi"}]}`, "contents.parts"},
	} {
		_, err := e.EstimateModel(EndpointGenerateContent, model, []byte(tc.body))
		var mal *MalformedError
		if !errors.As(err, &mal) || mal.Field != tc.field {
			t.Errorf("%s: EstimateModel = %v; want malformed at %s", tc.name, err, tc.field)
		}
	}
	// The endpoint takes its model from the path only.
	if _, err := e.EstimateEndpoint(EndpointGenerateContent, []byte(bare)); !errors.Is(err, ErrUnsupportedEndpoint) {
		t.Errorf("EstimateEndpoint(generateContent) = %v; want ErrUnsupportedEndpoint", err)
	}
	if _, err := e.EstimateModel(EndpointChatCompletions, model, []byte(bare)); !errors.Is(err, ErrUnsupportedEndpoint) {
		t.Errorf("EstimateModel(chat completions, a model) = %v; want ErrUnsupportedEndpoint", err)
	}
}

// geminiResponse is a generateContent response in the documented shape,
// with thinking: 4 prompt tokens, 9 of text, 1,234 of thoughts.
const geminiResponse = `{"candidates":[{"content":{"parts":[{"text":"The sky is blue because..."}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":9,"totalTokenCount":1247,"promptTokensDetails":[{"modality":"TEXT","tokenCount":4}],"thoughtsTokenCount":1234},"modelVersion":"gemini-2.5-flash","responseId":"abc"}`

// TestReadGeminiUsage reads usageMetadata: thoughts are output, cached
// content is part of the prompt, tool-use prompts are prompt, a count of
// zero left out is zero, a total above its parts is charged whole, and
// a bad count is reported as such.
func TestReadGeminiUsage(t *testing.T) {
	for _, tc := range []struct {
		name, usage string
		want        Usage
		in, out     UsageFallback
	}{
		{"documented", geminiResponse, Usage{InputTokens: 4, OutputTokens: 1243, ReasoningTokens: 1234}, FallbackNone, FallbackNone},
		{"cached and tools", `{"usageMetadata":{"promptTokenCount":5000,"cachedContentTokenCount":4096,"toolUsePromptTokenCount":300,"candidatesTokenCount":20,"totalTokenCount":5320}}`,
			Usage{InputTokens: 5300, OutputTokens: 20, CachedInputTokens: 4096}, FallbackNone, FallbackNone},
		{"no output", `{"usageMetadata":{"promptTokenCount":10,"totalTokenCount":10}}`, Usage{InputTokens: 10}, FallbackNone, FallbackNone},
		{"total above parts", `{"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5,"totalTokenCount":40}}`, Usage{InputTokens: 10, OutputTokens: 30}, FallbackNone, FallbackNone},
		{"prompt not a number", `{"usageMetadata":{"promptTokenCount":"10","candidatesTokenCount":5}}`, Usage{OutputTokens: 5}, FallbackMalformed, FallbackNone},
		{"negative output", `{"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":-5}}`, Usage{InputTokens: 10}, FallbackNone, FallbackNegative},
		{"no usage", `{"candidates":[]}`, Usage{}, FallbackMissing, FallbackMissing},
	} {
		rep, err := ReadUsage([]byte(tc.usage))
		if err != nil || rep.Usage != tc.want || rep.Input != tc.in || rep.Output != tc.out {
			t.Errorf("%s: ReadUsage = %+v, %v; want %+v, input %v, output %v", tc.name, rep, err, tc.want, tc.in, tc.out)
		}
	}
}

// TestGeminiStream reads a streamed generateContent response (alt=sse):
// each chunk's usage so far, the last one's whole usage and finish
// reason, the text and function calls counted on the way, whatever the
// chunking; a stream without its last chunk is not complete.
func TestGeminiStream(t *testing.T) {
	stream := `data: {"candidates":[{"content":{"parts":[{"text":"The sky"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":40,"totalTokenCount":40},"modelVersion":"gemini-2.5-flash","responseId":"r1"}` + "\r\n\r\n" +
		`data: {"candidates":[{"content":{"parts":[{"text":" is blue."},{"functionCall":{"name":"log","args":{"k":"v"}}}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":40,"totalTokenCount":40},"modelVersion":"gemini-2.5-flash","responseId":"r1"}` + "\r\n\r\n" +
		`data: {"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":40,"cachedContentTokenCount":32,"candidatesTokenCount":12,"thoughtsTokenCount":100,"totalTokenCount":152},"modelVersion":"gemini-2.5-flash","responseId":"r1"}` + "\r\n\r\n"
	cfg := StreamConfig{InputTokens: 50, OutputTokens: 1024}
	want := StreamResult{
		Usage:    Usage{InputTokens: 40, OutputTokens: 112, CachedInputTokens: 32, ReasoningTokens: 100},
		Reported: true, Completed: true, Events: 3,
	}
	for name, r := range map[string]func() *chunkReader{
		"whole":        func() *chunkReader { return &chunkReader{chunks: [][]byte{[]byte(stream)}} },
		"byte by byte": func() *chunkReader { return &chunkReader{chunks: oneByteChunks([]byte(stream))} },
	} {
		s := NewStreamReader(r(), cfg)
		out, res := readAll(t, s), s.Result()
		if !bytes.Equal(out, []byte(stream)) || res != want {
			t.Errorf("%s: Result() = %+v; want %+v", name, res, want)
		}
		// "The sky", " is blue.", "log" and {"k":"v"}: 26 bytes.
		if got := s.StreamedTokens(); got != 7 {
			t.Errorf("%s: StreamedTokens() = %d; want 7", name, got)
		}
	}
	blocked := `data: {"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":40,"totalTokenCount":40}}` + "\n\n"
	if _, res := readStream(t, strings.NewReader(blocked), cfg); !res.Completed || res.Usage.InputTokens != 40 || res.Usage.OutputTokens != 0 {
		t.Errorf("blocked prompt: Result() = %+v; want complete, the prompt charged", res)
	}
	cut := stream[:strings.LastIndex(stream, "data: ")]
	s := NewStreamReader(strings.NewReader(cut), cfg)
	readAll(t, s)
	if res := s.Result(); res.Completed || !res.Reported || res.Usage.InputTokens != 40 {
		t.Errorf("cut stream: Result() = %+v; want the prompt so far, not completed", res)
	}
}

func FuzzEstimateGenerateContent(f *testing.F) {
	fuzzEstimateWith(f, func(e *Estimator, body []byte) (Estimate, error) {
		return e.EstimateModel(EndpointGenerateContent, "gemini-2.5-flash", body)
	},
		`{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[{"role":"user","parts":[{"text":"Hello"},{"inlineData":{"mimeType":"image/png","data":"`+tinyPNG+`"}}]}],"generationConfig":{"maxOutputTokens":10,"candidateCount":2}}`,
		`{"contents":[{"role":"model","parts":[{"functionCall":{"name":"f","args":{"a":[1,2]}}}]},{"role":"user","parts":[{"function_response":{"name":"f","response":{"r":1}}}]}],"tools":[{"functionDeclarations":[{"name":"f","description":"d","parameters":{"type":"object"}}]},{"googleSearch":{}}]}`,
		`{"contents":[{"parts":[{"text":"x","thoughtSignature":"c2ln"}]}],"generation_config":{"max_output_tokens":1e3}}`,
	)
}

// A Gemini request names its model in its path: the gateway passes it.
func ExampleEstimator_EstimateModel() {
	e, _ := NewEstimator(Config{})
	body := []byte(`{"contents":[{"role":"user","parts":[{"text":"Why is the sky blue?"}]}],"generationConfig":{"maxOutputTokens":256}}`)
	est, _ := e.EstimateModel(EndpointGenerateContent, "gemini-2.5-flash", body)
	fmt.Println(est.Model, est.InputTokens, est.OutputTokens)
	// Output: gemini-2.5-flash 13 256
}
