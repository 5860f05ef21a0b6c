package weights

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// readBoth gives data to one reader's handle (which reads text chunks with
// readChunk) and to another's general path, handleEvent, and fails unless
// both learnt the same: the text collected, the result, the report; and
// unless readChunk's verdict on the JSON's validity is encoding/json's. It
// reports whether readChunk read data as a text chunk.
func readBoth(t *testing.T, data []byte) (fast bool) {
	t.Helper()
	a, b := NewStreamReader(nil, StreamConfig{}), NewStreamReader(nil, StreamConfig{})
	dropA := a.handle("", data)
	dropB := false
	if firstByte(data) == '{' && json.Valid(data) {
		dropB = b.handleEvent("", data)
	}
	if string(a.pending) != string(b.pending) || a.res != b.res || a.report != b.report || dropA != dropB {
		t.Fatalf("%s\nchunkText path: text %q result %+v drop %v\ngeneral path:   text %q result %+v drop %v",
			data, a.pending, a.res, dropA, b.pending, b.res, dropB)
	}
	switch NewStreamReader(nil, StreamConfig{}).readChunk(data) {
	case chunkText:
		if !json.Valid(data) {
			t.Fatalf("%q: read as a text chunk, but not valid JSON", data)
		}
		return true
	case chunkInvalid:
		if json.Valid(data) {
			t.Fatalf("%q: found invalid, but valid JSON", data)
		}
	}
	return false
}

func TestChunkTextMatchesGeneralPath(t *testing.T) {
	for _, tc := range []struct {
		data string
		fast bool
	}{
		{`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":" The"},"finish_reason":null,"logprobs":null}],"usage":null}`, true},
		{` {"choices":[{"delta":{"content":"a\u00e9\n\"b"}}]} `, true},
		{`{"choices":[{"delta":{"content":"x","refusal":"r","reasoning_content":"t","tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":1}"}},null],"function_call":{"arguments":"A","name":"N"}},"text":"T"},null,{"text":"U"}]}`, true},
		{`{"choices":[{"text":" fox","index":0,"logprobs":null,"finish_reason":null}],"object":"text_completion"}`, true},
		{`{"choices":[],"usage":null}`, true},
		{`{"choices":null}`, true},
		{`{}`, true},
		{"{\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}", true}, // invalid UTF-8, replaced as encoding/json does
		// Left to the general path.
		{`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`, false},
		{`{"Choices":[{"delta":{"content":"folded"}}]}`, false},
		{`{"choices":[{"delta":{"CONTENT":"folded"}}]}`, false},
		{`{"choices":[{"delta":{"content":"a","content":"b"}}]}`, false},
		{`{"choices":[{"delta":{"content":"a"}}],"choices":[{"delta":{"content":"b"}}]}`, false},
		{`{"choices":[{"delta":{"c\u006fntent":"escaped key"}}]}`, false},
		{`{"choices":[{"delta":{"conten\u0074":"escaped key"}}]}`, false},
		{`{"choices":[{"delta":{"content":7}}]}`, false},              // a type error: the whole event is ignored
		{`{"object":1,"choices":[{"delta":{"content":"x"}}]}`, false}, // the same
		{`{"choices":[{"delta":{"content":"x"}}],"type":"response.output_text.delta","delta":"y"}`, false},
		{`{"choices":{"delta":{"content":"x"}}}`, false},
		{`{"choices":[{"delta":{"tool_calls":[{"function":{"name":1}}]}}]}`, false},
		{`{"message":"boom","choices":[]}`, false},
		{`{"error":{"message":"boom"}}`, false},
		{"{\"choices\":[{\"delta\":{\"\u017fontent\":\"long s\"}}]}", false},
	} {
		if fast := readBoth(t, []byte(tc.data)); fast != tc.fast {
			t.Errorf("%s: readChunk took it %v; want %v", tc.data, fast, tc.fast)
		}
	}
}

// A text chunk is read without allocating.
func TestChunkTextAllocs(t *testing.T) {
	data := []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" The"},"finish_reason":null}],"usage":null}`)
	s := NewStreamReader(nil, StreamConfig{})
	s.pending = make([]byte, 0, 1<<20)
	if n := testing.AllocsPerRun(100, func() {
		if s.readChunk(data) != chunkText {
			t.Fatal("not a text chunk")
		}
	}); n != 0 {
		t.Errorf("%v allocations per chunk; want 0", n)
	}
}

// Random events built from the names and values the general path reads,
// in every case, order and repetition, and of every type: chunkText and
// the general path learn the same from each.
func TestChunkTextRandomEvents(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 3))
	fast := 0
	for range 20_000 {
		ev := randomEvent(rng, 0)
		if readBoth(t, ev) {
			fast++
		}
		// And a mangled copy, mostly not JSON: the verdicts on validity
		// must be encoding/json's.
		readBoth(t, mangle(rng, ev))
	}
	if fast < 1000 {
		t.Errorf("readChunk took %d of 20000 random events; the generator no longer makes text chunks", fast)
	}
}

// mangle returns a copy of data cut short, with a byte replaced by one
// that matters to JSON, or with a byte repeated, at a random place.
func mangle(rng *rand.Rand, data []byte) []byte {
	bad := []byte(string(data))
	switch i := rng.IntN(len(bad)); rng.IntN(3) {
	case 0:
		bad = bad[:i]
	case 1:
		bad[i] = `{}[]",:\ 0-eE.tfn`[rng.IntN(17)]
	default:
		bad = append(bad[:i], append([]byte{bad[i]}, bad[i:]...)...)
	}
	return bad
}

func FuzzChunkText(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		f.Add(randomEvent(rng, 0))
	}
	f.Fuzz(func(t *testing.T, data []byte) { readBoth(t, data) })
}

var randomKeys = [][]string{
	{"choices", "choices", "choices", "usage", "object", "id", "type", "Choices", "message", "delta", "candidates", "usageMetadata"},
	{"delta", "delta", "text", "index", "Delta", "finish_reason"},
	{"content", "content", "refusal", "reasoning_content", "tool_calls", "function_call", "role", "Content", "c\\u006fntent"},
	{"function", "index", "FUNCTION"},
	{"name", "arguments", "Name"},
}

// randomEvent returns a JSON object at level depth of a chunk (0 the
// event, 1 a choice, 2 a delta, 3 a tool call, 4 a function).
func randomEvent(rng *rand.Rand, depth int) []byte {
	var b strings.Builder
	b.WriteByte('{')
	keys := randomKeys[min(depth, len(randomKeys)-1)]
	for i := range rng.IntN(4) + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		k := keys[rng.IntN(len(keys))]
		b.WriteString(`"` + k + `":`)
		b.Write(randomValue(rng, k, depth))
	}
	b.WriteByte('}')
	return []byte(b.String())
}

func randomValue(rng *rand.Rand, key string, depth int) []byte {
	switch rng.IntN(12) {
	case 0:
		return []byte("null")
	case 1:
		return []byte("12")
	case 2:
		return []byte(`{"x":[1,{"y":"z"}]}`)
	}
	strs := []string{`" The"`, `"a\"b\u00e9"`, `""`, "\"\xff\"", `"日本"`, `"\ud800"`}
	switch {
	case depth == 0 && key == "choices", depth == 2 && key == "tool_calls":
		var b strings.Builder
		b.WriteByte('[')
		for i := range rng.IntN(3) {
			if i > 0 {
				b.WriteByte(',')
			}
			if rng.IntN(8) == 0 {
				b.WriteString("null")
			} else {
				b.Write(randomEvent(rng, depth+1))
			}
		}
		b.WriteByte(']')
		return []byte(b.String())
	case depth == 1 && key == "delta", depth == 2 && key == "function_call", depth == 3 && key == "function":
		next := depth + 1
		if key == "function_call" {
			next = 4
		}
		return randomEvent(rng, next)
	}
	return []byte(strs[rng.IntN(len(strs))])
}

// benchChunk is a chat chunk as the simulated upstream sends it.
var benchChunk = []byte(`{"choices":[{"delta":{"content":" quick"},"finish_reason":null,"index":0,"logprobs":null}],"created":1764590000,"id":"chatcmpl-sim12345","model":"gpt-4o-mini","object":"chat.completion.chunk","system_fingerprint":"fp_sim","usage":null}`)

// BenchmarkReadChunk reads a text chunk in full, as the first chunk of a
// stream is read, and as the chunks after it are, like the chunk before
// but for the text (from the template); BenchmarkPeerHandleEvent reads it
// with encoding/json, as every chunk was read before readChunk.
func BenchmarkReadChunk(b *testing.B) {
	for _, template := range []bool{false, true} {
		b.Run(fmt.Sprintf("template=%v", template), func(b *testing.B) {
			s := NewStreamReader(nil, StreamConfig{})
			b.SetBytes(int64(len(benchChunk)))
			b.ReportAllocs()
			for b.Loop() {
				s.pending = s.pending[:0]
				if !template {
					s.tmpl.reset()
				}
				if s.readChunk(benchChunk) != chunkText || !s.tmpl.ok {
					b.Fatal("not a text chunk")
				}
			}
		})
	}
}

func BenchmarkPeerHandleEvent(b *testing.B) {
	s := NewStreamReader(nil, StreamConfig{})
	b.SetBytes(int64(len(benchChunk)))
	b.ReportAllocs()
	for b.Loop() {
		s.pending = s.pending[:0]
		s.handleEvent("", benchChunk)
		if len(s.pending) == 0 {
			b.Fatal("no text")
		}
	}
}
