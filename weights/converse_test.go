package weights

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/eventstream"
)

// TestConverseEstimate prices Converse bodies: text as the Messages API
// prices the same conversation (the Bedrock id names Claude's tokenizer),
// inferenceConfig.maxTokens reserved (else the model's default), an
// image by Anthropic's formula, a PDF by its pages, tools and tool
// results as their text, a block of a kind it does not read by size; and
// refuses content in S3, an empty conversation and a case variant of a
// member it reads.
func TestConverseEstimate(t *testing.T) {
	e := newTestEstimator(t)
	const model = "us.anthropic.claude-3-5-sonnet-20240620-v1:0"
	messages := func(body string) int64 {
		t.Helper()
		est, err := e.EstimateEndpoint(EndpointMessages, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return est.InputTokens
	}
	const q = `Why is the sky blue? Explain Rayleigh scattering to a child.`
	text := `{"messages":[{"role":"user","content":[{"text":"` + q + `"}]}]}`
	base := func() int64 {
		est, err := e.EstimateModel(EndpointConverse, model, []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return est.InputTokens
	}()
	pdf := base64.StdEncoding.EncodeToString([]byte("%PDF-1.4\n<< /Type /Page >>\n<< /Type /Page >>\n%%EOF"))
	for _, tc := range []struct {
		name, body string
		in, out    int64 // out 0: the model's default reservation
	}{
		{name: "text", body: text,
			in: messages(`{"model":"claude-3-5-sonnet-20240620","max_tokens":1,"messages":[{"role":"user","content":"` + q + `"}]}`)},
		{name: "system and turns", body: `{"system":[{"text":"Be brief."},{"cachePoint":{"type":"default"}}],"messages":[{"role":"user","content":[{"text":"Hi"},{"text":" there"}]},{"role":"assistant","content":[{"text":"Hello!"}]}],"inferenceConfig":{"maxTokens":100,"temperature":0.2}}`,
			in: messages(`{"model":"claude-3-5-sonnet-20240620","max_tokens":1,"system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":" there"}]},{"role":"assistant","content":"Hello!"}]}`), out: 100},
		{name: "image", body: `{"messages":[{"role":"user","content":[{"text":"` + q + `"},{"image":{"format":"png","source":{"bytes":"` + pngOf(1000, 500) + `"}}}]}]}`,
			in: base + ClaudeImageTokens(1000, 500)},
		{name: "pdf", body: `{"messages":[{"role":"user","content":[{"text":"` + q + `"},{"document":{"format":"pdf","name":"","source":{"bytes":"` + pdf + `"}}}]}]}`,
			in: base + 2*claudePDFPage},
		{name: "unknown block", body: `{"messages":[{"role":"user","content":[{"text":"` + q + `"},{"video":{"format":"mp4","source":{"bytes":"` + strings.Repeat("A", 4000) + `"}}}]}]}`,
			in: base + 1000},
	} {
		est, err := e.EstimateModel(EndpointConverse, model, []byte(tc.body))
		if err != nil {
			t.Errorf("%s: EstimateModel = %v", tc.name, err)
			continue
		}
		if est.Model != model || est.Endpoint != EndpointConverse || est.Encoding != Cl100kBase {
			t.Errorf("%s: estimate %+v; want the path's model, counted with cl100k_base", tc.name, est)
		}
		if tc.out != 0 && est.OutputTokens != tc.out || tc.out == 0 && est.OutputTokens <= 0 {
			t.Errorf("%s: OutputTokens = %d; want %d (0: the model's default)", tc.name, est.OutputTokens, tc.out)
		}
		if est.InputTokens != tc.in {
			t.Errorf("%s: InputTokens = %d; want %d", tc.name, est.InputTokens, tc.in)
		}
	}

	tools := `{"messages":[{"role":"user","content":[{"text":"` + q + `"}]},{"role":"assistant","content":[{"toolUse":{"toolUseId":"t1","name":"weather","input":{"city":"Paris"}}}]},{"role":"user","content":[{"toolResult":{"toolUseId":"t1","content":[{"json":{"celsius":21}},{"text":"sunny"}],"status":"success"}}]}],` +
		`"toolConfig":{"tools":[{"toolSpec":{"name":"weather","description":"Current weather","inputSchema":{"json":{"type":"object"}}}},{"cachePoint":{"type":"default"}}]}}`
	est, err := e.EstimateModel(EndpointConverse, model, []byte(tools))
	if err != nil || est.InputTokens < base+claudeToolPrompt+10 {
		t.Errorf("tools: %+v, %v; want the tool prompt and the tools' text above %d", est, err, base)
	}

	for _, tc := range []struct{ name, body, field string }{
		{"s3", `{"messages":[{"role":"user","content":[{"image":{"format":"png","source":{"s3Location":{"uri":"s3://b/k"}}}}]}]}`, "messages.content.image.source.s3Location"},
		{"no messages", `{"messages":[]}`, "messages"},
		{"case variant", `{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceconfig":{"maxTokens":1}}`, "inferenceConfig"},
		{"too deep", `{"messages":[{"role":"user","content":[{"toolResult":{"content":[{"toolResult":{"content":[{"toolResult":{"content":[{"toolResult":{"content":[{"text":"x"}]}}]}}]}}]}}]}]}`, "messages.content.toolResult.content.toolResult.content.toolResult.content.toolResult.content"},
	} {
		_, err := e.EstimateModel(EndpointConverse, model, []byte(tc.body))
		var mal *MalformedError
		if !errors.As(err, &mal) || mal.Field != tc.field {
			t.Errorf("%s: %v; want a MalformedError on %s", tc.name, err, tc.field)
		}
	}
}

// BedrockModel gives the provider's own name of a Bedrock model id, and
// the prices resolve a Bedrock id to that name's entry: never an older
// family's (Claude 3 Haiku is not Claude 3.5 Haiku's price, Opus 4.5 not
// Opus 4's); a model the table does not list stays unpriced.
func TestBedrockModel(t *testing.T) {
	p, err := NewPrices(DefaultPrices())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id, name, price string // price: the table entry, "" for none
	}{
		{"anthropic.claude-3-5-sonnet-20240620-v1:0", "claude-3-5-sonnet-20240620", "claude-3-5-sonnet"},
		{"us.anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet-20241022", "claude-3-5-sonnet"},
		{"anthropic.claude-3-haiku-20240307-v1:0", "claude-3-haiku-20240307", "claude-3-haiku"},
		{"eu.anthropic.claude-3-5-haiku-20241022-v1:0", "claude-3-5-haiku-20241022", "claude-3-5-haiku"},
		{"global.anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5-20251001", "claude-haiku-4-5"},
		{"us.anthropic.claude-opus-4-5-20251101-v1:0", "claude-opus-4-5-20251101", "claude-opus-4-5"},
		{"apac.anthropic.claude-sonnet-4-20250514-v1:0", "claude-sonnet-4-20250514", "claude-sonnet-4"},
		{"anthropic.claude-3-sonnet-20240229-v1:0:200k", "claude-3-sonnet-20240229", ""},
		{"Anthropic.Claude-3-7-Sonnet-20250219-V1:0", "claude-3-7-sonnet-20250219", "claude-3-7-sonnet"},
		{"meta.llama3-1-70b-instruct-v1:0", "llama3-1-70b-instruct", ""},
		{"amazon.nova-pro-v1:0", "nova-pro", ""},
		{"gpt-4o", "gpt-4o", "gpt-4o"},
		{"claude-v-next", "claude-v-next", ""},
	} {
		if got := BedrockModel(tc.id); got != tc.name {
			t.Errorf("BedrockModel(%q) = %q; want %q", tc.id, got, tc.name)
		}
		got, _, ok := p.Resolve(tc.id)
		want, listed := DefaultPrices()[tc.price]
		if ok != listed || got != want {
			t.Errorf("Resolve(%q) = %+v, %v; want %s's price %+v", tc.id, got, ok, tc.price, want)
		}
	}
}

// A Converse response's usage, in Bedrock's spelling, counts the cache's
// read and written tokens into the prompt, as Anthropic's does.
func TestReadUsageBedrock(t *testing.T) {
	rep, err := ReadUsage([]byte(`{"output":{"message":{"role":"assistant","content":[{"text":"Hi"}]}},"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":5,"totalTokens":22,"cacheReadInputTokens":3,"cacheWriteInputTokens":4},"metrics":{"latencyMs":9}}`))
	want := Usage{InputTokens: 17, OutputTokens: 5, CachedInputTokens: 3, CacheWriteInputTokens: 4}
	if err != nil || rep.Usage != want || rep.Input != FallbackNone || rep.Output != FallbackNone {
		t.Errorf("ReadUsage = %+v, %v; want %+v", rep, err, want)
	}
}

// converseStream is a ConverseStream as Bedrock sends it.
func converseStream(usage string) []byte {
	var b []byte
	for _, ev := range []struct{ typ, payload string }{
		{"messageStart", `{"p":"abc","role":"assistant"}`},
		{"contentBlockStart", `{"contentBlockIndex":0,"start":{"toolUse":{"name":"weather","toolUseId":"t1"}}}`},
		{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"toolUse":{"input":"{\"city\":\"Paris\"}"}}}`},
		{"contentBlockDelta", `{"contentBlockIndex":1,"delta":{"text":"The weather in Paris is sunny today."}}`},
		{"contentBlockStop", `{"contentBlockIndex":1}`},
		{"messageStop", `{"stopReason":"end_turn"}`},
		{"metadata", `{"usage":` + usage + `,"metrics":{"latencyMs":120}}`},
	} {
		b = append(b, eventstream.Event(ev.typ, []byte(ev.payload))...)
	}
	return b
}

// A StreamReader reading a ConverseStream passes its bytes unchanged,
// whatever their chunking, and learns the metadata event's usage, the
// end of the message and the streamed text; an exception is its error
// message; a message over the bound, or one whose checksum fails, ends
// the reading without a completion.
func TestStreamReaderEventStream(t *testing.T) {
	stream := converseStream(`{"inputTokens":12,"outputTokens":14,"totalTokens":30,"cacheReadInputTokens":4}`)
	for _, chunk := range []int{1, 5, 64, len(stream)} {
		r := NewStreamReader(&chunkedReader{b: stream, n: chunk}, StreamConfig{EventStream: true, InputTokens: 10, OutputTokens: 100})
		var out bytes.Buffer
		if _, err := out.ReadFrom(r); err != nil {
			t.Fatal(err)
		}
		res := r.Result()
		want := Usage{InputTokens: 16, OutputTokens: 14, CachedInputTokens: 4}
		if !bytes.Equal(out.Bytes(), stream) || !res.Completed || !res.Reported || res.Usage != want || res.Events != 7 || r.StreamedTokens() < 10 {
			t.Errorf("chunks of %d: result %+v, %d streamed; want the bytes unchanged, completed, usage %+v", chunk, res, r.StreamedTokens(), want)
		}
	}

	exc := eventstream.Event("messageStart", []byte(`{"role":"assistant"}`))
	exc = append(exc, eventstream.Exception("throttlingException", []byte(`{"message":"Too many tokens"}`))...)
	r := NewStreamReader(bytes.NewReader(exc), StreamConfig{EventStream: true})
	_, _ = new(bytes.Buffer).ReadFrom(r)
	if res := r.Result(); res.Completed || res.ErrorMessage != "Too many tokens" {
		t.Errorf("exception: %+v; want not completed, its message", res)
	}

	big := eventstream.Event("contentBlockDelta", []byte(`{"delta":{"text":"`+strings.Repeat("x", 2000)+`"}}`))
	broken := bytes.Clone(stream)
	broken[len(broken)-1] ^= 1
	for name, b := range map[string][]byte{"over the bound": append(big, stream...), "checksum": broken} {
		r := NewStreamReader(bytes.NewReader(b), StreamConfig{EventStream: true, MaxEventBytes: 1024, InputTokens: 10, OutputTokens: 100})
		var out bytes.Buffer
		_, _ = out.ReadFrom(r)
		if res := r.Result(); !bytes.Equal(out.Bytes(), b) || res.Reported || name == "over the bound" && res.Completed {
			t.Errorf("%s: %+v; want the bytes passed, no usage (and no completion when nothing was read)", name, res)
		}
	}
}

// chunkedReader reads b n bytes at a time.
type chunkedReader struct {
	b []byte
	n int
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

func FuzzEstimateConverse(f *testing.F) {
	fuzzEstimateWith(f, func(e *Estimator, body []byte) (Estimate, error) {
		return e.EstimateModel(EndpointConverse, "us.anthropic.claude-sonnet-4-5-20250929-v1:0", body)
	},
		`{"system":[{"text":"Be brief."},{"cachePoint":{"type":"default"}}],"messages":[{"role":"user","content":[{"text":"Hi"},{"text":" there"}]},{"role":"assistant","content":[{"text":"Hello!"}]}],"inferenceConfig":{"maxTokens":100,"temperature":0.2}}`,
		`{"messages":[{"role":"user","content":[{"text":"q"},{"image":{"format":"png","source":{"bytes":"`+tinyPNG+`"}}},{"document":{"format":"pdf","name":"d","source":{"bytes":"JVBERi0xLjQ="}}}]}]}`,
		`{"messages":[{"role":"assistant","content":[{"toolUse":{"toolUseId":"t","name":"f","input":{"a":1}}}]},{"role":"user","content":[{"toolResult":{"toolUseId":"t","content":[{"json":{"r":1}},{"text":"ok"}]}}]}],"toolConfig":{"tools":[{"toolSpec":{"name":"f","description":"d","inputSchema":{"json":{"type":"object"}}}}]}}`,
		`{"messages":[{"role":"user","content":[{"text":"`+strings.Repeat("word ", 1200)+`"}]}]}`,
	)
}

// FuzzConverseStream reads a ConverseStream whose delta and metadata
// payloads are any bytes: the bytes pass unchanged, the result does not
// depend on the chunking, and the usage charged stays in its plausible
// range.
func FuzzConverseStream(f *testing.F) {
	f.Add([]byte(`{"delta":{"text":"Hello"}}`), []byte(`{"usage":{"inputTokens":12,"outputTokens":14,"cacheReadInputTokens":4,"cacheDetails":[{"ttl":"1h","inputTokens":2}]}}`), uint8(3))
	f.Add([]byte(`{"delta":{"toolUse":{"input":"{\"a\":1}"}}}`), []byte(`{"usage":{"inputTokens":-1,"outputTokens":1e30}}`), uint8(1))
	f.Add([]byte(`{"start":{"toolUse":{"name":"f"}}}`), []byte(`{"message":"slow down"}`), uint8(7))
	f.Fuzz(func(t *testing.T, delta, meta []byte, chunk uint8) {
		var stream []byte
		stream = append(stream, eventstream.Event("contentBlockDelta", delta)...)
		stream = append(stream, eventstream.Event("metadata", meta)...)
		stream = append(stream, eventstream.Exception("throttlingException", meta)...)
		est := Estimate{InputTokens: 10, OutputTokens: 100}
		read := func(n int) StreamResult {
			r := NewStreamReader(&chunkedReader{b: stream, n: n}, StreamConfig{EventStream: true, MaxEventBytes: 1 << 10, InputTokens: est.InputTokens, OutputTokens: est.OutputTokens})
			var out bytes.Buffer
			if _, err := out.ReadFrom(r); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), stream) {
				t.Fatalf("chunks of %d: the stream's bytes changed", n)
			}
			res := r.Result()
			if err := usageWithin(est, r.StreamedTokens(), res.Usage); err != nil {
				t.Fatalf("chunks of %d: Result() = %+v: %v", n, res, err)
			}
			return res
		}
		want := read(len(stream))
		if got := read(int(chunk) + 1); got != want {
			t.Fatalf("chunks of %d: Result() = %+v; want %+v", int(chunk)+1, got, want)
		}
	})
}
