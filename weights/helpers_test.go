package weights

import (
	_ "embed"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// English chat text (requests of the kind users send: questions, e-mails,
// instructions) and text mixing German, French, Japanese, Chinese, Russian,
// code, SQL, JSON and emoji, written for these tests.
var (
	//go:embed testdata/english.txt
	englishCorpus string
	//go:embed testdata/mixed.txt
	mixedCorpus string
)

// corpusText returns about n bytes of corpus paragraphs in a shuffled order
// (a fixed seed, so every run sees the same text), cut at a word boundary.
func corpusText(corpus string, n int, seed uint64) string {
	paras := strings.Split(strings.TrimSpace(corpus), "\n\n")
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var b strings.Builder
	b.Grow(n + 1024)
	for b.Len() < n {
		rng.Shuffle(len(paras), func(i, j int) { paras[i], paras[j] = paras[j], paras[i] })
		for _, p := range paras {
			if b.Len() > 0 {
				b.WriteString("\n\n")
			}
			b.WriteString(p)
			if b.Len() >= n {
				break
			}
		}
	}
	s := b.String()[:n]
	if i := strings.LastIndexByte(s, ' '); i > n/2 {
		s = s[:i]
	}
	return s
}

var testEstimator = sync.OnceValues(func() (*Estimator, error) { return NewEstimator(Config{}) })

// newTestEstimator returns a shared Estimator with the default Config.
func newTestEstimator(t testing.TB) *Estimator {
	t.Helper()
	e, err := testEstimator()
	if err != nil {
		t.Fatalf("NewEstimator(Config{}) = %v", err)
	}
	return e
}

// refCount is the reference count: tiktoken-go's Encode, as a Python user of
// tiktoken would call encode(text).
func refCount(t testing.TB, enc Encoding, text string) int {
	t.Helper()
	tk, err := tiktokenEncoder(enc)
	if err != nil {
		t.Fatal(err)
	}
	return len(tk.Encode(text, nil, nil))
}

// refMessages is the cookbook's num_tokens_from_messages: 3 tokens per
// message, the tokens of every value, 1 more per name, 3 to prime the reply.
func refMessages(t testing.TB, enc Encoding, msgs []map[string]string) int {
	t.Helper()
	n := 0
	for _, m := range msgs {
		n += 3
		for k, v := range m {
			n += refCount(t, enc, v)
			if k == "name" {
				n++
			}
		}
	}
	return n + 3
}

// chatBody returns a chat request body.
func chatBody(t testing.TB, model string, msgs []map[string]string, extra map[string]any) []byte {
	t.Helper()
	req := map[string]any{"model": model, "messages": msgs}
	for k, v := range extra {
		req[k] = v
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cookbookMessages is the example conversation of OpenAI's cookbook "How to
// count tokens with tiktoken", section 6.
var cookbookMessages = []map[string]string{
	{"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
	{"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
	{"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
	{"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
	{"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
	{"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."},
}

// cookbookTools is the tools example of the same cookbook, section 7.
const cookbookTools = `[{"type":"function","function":{"name":"get_current_weather","description":"Get the current weather in a given location","parameters":{"type":"object","properties":{"location":{"type":"string","description":"The city and state, e.g. San Francisco, CA"},"unit":{"type":"string","description":"The unit of temperature to return","enum":["celsius","fahrenheit"]}},"required":["location"]}}}]`

var cookbookToolMessages = []map[string]string{
	{"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
	{"role": "user", "content": "What's the weather like in San Francisco?"},
}
