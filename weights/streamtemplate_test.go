package weights

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// readAfter reads data with a reader whose template is the last text
// chunk it read, tmpl, and with a fresh reader, and fails unless both
// made the same of it: the verdict and the text collected. It reports
// whether the template was used.
func readAfter(t *testing.T, tmpl, data []byte) (used bool) {
	t.Helper()
	a, b := NewStreamReader(nil, StreamConfig{}), NewStreamReader(nil, StreamConfig{})
	a.readChunk(tmpl)
	a.pending = a.pending[:0]
	_, used = a.tmpl.match(data)
	va, vb := a.readChunk(data), b.readChunk(data)
	if va != vb || string(a.pending) != string(b.pending) {
		t.Fatalf("after %s\n%s\nwith the template (used %v): verdict %v text %q\nread in full: verdict %v text %q", tmpl, data, used, va, a.pending, vb, b.pending)
	}
	return used
}

// textSpans returns the non-empty text spans of a text chunk.
func textSpans(data []byte) []span {
	p := chunkParser{b: data}
	if p.event() != chunkText {
		return nil
	}
	var out []span
	for _, sp := range p.spans[:p.n] {
		if sp.end > sp.start {
			out = append(out, sp)
		}
	}
	return out
}

func TestChunkTemplate(t *testing.T) {
	chunk := []byte(`{"choices":[{"delta":{"content":" quick"},"finish_reason":null,"index":0,"logprobs":null}],"created":1,"id":"c","model":"m","object":"chat.completion.chunk","usage":null}`)
	for _, tc := range []struct {
		name, text string
		used       bool
	}{
		{"another word", `" brown"`, true},
		{"empty", `""`, true},
		{"escapes", `"a\"b\u00e9\n"`, true},
		{"invalid UTF-8", "\"\xff\xfe\"", true},
		{"null", `null`, false},
		{"a number", `7`, false},
		{"control character", "\"a\x01\"", false},
		{"bad escape", `"\x"`, false},
		{"short unicode escape", `"\u00e"`, false},
		{"closes early", `"a","content":"b"`, false},
		{"unterminated", `"abc`, false},
		{"escaped quote at the end", `"abc\"`, false},
	} {
		at := bytes.Index(chunk, []byte(`" quick"`))
		data := []byte(string(chunk[:at]) + tc.text + string(chunk[at+len(`" quick"`):]))
		if used := readAfter(t, chunk, data); used != tc.used {
			t.Errorf("%s: template used %v; want %v", tc.name, used, tc.used)
		}
	}
	// A chunk with two texts, or none, is no template.
	for _, data := range []string{
		`{"choices":[{"delta":{"content":"a","refusal":"b"}}]}`,
		`{"choices":[{"delta":{"content":null}}]}`,
	} {
		s := NewStreamReader(nil, StreamConfig{})
		s.readChunk(chunk)
		s.readChunk([]byte(data))
		if s.tmpl.ok {
			t.Errorf("%s: taken as a template", data)
		}
	}
	// Nor one whose other bytes are many.
	s := NewStreamReader(nil, StreamConfig{})
	long := []byte(`{"choices":[{"delta":{"content":"a"}}],"id":"` + string(bytes.Repeat([]byte("x"), maxTemplateBytes)) + `"}`)
	s.readChunk(long)
	if s.tmpl.ok || cap(s.tmpl.b) > maxTemplateBytes {
		t.Errorf("a chunk of %d bytes around its text taken as a template", len(long))
	}
}

// Random text chunks, each followed by itself with its text replaced, or
// mangled anywhere: the template reads each as the full pass does.
func TestChunkTemplateRandomEvents(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 4))
	texts := []string{`" The"`, `"a\"b\u00e9"`, `""`, "\"\xff\"", `"日本"`, `"\ud800"`, `null`, `12`, `"x`, `"\"`, "\"\x1f\"", `"a"`, `"\u12"`}
	used, tried := 0, 0
	for range 200_000 {
		ev := randomEvent(rng, 0)
		sps := textSpans(ev)
		// Its texts but one made null, so that it is a template.
		for i := len(sps) - 1; i > 0; i-- {
			ev = []byte(string(ev[:sps[i].start]) + "null" + string(ev[sps[i].end:]))
		}
		if sps = textSpans(ev); len(sps) != 1 {
			continue
		}
		tried++
		sp := sps[0]
		data := []byte(string(ev[:sp.start]) + texts[rng.IntN(len(texts))] + string(ev[sp.end:]))
		if rng.IntN(3) == 0 {
			data = mangle(rng, data)
		}
		if readAfter(t, ev, data) {
			used++
		}
	}
	if tried < 500 || used < tried/4 {
		t.Errorf("the template was used for %d of %d chunks with one text; the generator no longer tests it", used, tried)
	}
}

func FuzzChunkTemplate(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 50 {
		ev := randomEvent(rng, 0)
		f.Add(ev, ev)
	}
	f.Fuzz(func(t *testing.T, tmpl, data []byte) { readAfter(t, tmpl, data) })
}
