package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestGoldenTextCounts checks the counter against published counts. Every
// number is from OpenAI's cookbook "How to count tokens with tiktoken"
// (sections 3 and 5, which print the output of the Python tiktoken library).
func TestGoldenTextCounts(t *testing.T) {
	e := newTestEstimator(t)
	tests := []struct {
		text         string
		cl100k, o200 int
	}{
		{"tiktoken is great!", 6, 6},
		{"antidisestablishmentarianism", 6, 6},
		{"2 + 2 = 4", 7, 7},
		{"お誕生日おめでとう", 9, 8},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			enc  Encoding
			want int
		}{{Cl100kBase, tt.cl100k}, {O200kBase, tt.o200}} {
			counter, err := e.counter(c.enc)
			if err != nil {
				t.Fatal(err)
			}
			if got := counter.Count(tt.text); got != c.want {
				t.Errorf("%s Count(%q) = %d; want %d", c.enc, tt.text, got, c.want)
			}
			fast, err := BPECounter(c.enc)
			if err != nil {
				t.Fatal(err)
			}
			if got := fast.Count(tt.text); got != c.want {
				t.Errorf("%s BPECounter Count(%q) = %d; want %d", c.enc, tt.text, got, c.want)
			}
			if got := refCount(t, c.enc, tt.text); got != c.want {
				t.Errorf("tiktoken-go %s Encode(%q) = %d tokens; want %d", c.enc, tt.text, got, c.want)
			}
		}
	}
}

// TestGoldenChat checks chat estimates against the prompt_tokens the OpenAI
// API reported for the cookbook's examples ("How to count tokens with
// tiktoken", sections 6 and 7): 129 for gpt-3.5-turbo and gpt-4, 124 for
// gpt-4o and gpt-4o-mini; with the weather tool, 105 and 101.
func TestGoldenChat(t *testing.T) {
	e := newTestEstimator(t)
	var tools any
	if err := json.Unmarshal([]byte(cookbookTools), &tools); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		model string
		msgs  []map[string]string
		extra map[string]any
		want  int64
	}{
		{"gpt-3.5-turbo", cookbookMessages, nil, 129},
		{"gpt-4-0613", cookbookMessages, nil, 129},
		{"gpt-4", cookbookMessages, nil, 129},
		{"gpt-4o", cookbookMessages, nil, 124},
		{"gpt-4o-mini", cookbookMessages, nil, 124},
		{"gpt-3.5-turbo", cookbookToolMessages, map[string]any{"tools": tools}, 105},
		{"gpt-4", cookbookToolMessages, map[string]any{"tools": tools}, 105},
		{"gpt-4o", cookbookToolMessages, map[string]any{"tools": tools}, 101},
		{"gpt-4o-mini", cookbookToolMessages, map[string]any{"tools": tools}, 101},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%s/tools=%v", tt.model, tt.extra != nil)
		t.Run(name, func(t *testing.T) {
			est, err := e.Estimate("/v1/chat/completions", chatBody(t, tt.model, tt.msgs, tt.extra))
			if err != nil {
				t.Fatal(err)
			}
			if est.InputTokens != tt.want {
				t.Errorf("InputTokens = %d; want %d (the API's prompt_tokens)", est.InputTokens, tt.want)
			}
			if est.Sampled {
				t.Errorf("Sampled = true for a small request")
			}
		})
	}
}

// TestGoldenEmbeddings checks embeddings inputs. Strings use the cookbook's
// published counts (see TestGoldenTextCounts) in cl100k_base, the
// text-embedding-3 encoding, and o200k_base; token arrays count one token per
// id.
func TestGoldenEmbeddings(t *testing.T) {
	e := newTestEstimator(t)
	tests := []struct {
		model, input string
		want         int64
		enc          Encoding
	}{
		{"text-embedding-3-small", `"tiktoken is great!"`, 6, Cl100kBase},
		{"text-embedding-3-large", `["tiktoken is great!", "antidisestablishmentarianism", "2 + 2 = 4"]`, 6 + 6 + 7, Cl100kBase},
		{"text-embedding-ada-002", `"お誕生日おめでとう"`, 9, Cl100kBase},
		{"text-embedding-3-small", `[83, 1609, 5963, 374, 2294, 0]`, 6, Cl100kBase},
		{"text-embedding-3-small", `[[83, 1609], [5963, 374, 2294, 0], []]`, 6, Cl100kBase},
		{"text-embedding-3-small", `[]`, 0, Cl100kBase},
		// A model without a rule (a self-hosted embedding model) is counted
		// with the default encoding, o200k_base.
		{"my-embedder", `["tiktoken is great!", "お誕生日おめでとう", "2 + 2 = 4"]`, 6 + 8 + 7, O200kBase},
	}
	for _, tt := range tests {
		body := fmt.Sprintf(`{"model":%q,"input":%s}`, tt.model, tt.input)
		est, err := e.Estimate("/v1/embeddings", []byte(body))
		if err != nil {
			t.Errorf("Estimate(%s) error %v", body, err)
			continue
		}
		if est.InputTokens != tt.want || est.OutputTokens != 0 || est.Encoding != tt.enc {
			t.Errorf("Estimate(%s) = in %d out %d enc %s; want in %d out 0 enc %s", body, est.InputTokens, est.OutputTokens, est.Encoding, tt.want, tt.enc)
		}
	}
}

// realisticRequests are chat requests of the kinds a gateway sees, below and
// above the sampling threshold.
func realisticRequests() []struct {
	name  string
	model string
	msgs  []map[string]string
} {
	doc := corpusText(englishCorpus, 12<<10, 1)
	return []struct {
		name  string
		model string
		msgs  []map[string]string
	}{
		{"short question", "gpt-4o-mini", []map[string]string{
			{"role": "system", "content": "You are a helpful assistant."},
			{"role": "user", "content": "What is the capital of Australia, and why is it not Sydney?"},
		}},
		{"multi-turn", "gpt-4.1", []map[string]string{
			{"role": "system", "content": "You are a concise assistant for a gardening shop."},
			{"role": "user", "content": corpusText(englishCorpus, 600, 2)},
			{"role": "assistant", "content": corpusText(englishCorpus, 900, 3)},
			{"role": "user", "content": "Thanks. And what about the roses by the north wall?", "name": "maria"},
		}},
		{"retrieval 12KB", "gpt-4o", []map[string]string{
			{"role": "system", "content": "Answer from the documents only. Say so when they do not contain the answer."},
			{"role": "user", "content": "Documents:\n\n" + doc + "\n\nQuestion: what changed in the museum's east wing?"},
		}},
		{"mixed languages", "gpt-5-mini", []map[string]string{
			{"role": "developer", "content": "Reply in the language of the question."},
			{"role": "user", "content": corpusText(mixedCorpus, 3000, 4)},
		}},
		{"cl100k model", "gpt-4-turbo", []map[string]string{
			{"role": "user", "content": corpusText(englishCorpus, 5000, 5)},
		}},
		{"english 200KB sampled", "gpt-4o", []map[string]string{
			{"role": "system", "content": "Summarise the conversation log."},
			{"role": "user", "content": corpusText(englishCorpus, 200<<10, 6)},
		}},
		{"many messages sampled", "gpt-4.1-mini", manyMessages(400, 256)},
	}
}

func manyMessages(n, size int) []map[string]string {
	msgs := make([]map[string]string, n)
	for i := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs[i] = map[string]string{"role": role, "content": corpusText(englishCorpus, size, uint64(100+i))}
	}
	return msgs
}

// TestEstimateMatchesTokenizer compares the estimate with the cookbook
// formula computed with tiktoken-go directly. Below the sampling threshold
// the two must be equal; above it the sampled estimate must be within 2%, the bound the package documentation states for English.
func TestEstimateMatchesTokenizer(t *testing.T) {
	e := newTestEstimator(t)
	for _, r := range realisticRequests() {
		t.Run(r.name, func(t *testing.T) {
			est, err := e.Estimate("/v1/chat/completions", chatBody(t, r.model, r.msgs, nil))
			if err != nil {
				t.Fatal(err)
			}
			want := int64(refMessages(t, est.Encoding, r.msgs))
			if !est.Sampled {
				if est.InputTokens != want {
					t.Errorf("InputTokens = %d; want %d", est.InputTokens, want)
				}
				return
			}
			errPct := 100 * math.Abs(float64(est.InputTokens-want)) / float64(want)
			t.Logf("sampled: estimate %d, tokenizer %d, error %.2f%%", est.InputTokens, want, errPct)
			if errPct > 2 {
				t.Errorf("InputTokens = %d; want within 2%% of %d (error %.2f%%)", est.InputTokens, want, errPct)
			}
		})
	}
}

// TestSampledError bounds the sampling method's own error on long texts, the
// figures the package documentation states: 2% on English, 4% on mixed
// languages and code.
func TestSampledError(t *testing.T) {
	e := newTestEstimator(t)
	counter, err := e.counter(O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		corpus string
		bound  float64
	}{{"english", englishCorpus, 2}, {"mixed", mixedCorpus, 4}} {
		seeds := uint64(3)
		if raceEnabled {
			seeds = 1 // tiktoken-go runs several times slower under the race detector
		}
		for _, size := range []int{80 << 10, 256 << 10} {
			for seed := uint64(1); seed <= seeds; seed++ {
				text := corpusText(tt.corpus, size, seed)
				smp := newSampler(counter, len(text), DefaultSampleBytes)
				smp.piece(text)
				got, ok := smp.estimate()
				if !ok {
					t.Fatalf("%s %dKB seed %d: nothing sampled", tt.name, size>>10, seed)
				}
				want := int64(counter.Count(text))
				errPct := 100 * math.Abs(float64(got-want)) / float64(want)
				t.Logf("%s %dKB seed %d: sampled %d, exact %d, error %.2f%%", tt.name, size>>10, seed, got, want, errPct)
				if errPct > tt.bound {
					t.Errorf("%s %dKB seed %d: sampled %d; want within %.0f%% of %d", tt.name, size>>10, seed, got, tt.bound, want)
				}
			}
		}
	}
}

// TestSampledDenseTextCharged: a prompt built to fool the samples (plain
// words where the windows fall, runs of tabs and spaces, which cost a
// token per two bytes and nothing to the proxy, everywhere else) is
// estimated far below its count; the upstream's true count must still be
// charged, not judged implausible and replaced by the low estimate. A
// count above what the text could encode to stays implausible.
func TestSampledDenseTextCharged(t *testing.T) {
	e := newTestEstimator(t)
	const n = 400_000
	b := []byte(strings.Repeat("\t ", n/2))
	total := len("user") + n // the text the sampler sees: the role, then the content
	for k := range sampleWindows {
		c := (2*k+1)*total/(2*sampleWindows) - len("user")
		copy(b[c-700:c+700], strings.Repeat("hello world ", 200))
	}
	body := chatBody(t, "gpt-4o", []map[string]string{{"role": "user", "content": string(b)}}, nil)
	est, err := e.Estimate("/v1/chat/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	exact, err := NewEstimator(Config{SampleThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	want, err := exact.Estimate("/v1/chat/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	if !est.Sampled || want.InputTokens < 10*est.InputTokens {
		t.Fatalf("sampled estimate %d (Sampled %v), exact %d: the text no longer fools the samples", est.InputTokens, est.Sampled, want.InputTokens)
	}
	for _, tt := range []struct {
		in       int64
		want     int64
		fallback UsageFallback
	}{
		{want.InputTokens, want.InputTokens, FallbackNone},
		{int64(n) + 1000, est.InputTokens, FallbackImplausibleInput},
	} {
		rep := UsageReport{Usage: Usage{InputTokens: tt.in, OutputTokens: 5}}
		u, fb := est.CheckUsage(rep)
		if u.InputTokens != tt.want || fb != tt.fallback {
			t.Errorf("CheckUsage(input %d) = %d, %v; want %d, %v", tt.in, u.InputTokens, fb, tt.want, tt.fallback)
		}
		sr := e.NewStreamReader(strings.NewReader(`data: {"choices":[],"usage":{"prompt_tokens":`+strconv.FormatInt(tt.in, 10)+`,"completion_tokens":5}}`+"\n\n"), est, false)
		if _, err := io.Copy(io.Discard, sr); err != nil {
			t.Fatal(err)
		}
		if r := sr.Result(); r.Usage.InputTokens != tt.want || r.Fallback != tt.fallback {
			t.Errorf("stream reporting input %d: Result() = %d, %v; want %d, %v", tt.in, r.Usage.InputTokens, r.Fallback, tt.want, tt.fallback)
		}
	}
}

// TestSampledBoundFollowsModelRule: a model whose rule counts more than a
// token per byte (fewer than one character per token, a scale above 1)
// has a sampled estimate's bound at least its exact count.
func TestSampledBoundFollowsModelRule(t *testing.T) {
	models := []ModelRule{{Prefix: "dense-", CharsPerToken: 0.5}, {Prefix: "scaled-", Encoding: O200kBase, TokenScale: 3}}
	sampled, err := NewEstimator(Config{Models: models})
	if err != nil {
		t.Fatal(err)
	}
	exact, err := NewEstimator(Config{Models: models, SampleThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat(".,", 40<<10) + strings.Repeat("hello world ", 4<<10)
	for _, model := range []string{"dense-1", "scaled-1"} {
		body := chatBody(t, model, []map[string]string{{"role": "user", "content": text}}, nil)
		est, err := sampled.Estimate("/v1/chat/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		want, err := exact.Estimate("/v1/chat/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		if !est.Sampled || est.MaxInputTokens < want.InputTokens {
			t.Errorf("%s: sampled %v, MaxInputTokens %d; want at least the exact count %d", model, est.Sampled, est.MaxInputTokens, want.InputTokens)
		}
	}
}

func TestOutputReservation(t *testing.T) {
	e, err := NewEstimator(Config{
		DefaultMaxOutputTokens: 1000,
		Models:                 []ModelRule{{Prefix: "big-", Encoding: O200kBase, MaxOutputTokens: 32000}},
	})
	if err != nil {
		t.Fatal(err)
	}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	// defaulted is Estimate.DefaultOutput: the choices the model's
	// default is reserved for when the request sets no limit.
	tests := []struct {
		path, body      string
		want, defaulted int64
	}{
		{"/v1/chat/completions", `{"model":"gpt-4o",` + msgs + `}`, 1000, 1},
		{"/v1/chat/completions", `{"model":"big-model",` + msgs + `}`, 32000, 1},
		{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":50,` + msgs + `}`, 50, 0},
		{"/v1/chat/completions", `{"model":"gpt-4o","max_completion_tokens":70,"max_tokens":50,` + msgs + `}`, 70, 0},
		{"/v1/chat/completions", `{"model":"gpt-4o","max_completion_tokens":null,"max_tokens":50,` + msgs + `}`, 50, 0},
		{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":50,"n":3,` + msgs + `}`, 150, 0},
		{"/v1/chat/completions", `{"model":"gpt-4o","n":2,` + msgs + `}`, 2000, 2},
		{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":0,` + msgs + `}`, 0, 0},
		{"/v1/completions", `{"model":"gpt-3.5-turbo-instruct","prompt":"Say hi"}`, 16, 0},
		{"/v1/completions", `{"model":"gpt-3.5-turbo-instruct","prompt":"Say hi","max_tokens":100}`, 100, 0},
		{"/v1/completions", `{"model":"gpt-3.5-turbo-instruct","prompt":["a","b","c"],"max_tokens":10,"n":2}`, 60, 0},
		{"/v1/completions", `{"model":"gpt-3.5-turbo-instruct","prompt":"a","max_tokens":10,"n":2,"best_of":5}`, 50, 0},
		{"/v1/completions", `{"model":"gpt-3.5-turbo-instruct","prompt":[[1,2],[3]],"max_tokens":10}`, 20, 0},
		{"/v1/responses", `{"model":"gpt-5","input":"hi"}`, 1000, 1},
		{"/v1/responses", `{"model":"gpt-5","input":"hi","max_output_tokens":300}`, 300, 0},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":"hi","max_tokens":300}`, 0, 0},
		{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":9223372036854775807,"n":128,` + msgs + `}`, MaxTokens, 0},
	}
	for _, tt := range tests {
		est, err := e.Estimate(tt.path, []byte(tt.body))
		if err != nil {
			t.Errorf("Estimate(%s, %s) error %v", tt.path, tt.body, err)
			continue
		}
		if est.OutputTokens != tt.want || est.DefaultOutput != tt.defaulted {
			t.Errorf("Estimate(%s, %s): OutputTokens %d, DefaultOutput %d; want %d, %d", tt.path, tt.body, est.OutputTokens, est.DefaultOutput, tt.want, tt.defaulted)
		}
	}
}

func TestEstimateErrors(t *testing.T) {
	e, err := NewEstimator(Config{MaxBodyBytes: 200})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, body string
		want       error
		field      string
	}{
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[`, ErrMalformed, ""},
		{"/v1/chat/completions", `not json`, ErrMalformed, ""},
		{"/v1/chat/completions", ``, ErrMalformed, ""},
		{"/v1/chat/completions", `null`, ErrMalformed, ""},
		{"/v1/chat/completions", `[]`, ErrMalformed, ""},
		{"/v1/chat/completions", `{"model":"gpt-4o"}`, ErrMalformed, "messages"},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`, ErrMalformed, "messages"},
		{"/v1/chat/completions", `{"model":5,"messages":[{"role":"user","content":"hi"}]}`, ErrMalformed, "model"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, ErrMalformed, "messages.content"},
		{"/v1/chat/completions", `{"messages":{"role":"user"}}`, ErrMalformed, "messages"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":-1}`, ErrMalformed, "max_tokens"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1.5}`, ErrMalformed, "max_tokens"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":0}`, ErrMalformed, "n"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"properties":[]}}}]}`, ErrMalformed, "tools"},
		{"/v1/completions", `{"prompt":{"a":1}}`, ErrMalformed, "prompt"},
		{"/v1/completions", `{"prompt":[1,"a"]}`, ErrMalformed, "prompt"},
		{"/v1/embeddings", `{"model":"text-embedding-3-small"}`, ErrMalformed, "input"},
		{"/v1/embeddings", `{"input":true}`, ErrMalformed, "input"},
		{"/v1/responses", `{"input":5}`, ErrMalformed, "input"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"` + strings.Repeat("a", 200) + `"}]}`, ErrTooLarge, ""},
		{"/v1/models", `{}`, ErrUnsupportedEndpoint, ""},
	}
	for _, tt := range tests {
		_, err := e.Estimate(tt.path, []byte(tt.body))
		if !errors.Is(err, tt.want) {
			t.Errorf("Estimate(%s, %.60s) error = %v; want %v", tt.path, tt.body, err, tt.want)
			continue
		}
		var me *MalformedError
		if errors.As(err, &me) && me.Field != tt.field {
			t.Errorf("Estimate(%s, %.60s) field = %q; want %q (error %v)", tt.path, tt.body, me.Field, tt.field, err)
		}
	}
	var tl *BodyTooLargeError
	_, err = e.Estimate("/v1/embeddings", []byte(`{"input":"`+strings.Repeat("a", 300)+`"}`))
	if !errors.As(err, &tl) || tl.Limit != 200 || tl.Size != 312 {
		t.Errorf("oversized body: error %v; want *BodyTooLargeError{Limit: 200, Size: 312}", err)
	}
}

func TestReadBody(t *testing.T) {
	e, err := NewEstimator(Config{MaxBodyBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		in      string
		tooLong bool
	}{{"", false}, {"0123456789", false}, {"0123456789x", true}, {strings.Repeat("x", 1<<20), true}} {
		b, err := e.ReadBody(strings.NewReader(tt.in))
		if tt.tooLong {
			var tl *BodyTooLargeError
			if !errors.As(err, &tl) || !errors.Is(err, ErrTooLarge) || tl.Size != -1 || tl.Limit != 10 {
				t.Errorf("ReadBody(%d bytes) error = %v; want *BodyTooLargeError{Limit: 10, Size: -1}", len(tt.in), err)
			}
			continue
		}
		if err != nil || string(b) != tt.in {
			t.Errorf("ReadBody(%q) = %q, %v; want the input", tt.in, b, err)
		}
	}
}

func TestEndpointFor(t *testing.T) {
	tests := []struct {
		path string
		want Endpoint
	}{
		{"/v1/chat/completions", EndpointChatCompletions},
		{"/v1/chat/completions/", EndpointChatCompletions},
		{"/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21", EndpointChatCompletions},
		{"/v1/completions", EndpointCompletions},
		{"/v1/embeddings", EndpointEmbeddings},
		{"embeddings", EndpointEmbeddings},
		{"/v1/responses", EndpointResponses},
		{"/v1/models", EndpointUnknown},
		{"/v1/xembeddings", EndpointUnknown},
		{"/v1/responses/resp_123", EndpointUnknown},
		{"", EndpointUnknown},
	}
	for _, tt := range tests {
		if got := EndpointFor(tt.path); got != tt.want {
			t.Errorf("EndpointFor(%q) = %v; want %v", tt.path, got, tt.want)
		}
	}
}

func TestModelResolution(t *testing.T) {
	e, err := NewEstimator(Config{
		DefaultEncoding: Cl100kBase,
		Models: []ModelRule{
			{Prefix: "Claude-", CharsPerToken: 3.5, MaxOutputTokens: 8192},
			{Prefix: "meta-llama/", CharsPerToken: 4},
			{Prefix: "gpt-4o-mini", Encoding: O200kBase, MaxOutputTokens: 16384},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		model     string
		enc       Encoding
		maxOutput int64
	}{
		{"gpt-4o", O200kBase, DefaultMaxOutputTokens},
		{"gpt-4o-2024-08-06", O200kBase, DefaultMaxOutputTokens},
		{"GPT-4o", O200kBase, DefaultMaxOutputTokens},
		{"openai/gpt-4.1-nano", O200kBase, DefaultMaxOutputTokens},
		{"gpt-4o-mini-2024-07-18", O200kBase, 16384},
		{"gpt-4-turbo", Cl100kBase, DefaultMaxOutputTokens},
		{"gpt-4.5-preview", O200kBase, DefaultMaxOutputTokens},
		{"gpt-5-nano", O200kBase, DefaultMaxOutputTokens},
		{"o3-mini", O200kBase, DefaultMaxOutputTokens},
		{"o1", O200kBase, DefaultMaxOutputTokens},
		{"gpt-3.5-turbo-0125", Cl100kBase, DefaultMaxOutputTokens},
		{"gpt-35-turbo", Cl100kBase, DefaultMaxOutputTokens},
		{"text-embedding-3-large", Cl100kBase, DefaultMaxOutputTokens},
		{"claude-sonnet-4", "", 8192},
		{"meta-llama/Llama-3.3-70B-Instruct", "", DefaultMaxOutputTokens},
		{"mistral-large", Cl100kBase, DefaultMaxOutputTokens}, // the configured default
		{"", Cl100kBase, DefaultMaxOutputTokens},
	}
	for _, tt := range tests {
		m, err := e.resolve(tt.model)
		if err != nil {
			t.Fatal(err)
		}
		if m.encoding != tt.enc || m.maxOutput != tt.maxOutput {
			t.Errorf("resolve(%q) = encoding %q, max output %d; want %q, %d", tt.model, m.encoding, m.maxOutput, tt.enc, tt.maxOutput)
		}
	}
	// A ratio rule: 35 code points at 3.5 characters per token.
	est, err := e.Estimate("/v1/embeddings", []byte(`{"model":"claude-x","input":"`+strings.Repeat("é", 35)+`"}`))
	if err != nil || est.InputTokens != 10 {
		t.Errorf("ratio estimate = %d, %v; want 10", est.InputTokens, err)
	}
}

func TestConfigValidation(t *testing.T) {
	_, err := NewEstimator(Config{
		MaxBodyBytes:    -1,
		SampleBytes:     10,
		DefaultEncoding: "p50k_base",
		Models: []ModelRule{
			{Prefix: "", Encoding: O200kBase},
			{Prefix: "x", Encoding: "gpt2"},
			{Prefix: "y", Encoding: O200kBase, CharsPerToken: 4},
			{Prefix: "X", CharsPerToken: -1},
		},
		Images: ImageCost{TileTokens: -5},
	})
	if err == nil {
		t.Fatal("NewEstimator(bad config) = nil error")
	}
	for _, want := range []string{
		"max_body_bytes", "sample_bytes", "default_encoding", "models[0].prefix", "models[1].encoding",
		"models[2]: set encoding or chars_per_token", "models[3].chars_per_token", `models[3].prefix: "x" duplicates models[1]`,
		"images.tile_tokens",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewEstimator error does not mention %q:\n%v", want, err)
		}
	}
}

// TestChatParts covers content parts, names, tool calls and schemas.
func TestChatParts(t *testing.T) {
	e := newTestEstimator(t)
	c, _ := e.counter(O200kBase)
	n := func(s string) int64 { return int64(c.Count(s)) }
	tests := []struct {
		name string
		body string
		want int64
	}{
		{"parts", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"Hello there"},{"type":"text","text":"General Kenobi"}]}]}`,
			3 + n("user") + n("Hello there") + n("General Kenobi") + 3},
		{"low image", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"low"}}]}]}`,
			3 + n("user") + 85 + 3},
		{"image unknown size", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`,
			3 + n("user") + 765 + 3},
		{"tool call and result", `{"model":"gpt-4o","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\":\"x\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"42"}]}`,
			3 + n("assistant") + n("call_1") + n("lookup") + n(`{"q":"x"}`) + 3 + n("tool") + n("call_1") + n("42") + 3},
		{"audio priced by size", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]}`,
			3 + n("user") + (int64(len(`{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}`))+3)/4 + 3},
		{"json schema", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a", "schema":{"type":"object"}}}}`,
			3 + n("user") + n("x") + 3 + n(`{"name":"a","schema":{"type":"object"}}`)},
		{"escaped text", `{"model":"gpt-4o","messages":[{"role":"user","content":"line\none \u00e9\"q\""}]}`,
			3 + n("user") + n("line\none é\"q\"") + 3},
	}
	for _, tt := range tests {
		est, err := e.Estimate("/v1/chat/completions", []byte(tt.body))
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if est.InputTokens != tt.want {
			t.Errorf("%s: InputTokens = %d; want %d", tt.name, est.InputTokens, tt.want)
		}
	}
}

func TestResponsesAndCompletions(t *testing.T) {
	e := newTestEstimator(t)
	c, _ := e.counter(O200kBase)
	n := func(s string) int64 { return int64(c.Count(s)) }
	tests := []struct {
		name, path, body string
		want             int64
	}{
		{"responses string", "/v1/responses", `{"model":"gpt-5","instructions":"Be brief.","input":"Why is the sky blue?"}`,
			3 + n("system") + n("Be brief.") + 3 + n("user") + n("Why is the sky blue?") + 3},
		{"responses items", "/v1/responses", `{"model":"gpt-5","input":[{"role":"user","content":[{"type":"input_text","text":"Hi"},{"type":"input_image","image_url":"https://x/y.png","detail":"low"}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"},{"type":"item_reference","id":"msg_1"}]}`,
			3 + n("user") + n("Hi") + 85 + n("c1") + n("f") + n("{}") + n("c1") + n("ok") + 3},
		{"responses tool", "/v1/responses", `{"model":"gpt-5","input":"x","tools":[{"type":"function","name":"f","description":"Does f.","parameters":{"type":"object","properties":{}}}]}`,
			3 + n("user") + n("x") + 3 + 7 + n("f:Does f") + 12},
		{"completions string", "/v1/completions", `{"model":"gpt-4o","prompt":"Once upon a time","suffix":" The end."}`,
			n("Once upon a time") + n(" The end.")},
		{"completions default prompt", "/v1/completions", `{"model":"gpt-4o"}`, 1},
		{"completions token ids", "/v1/completions", `{"model":"gpt-4o","prompt":[1,2,3]}`, 3},
	}
	for _, tt := range tests {
		est, err := e.Estimate(tt.path, []byte(tt.body))
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if est.InputTokens != tt.want {
			t.Errorf("%s: InputTokens = %d; want %d", tt.name, est.InputTokens, tt.want)
		}
	}
}

func TestEstimateStreamFlagsAndPrice(t *testing.T) {
	prices, err := NewPrices(map[string]Price{"gpt-4o": {Input: 2.5, Output: 10}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEstimator(Config{Prices: prices})
	if err != nil {
		t.Fatal(err)
	}
	est, err := e.Estimate("/v1/chat/completions", []byte(`{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	// 3 + "user" (1) + "hi" (1) + 3 = 8 input tokens; 8×2.5 + 100×10 = 1020 µ$.
	want := Estimate{Endpoint: EndpointChatCompletions, Model: "gpt-4o", Encoding: O200kBase, InputTokens: 8, OutputTokens: 100,
		Stream: true, IncludeUsage: true, CostMicros: 1020, Priced: true}
	if !reflect.DeepEqual(est, want) {
		t.Errorf("Estimate = %+v;\nwant %+v", est, want)
	}
	if est.TotalTokens() != 108 {
		t.Errorf("TotalTokens() = %d; want 108", est.TotalTokens())
	}
}

// TestConcurrentEstimates runs estimates from several goroutines (under
// -race this checks the shared encoders).
func TestConcurrentEstimates(t *testing.T) {
	e := newTestEstimator(t)
	body := chatBody(t, "gpt-4o", cookbookMessages, nil)
	body4 := chatBody(t, "gpt-4", cookbookMessages, nil)
	done := make(chan error)
	for i := range 4 {
		go func() {
			var err error
			for range 20 {
				b, want := body, int64(124)
				if i%2 == 1 {
					b, want = body4, 129
				}
				est, e2 := e.Estimate("/v1/chat/completions", b)
				if e2 != nil || est.InputTokens != want {
					err = fmt.Errorf("goroutine %d: %d, %v; want %d", i, est.InputTokens, e2, want)
				}
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// lenCounter records the longest text it was asked to count.
type lenCounter struct {
	Counter
	mu      sync.Mutex
	longest int
}

func (c *lenCounter) Count(s string) int {
	c.mu.Lock()
	c.longest = max(c.longest, len(s))
	c.mu.Unlock()
	return c.Counter.Count(s)
}

// TestCountTextChunks: long text reaches the tokenizer in chunks of at most
// maxChunk bytes, and the total is still exact for natural text.
func TestCountTextChunks(t *testing.T) {
	e := newTestEstimator(t)
	for _, enc := range []Encoding{O200kBase, Cl100kBase} {
		c, err := e.counter(enc)
		if err != nil {
			t.Fatal(err)
		}
		lc := &lenCounter{Counter: c}
		for _, text := range []string{
			corpusText(englishCorpus, 20<<10, 7),
			corpusText(mixedCorpus, 20<<10, 8),
			"a" + strings.Repeat("  b", 2000),
			strings.Repeat("x\u3000 y ", 1000),
		} {
			if got, want := countText(lc, text), refCount(t, enc, text); got != want {
				t.Errorf("%s countText(%.30q...) = %d; want %d", enc, text, got, want)
			}
		}
		// A run without spaces is cut too (with tiktoken-go, 64 KiB of one
		// letter in one piece takes seconds).
		countText(lc, strings.Repeat("é", 32<<10))
		if lc.longest > maxChunk {
			t.Errorf("%s: a %d-byte text reached the tokenizer; want at most %d", enc, lc.longest, maxChunk)
		}
	}
}

// TestCountText: CountText counts a model's text as countText does with
// the model's counter (in chunks), and nothing for empty text.
func TestCountText(t *testing.T) {
	e := newTestEstimator(t)
	c, err := e.Counter("gpt-4o-mini")
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"", "Hello, world.", corpusText(englishCorpus, 4<<10, 3), strings.Repeat("é", 4<<10)} {
		if got, want := e.CountText("gpt-4o-mini", text), int64(countText(c, text)); got != want {
			t.Errorf("CountText(%.30q...) = %d; want %d", text, got, want)
		}
	}
}

// TestBPECounterEstimates: an Estimator on the allocation-free counter gives
// the same estimates as one on tiktoken-go, for the cookbook's examples and
// the realistic requests (exact and sampled).
func TestBPECounterEstimates(t *testing.T) {
	ref := newTestEstimator(t)
	fast, err := NewEstimator(Config{Counters: BPECounter})
	if err != nil {
		t.Fatal(err)
	}
	bodies := [][]byte{
		chatBody(t, "gpt-4", cookbookMessages, nil),
		chatBody(t, "gpt-4o", cookbookMessages, nil),
	}
	for _, r := range realisticRequests() {
		bodies = append(bodies, chatBody(t, r.model, r.msgs, nil))
	}
	for i, body := range bodies {
		want, err := ref.Estimate("/v1/chat/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fast.Estimate("/v1/chat/completions", body)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("request %d: BPECounter estimate %+v, %v;\nwant %+v", i, got, err, want)
		}
	}
}

// TestEstimateEndpoint: a caller that knows the endpoint gets the same
// estimate as one that names it by path, and the same errors.
func TestEstimateEndpoint(t *testing.T) {
	e, err := NewEstimator(Config{MaxBodyBytes: 200})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		ep   Endpoint
		body string
	}{
		{"/v1/chat/completions", EndpointChatCompletions, `{"model":"gpt-4o","max_tokens":7,"messages":[{"role":"user","content":"hello there"}]}`},
		{"/v1/embeddings", EndpointEmbeddings, `{"model":"text-embedding-3-small","input":"hello"}`},
		{"/v1/messages", EndpointMessages, `{"model":"claude-sonnet-4","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		byPath, err1 := e.Estimate(tc.path, []byte(tc.body))
		byEp, err2 := e.EstimateEndpoint(tc.ep, []byte(tc.body))
		if err1 != nil || err2 != nil || !reflect.DeepEqual(byPath, byEp) {
			t.Errorf("%s: Estimate = %+v, %v; EstimateEndpoint(%v) = %+v, %v; want equal", tc.path, byPath, err1, tc.ep, byEp, err2)
		}
	}
	if _, err := e.EstimateEndpoint(EndpointUnknown, []byte(`{}`)); !errors.Is(err, ErrUnsupportedEndpoint) {
		t.Errorf("EstimateEndpoint(unknown) error = %v; want ErrUnsupportedEndpoint", err)
	}
	if _, err := e.EstimateEndpoint(EndpointChatCompletions, make([]byte, 201)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("EstimateEndpoint(201 bytes over a 200 cap) error = %v; want ErrTooLarge", err)
	}
}
