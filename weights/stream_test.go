package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/sluicehq/sluice/internal/eventstream"
)

// chatStream builds an OpenAI-style chat completion stream with one chunk
// per content delta, the usage-only chunk when usage is not empty, and
// "[DONE]" when done. eol is the line ending.
func chatStream(deltas []string, usage string, done bool, eol string) []byte {
	var b strings.Builder
	ev := func(data string) { b.WriteString("data: " + data + eol + eol) }
	usageField := ""
	if usage != "" {
		usageField = `,"usage":null`
	}
	ev(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]` + usageField + `}`)
	for _, d := range deltas {
		q, _ := json.Marshal(d)
		ev(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":` + string(q) + `},"finish_reason":null}]` + usageField + `}`)
	}
	ev(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]` + usageField + `}`)
	if usage != "" {
		ev(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":` + usage + `}`)
	}
	if done {
		ev("[DONE]")
	}
	return []byte(b.String())
}

const testUsage = `{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":6},"completion_tokens_details":{"reasoning_tokens":2}}`

var testUsageWant = Usage{InputTokens: 19, OutputTokens: 10, CachedInputTokens: 6, ReasoningTokens: 2}

// responsesStream is a Responses API stream with typed events.
const responsesStream = "event: response.created\n" +
	`data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","usage":null}}` + "\n\n" +
	"event: response.output_text.delta\n" +
	`data: {"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hello"}` + "\n\n" +
	"event: response.output_text.delta\n" +
	`data: {"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" world"}` + "\n\n" +
	"event: response.completed\n" +
	`data: {"type":"response.completed","sequence_number":3,"response":{"id":"resp_1","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hello world"}]}],"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":14}}}` + "\n\n"

// streamFixtures are the streams the split tests run over.
func streamFixtures() map[string][]byte {
	words := strings.Fields(corpusText(englishCorpus, 80, 9))
	deltas := make([]string, len(words))
	for i, w := range words {
		deltas[i] = " " + w
	}
	return map[string][]byte{
		"usage LF":      chatStream([]string{"Hel", "lo", "!"}, testUsage, true, "\n"),
		"usage CRLF":    chatStream([]string{"Hel", "lo", "!"}, testUsage, true, "\r\n"),
		"usage CR":      chatStream([]string{"Hel", "lo", "!"}, testUsage, true, "\r"),
		"no usage":      chatStream(deltas, "", true, "\n"),
		"cut":           chatStream(deltas, "", false, "\n")[:700],
		"responses":     []byte(responsesStream),
		"comments":      []byte(": keep-alive\n\n" + string(chatStream([]string{"a"}, testUsage, true, "\n")) + ": bye\n"),
		"multi-line":    []byte("data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"Hi\"}}]}\n\ndata: {\"choices\":[],\ndata:\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"),
		"error":         []byte("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\"}}\n\n"),
		"error event":   []byte("event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"Slow down\"}\n\n"),
		"no final eol":  []byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}"),
		"garbage":       []byte("data: {not json\n\nid: 7\nretry: 100\nfoo\n\ndata\n\n"),
		"trailing data": []byte("data: [DONE]\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"late\"}}]}\n"),
		"anthropic":     []byte(anthropicStream),
		"anthropic cut": []byte(anthropicStream[:strings.Index(anthropicStream, "event: message_delta")]),
		"anthropic error": []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n" +
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"),
	}
}

// chunkReader returns its chunks one Read at a time.
type chunkReader struct{ chunks [][]byte }

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.chunks) > 0 && len(r.chunks[0]) == 0 {
		r.chunks = r.chunks[1:]
	}
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	r.chunks[0] = r.chunks[0][n:]
	return n, nil
}

// readStream reads all of r through a StreamReader.
func readStream(t testing.TB, r io.Reader, cfg StreamConfig) ([]byte, StreamResult) {
	t.Helper()
	s := NewStreamReader(r, cfg)
	out, err := io.ReadAll(s)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	return out, s.Result()
}

func TestStreamPassThroughAndUsage(t *testing.T) {
	in := chatStream([]string{"Hel", "lo", "!"}, testUsage, true, "\n")
	out, res := readStream(t, bytes.NewReader(in), StreamConfig{})
	if !bytes.Equal(out, in) {
		t.Errorf("output differs from input:\n%s\nwant\n%s", out, in)
	}
	want := StreamResult{Usage: testUsageWant, Reported: true, Completed: true, Events: 7}
	if res != want {
		t.Errorf("Result() = %+v; want %+v", res, want)
	}
}

func TestStreamStripUsage(t *testing.T) {
	withUsage := chatStream([]string{"Hel", "lo", "!"}, testUsage, true, "\n")
	without := chatStream([]string{"Hel", "lo", "!"}, "", true, "\n")
	// The client did not ask: the usage-only chunk goes, "usage":null stays.
	wantOut := bytes.ReplaceAll(without, []byte(`]}`), []byte(`],"usage":null}`))
	out, res := readStream(t, bytes.NewReader(withUsage), StreamConfig{StripUsage: true})
	if !bytes.Equal(out, wantOut) {
		t.Errorf("stripped output:\n%s\nwant\n%s", out, wantOut)
	}
	if !res.Reported || res.Usage != testUsageWant || res.Stripped != 1 || !res.Completed {
		t.Errorf("Result() = %+v; want the usage reported, one event stripped, completed", res)
	}
	// A stream with content and usage in the same chunk keeps that chunk.
	in := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n")
	out, res = readStream(t, bytes.NewReader(in), StreamConfig{StripUsage: true})
	if !bytes.Equal(out, in) || res.Stripped != 0 || !res.Reported {
		t.Errorf("content+usage chunk: output %q, result %+v; want it kept and its usage read", out, res)
	}
}

// TestStreamSplitAtEveryByte feeds every fixture split in two at every byte,
// and one byte at a time, in both modes: the output and the result must be
// those of reading it whole.
//
// The fallback count uses the default four-characters-per-token counter
// here; TestStreamFallback covers the tokenizer.
func TestStreamSplitAtEveryByte(t *testing.T) {
	for name, in := range streamFixtures() {
		for _, strip := range []bool{false, true} {
			cfg := StreamConfig{InputTokens: 11, StripUsage: strip}
			wantOut, wantRes := readStream(t, bytes.NewReader(in), cfg)
			if !strip && !bytes.Equal(wantOut, in) {
				t.Errorf("%s: pass-through output differs from input", name)
			}
			for i := 0; i <= len(in); i++ {
				a, b := bytes.Clone(in[:i]), bytes.Clone(in[i:])
				out, res := readStream(t, &chunkReader{chunks: [][]byte{a, b}}, cfg)
				if !bytes.Equal(out, wantOut) || res != wantRes {
					t.Fatalf("%s strip=%v split at %d: output %q result %+v;\nwant %q result %+v", name, strip, i, out, res, wantOut, wantRes)
				}
			}
			out, res := readStream(t, iotest.OneByteReader(bytes.NewReader(in)), cfg)
			if !bytes.Equal(out, wantOut) || res != wantRes {
				t.Errorf("%s strip=%v one byte at a time: result %+v; want %+v", name, strip, res, wantRes)
			}
		}
	}
}

func TestStreamResults(t *testing.T) {
	fx := streamFixtures()
	tests := []struct {
		name string
		want StreamResult
	}{
		{"usage CRLF", StreamResult{Usage: testUsageWant, Reported: true, Completed: true, Events: 7}},
		{"usage CR", StreamResult{Usage: testUsageWant, Reported: true, Completed: true, Events: 7}},
		{"responses", StreamResult{Usage: Usage{InputTokens: 12, OutputTokens: 2}, Reported: true, Completed: true, Response: ResponseInfo{ID: "resp_1", Status: "completed"}, Events: 4}},
		{"comments", StreamResult{Usage: testUsageWant, Reported: true, Completed: true, Events: 5}},
		{"multi-line", StreamResult{Usage: Usage{InputTokens: 3, OutputTokens: 1}, Reported: true, Completed: true, Events: 3}},
		// Errors: the fallback counts what was streamed ("Hi" is one token
		// at four characters per token with no counter).
		{"error", StreamResult{Usage: Usage{InputTokens: 11, OutputTokens: 1, Estimated: true}, Fallback: FallbackMissing, ErrorMessage: "The server had an error", Events: 2}},
		{"error event", StreamResult{Usage: Usage{InputTokens: 11, Estimated: true}, Fallback: FallbackMissing, ErrorMessage: "Slow down", Events: 1}},
		{"no final eol", StreamResult{Usage: Usage{InputTokens: 5, OutputTokens: 7}, Reported: true, Events: 1}},
		{"garbage", StreamResult{Usage: Usage{InputTokens: 11, Estimated: true}, Fallback: FallbackMissing, Events: 2}},
		{"trailing data", StreamResult{Usage: Usage{InputTokens: 11, OutputTokens: 1, Estimated: true}, Fallback: FallbackMissing, Completed: true, Events: 2}},
	}
	for _, tt := range tests {
		_, res := readStream(t, bytes.NewReader(fx[tt.name]), StreamConfig{InputTokens: 11})
		if res != tt.want {
			t.Errorf("%s: Result() = %+v;\nwant %+v", tt.name, res, tt.want)
		}
	}
}

// TestStreamFallback: without a usage report the streamed text is counted
// with the tokenizer, in batches, to the same total as counting it whole.
func TestStreamFallback(t *testing.T) {
	e := newTestEstimator(t)
	c, err := e.Counter("gpt-4o")
	if err != nil {
		t.Fatal(err)
	}
	text := corpusText(englishCorpus, 12<<10, 3)
	var deltas []string
	for i, w := range strings.SplitAfter(text, " ") {
		if i%3 == 0 || len(deltas) == 0 {
			deltas = append(deltas, w)
		} else {
			deltas[len(deltas)-1] += w
		}
	}
	want := int64(refCount(t, O200kBase, text))
	for _, done := range []bool{true, false} {
		in := chatStream(deltas, "", done, "\n")
		if !done {
			in = in[:len(in)-200] // cut inside an event near the end
		}
		s := NewStreamReader(bytes.NewReader(in), StreamConfig{Counter: c, InputTokens: 42})
		if _, err := io.Copy(io.Discard, s); err != nil {
			t.Fatal(err)
		}
		res := s.Result()
		if done {
			if res.Usage != (Usage{InputTokens: 42, OutputTokens: want, Estimated: true}) || res.Reported || !res.Completed {
				t.Errorf("done: Result() = %+v; want fallback usage {42 %d} and completed", res, want)
			}
			continue
		}
		// The cut stream lost its last deltas: fewer tokens, not completed.
		if res.Completed || res.Reported || res.Usage.OutputTokens >= want || res.Usage.OutputTokens < want*9/10 {
			t.Errorf("cut: Result() = %+v; want not completed, output a little under %d", res, want)
		}
	}
}

// TestStreamOversizedEvent: an event above MaxEventBytes passes through
// unparsed and unbuffered; the events after it are read as usual.
func TestStreamOversizedEvent(t *testing.T) {
	big := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 500) + "\"}}]}\n\n"
	usage := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":3}}\n\n"
	in := []byte(big + usage + "data: [DONE]\n\n")
	for _, strip := range []bool{false, true} {
		s := NewStreamReader(iotest.HalfReader(bytes.NewReader(in)), StreamConfig{MaxEventBytes: 128, StripUsage: strip})
		var out []byte
		buf := make([]byte, 7)
		for {
			n, err := s.Read(buf)
			out = append(out, buf[:n]...)
			if len(s.line) > 128 || len(s.data) > 128 || len(s.raw) > 128 {
				t.Fatalf("strip=%v: buffers grew past MaxEventBytes: line %d data %d raw %d", strip, len(s.line), len(s.data), len(s.raw))
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		want := in
		if strip {
			want = []byte(big + "data: [DONE]\n\n")
		}
		if !bytes.Equal(out, want) {
			t.Errorf("strip=%v: output %q; want %q", strip, out, want)
		}
		if res := s.Result(); !res.Reported || res.Usage.OutputTokens != 3 || !res.Completed {
			t.Errorf("strip=%v: Result() = %+v; want usage {2 3} and completed", strip, res)
		}
	}
}

// TestStreamedTokensConcurrent charges a stream as it goes from another
// goroutine while it is read (the race detector checks the sharing).
func TestStreamedTokensConcurrent(t *testing.T) {
	deltas := strings.SplitAfter(corpusText(englishCorpus, 20<<10, 4), " ")
	in := chatStream(deltas, "", true, "\n")
	s := NewStreamReader(iotest.HalfReader(bytes.NewReader(in)), StreamConfig{})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var seen []int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				seen = append(seen, s.StreamedTokens())
			}
		}
	}()
	if _, err := io.Copy(io.Discard, s); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			t.Fatalf("StreamedTokens went down: %d then %d", seen[i-1], seen[i])
		}
	}
	if got, want := s.StreamedTokens(), s.Usage().OutputTokens; got != want || got == 0 {
		t.Errorf("final StreamedTokens() = %d; want Usage().OutputTokens = %d > 0", got, want)
	}
}

func TestEstimatorStreamReader(t *testing.T) {
	e := newTestEstimator(t)
	body := []byte(`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Say hello"}]}`)
	est, err := e.Estimate("/v1/chat/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	up, injected, err := InjectIncludeUsage(EndpointChatCompletions, body)
	if err != nil || !injected {
		t.Fatalf("InjectIncludeUsage = %s, %v, %v; want injected", up, injected, err)
	}
	// An upstream that ignored the option and stopped early: the fallback
	// uses the estimate's input and counts "Hello there" (2 tokens).
	in := chatStream([]string{"Hello", " there"}, "", false, "\n")
	s := e.NewStreamReader(bytes.NewReader(in), est, injected)
	if _, err := io.Copy(io.Discard, s); err != nil {
		t.Fatal(err)
	}
	if got, want := s.Usage(), (Usage{InputTokens: est.InputTokens, OutputTokens: 2, Estimated: true}); got != want {
		t.Errorf("Usage() = %+v; want %+v", got, want)
	}
}

func TestInjectIncludeUsage(t *testing.T) {
	const chat = "/v1/chat/completions"
	tests := []struct {
		path, in, want string
		injected       bool
	}{
		{chat, `{"model":"m","stream":true}`, `{"stream_options":{"include_usage":true},"model":"m","stream":true}`, true},
		{chat, ` { "stream" : true } `, ` {"stream_options":{"include_usage":true}, "stream" : true } `, true},
		{chat, `{"stream":true,"stream_options":null}`, `{"stream":true,"stream_options":{"include_usage":true}}`, true},
		{chat, `{"stream":true,"stream_options":{}}`, `{"stream":true,"stream_options":{"include_usage":true}}`, true},
		{chat, `{"stream":true,"stream_options":{"x":1}}`, `{"stream":true,"stream_options":{"include_usage":true,"x":1}}`, true},
		{chat, `{"stream":true,"stream_options":{"include_usage":false}}`, `{"stream":true,"stream_options":{"include_usage":true}}`, true},
		{chat, `{"stream":true,"stream_options":{"include_usage":true}}`, `{"stream":true,"stream_options":{"include_usage":true}}`, false},
		{chat, `{"stre\u0061m":true,"a":"}{\"stream_options\""}`, `{"stream_options":{"include_usage":true},"stre\u0061m":true,"a":"}{\"stream_options\""}`, true},
		{chat, `{"stream":false}`, `{"stream":false}`, false},
		{chat, `{"model":"m"}`, `{"model":"m"}`, false},
		{chat, `{"stream":true,"stream":false}`, `{"stream":true,"stream":false}`, false},
		{"/v1/completions", `{"stream":true}`, `{"stream_options":{"include_usage":true},"stream":true}`, true},
		{"/v1/responses", `{"stream":true}`, `{"stream":true}`, false},
		{"/v1/embeddings", `{"stream":true}`, `{"stream":true}`, false},
	}
	for _, tt := range tests {
		out, injected, err := InjectIncludeUsage(EndpointFor(tt.path), []byte(tt.in))
		if err != nil || string(out) != tt.want || injected != tt.injected {
			t.Errorf("InjectIncludeUsage(%s, %s) = %s, %v, %v; want %s, %v, nil", tt.path, tt.in, out, injected, err, tt.want, tt.injected)
		}
	}
	for _, in := range []string{`{"stream":true,"stream_options":5}`, `{"stream":true`, `[]`, ``} {
		if _, _, err := InjectIncludeUsage(EndpointFor(chat), []byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("InjectIncludeUsage(%s) error = %v; want ErrMalformed", in, err)
		}
	}
}

func ExampleStreamReader() {
	// A streaming response whose final chunk reports the usage.
	upstream := strings.NewReader(
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hi!\"}}]}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n" +
			"data: [DONE]\n\n")
	// The client did not ask for usage, so the usage-only chunk is removed
	// from what it receives.
	s := NewStreamReader(upstream, StreamConfig{StripUsage: true})
	toClient, _ := io.ReadAll(s)
	fmt.Printf("%s", toClient)
	res := s.Result()
	fmt.Println(res.Usage.InputTokens, res.Usage.OutputTokens, res.Reported, res.Completed)
	// Output:
	// data: {"choices":[{"delta":{"content":"Hi!"}}]}
	//
	// data: [DONE]
	//
	// 9 2 true true
}

func ExampleInjectIncludeUsage() {
	body := []byte(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Hi"}]}`)
	out, injected, err := InjectIncludeUsage(EndpointChatCompletions, body)
	fmt.Println(string(out), injected, err)
	// Output:
	// {"stream_options":{"include_usage":true},"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Hi"}]} true <nil>
}

// eventSource returns the same event at every Read, as a slow stream's
// body does: one event per read.
type eventSource struct{ ev []byte }

func (e *eventSource) Read(p []byte) (int, error) { return copy(p, e.ev), nil }

// BenchmarkStreamReaderChunk measures one chunk of a slow stream, read
// whole, as the gateway reads it: passed through, or with the usage chunk
// stripped (the gateway asked for it). Each Read returns one event into
// a 2 KiB buffer.
func BenchmarkStreamReaderChunk(b *testing.B) {
	ev := append(append([]byte("data: "), benchChunk...), "\n\n"...)
	for _, strip := range []bool{false, true} {
		b.Run(fmt.Sprintf("strip=%v", strip), func(b *testing.B) {
			s := NewStreamReader(&eventSource{ev}, StreamConfig{StripUsage: strip})
			buf := make([]byte, 2<<10)
			b.SetBytes(int64(len(ev)))
			b.ReportAllocs()
			for b.Loop() {
				if n, err := s.Read(buf); n != len(ev) || err != nil {
					b.Fatalf("Read = %d, %v; want %d", n, err, len(ev))
				}
			}
		})
	}
}

// TestInjectIncludeUsageMemoryBounded: a body of many members costs the
// injection its copy, not a record of every member.
func TestInjectIncludeUsageMemoryBounded(t *testing.T) {
	body := []byte(`{"stream":true,` + strings.Repeat(`"a":0,`, 1<<20/6) + `"stream_options":{` + strings.Repeat(`"b":0,`, 1<<20/6) + `"c":1}}`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, injected, err := InjectIncludeUsage(EndpointChatCompletions, body)
	runtime.ReadMemStats(&after)
	if err != nil || !injected || !bytes.Contains(out, []byte(`"stream_options":{"include_usage":true,"b":0,`)) || len(out) != len(body)+len(`"include_usage":true,`) {
		t.Fatalf("InjectIncludeUsage(%d-byte body) = %d bytes, %v, %v; want the option added", len(body), len(out), injected, err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > uint64(len(body))+64<<10 {
		t.Errorf("InjectIncludeUsage of a %d-byte body allocated %d bytes; want its copy and at most 64 KiB more", len(body), n)
	}
}

// TestStreamOversizedEventCharged: an event over MaxEventBytes passes
// through unread, in every API shape, so its text is not counted and a
// usage it carried is lost: the stream says so (Unread), and its usage
// then charges at least the output reservation, never the text counted
// before it. A usage report that arrives after the unread event is the
// upstream's last word and is checked as usual.
func TestStreamOversizedEventCharged(t *testing.T) {
	const maxEv, in, out = 256, 11, 500
	pad := strings.Repeat("x", 2*maxEv)
	chat := func(text string) string {
		return `data: {"choices":[{"delta":{"content":"` + text + `"}}]}` + "\n\n"
	}
	typed := func(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }
	anthropicStart := typed("message_start", `{"type":"message_start","message":{"usage":{"input_tokens":9,"output_tokens":1}}}`)
	anthropicDelta := func(text string) string {
		return typed("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+text+`"}}`)
	}
	gemini := func(text, extra string) string {
		return `data: {"candidates":[{"content":{"parts":[{"text":"` + text + `"}],"role":"model"}` + extra + `}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":2,"totalTokenCount":11}}` + "\n\n"
	}
	reserved := Usage{InputTokens: in, OutputTokens: out, Estimated: true}
	for _, tc := range []struct {
		name      string
		stream    string
		want      Usage
		fallback  UsageFallback
		completed bool
	}{
		{"chat, no usage", chat("Hi") + chat(pad) + "data: [DONE]\n\n", reserved, FallbackMissing, true},
		{"chat, oversized usage chunk", chat("Hi") + `data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2},"pad":"` + pad + `"}` + "\n\ndata: [DONE]\n\n", reserved, FallbackMissing, true},
		{"chat, usage after", chat(pad) + `data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":700}}` + "\n\ndata: [DONE]\n\n", Usage{InputTokens: 9, OutputTokens: 700}, FallbackNone, true},
		{"chat, usage after below the reservation", chat(pad) + `data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1}}` + "\n\ndata: [DONE]\n\n", Usage{InputTokens: 9, OutputTokens: out, Estimated: true}, FallbackImplausibleOutput, true},
		{"chat, cut inside", chat("Hi") + chat(pad)[:2*maxEv], reserved, FallbackMissing, false},
		{"chat, CRLF", strings.ReplaceAll(chat("Hi")+chat(pad)+"data: [DONE]\n\n", "\n", "\r\n"), reserved, FallbackMissing, true},
		{"responses, oversized completion", typed("response.output_text.delta", `{"type":"response.output_text.delta","delta":"Hi"}`) +
			typed("response.completed", `{"type":"response.completed","response":{"id":"resp_1","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"`+pad+`"}]}],"usage":{"input_tokens":9,"output_tokens":2}}}`),
			reserved, FallbackMissing, false},
		{"anthropic, oversized delta", anthropicStart + anthropicDelta(pad) + typed("message_stop", `{"type":"message_stop"}`), reserved, FallbackMissing, true},
		{"anthropic, oversized message_delta", anthropicStart + anthropicDelta("Hi") +
			typed("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":"`+pad+`"},"usage":{"output_tokens":400}}`) +
			typed("message_stop", `{"type":"message_stop"}`), reserved, FallbackMissing, true},
		{"anthropic, usage after", anthropicStart + anthropicDelta(pad) +
			typed("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":300}}`) +
			typed("message_stop", `{"type":"message_stop"}`), Usage{InputTokens: 9, OutputTokens: out, Estimated: true}, FallbackImplausibleOutput, true},
		{"gemini, oversized last chunk", gemini("Hi", "") + gemini(pad, `,"finishReason":"STOP"`), reserved, FallbackMissing, false},
		{"gemini, usage after", gemini(pad, "") + gemini("Hi", `,"finishReason":"STOP"`), Usage{InputTokens: 9, OutputTokens: out, Estimated: true}, FallbackImplausibleOutput, true},
	} {
		for _, strip := range []bool{false, true} {
			if strip && !strings.HasPrefix(tc.name, "chat") {
				continue // only a chat stream has a usage chunk to strip
			}
			for _, chunk := range []int{1, 7, 1 << 20} {
				body := []byte(tc.stream)
				s := NewStreamReader(&chunkedReader{b: body, n: chunk}, StreamConfig{MaxEventBytes: maxEv, InputTokens: in, OutputTokens: out, StripUsage: strip})
				got, err := io.ReadAll(s)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(got, []byte(pad[:maxEv])) || !strip && !bytes.Equal(got, body) {
					t.Errorf("%s (strip %v, chunks of %d): output changed", tc.name, strip, chunk)
				}
				res := s.Result()
				if res.Unread != 1 || res.Usage != tc.want || res.Fallback != tc.fallback || res.Completed != tc.completed {
					t.Errorf("%s (strip %v, chunks of %d): Result() = %+v;\nwant 1 unread, usage %+v, fallback %v, completed %v", tc.name, strip, chunk, res, tc.want, tc.fallback, tc.completed)
				}
			}
		}
	}

	// A ConverseStream message over the bound ends the reading: the
	// metadata event after it is never read.
	big := eventstream.Event("contentBlockDelta", []byte(`{"delta":{"text":"`+pad+`"}}`))
	body := append(big, converseStream(`{"inputTokens":9,"outputTokens":2}`)...)
	for _, chunk := range []int{1, 7, 1 << 20} {
		s := NewStreamReader(&chunkedReader{b: body, n: chunk}, StreamConfig{EventStream: true, MaxEventBytes: maxEv, InputTokens: in, OutputTokens: out})
		if _, err := io.ReadAll(s); err != nil {
			t.Fatal(err)
		}
		if res := s.Result(); res.Unread != 1 || res.Usage != reserved || res.Fallback != FallbackMissing || res.Completed {
			t.Errorf("converse (chunks of %d): Result() = %+v; want 1 unread, usage %+v, not completed", chunk, res, reserved)
		}
	}
}
