package weights

import (
	"bytes"
	"math/rand/v2"
	"strings"
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
	var at [maxTemplateStrings]span
	used = a.tmpl.ok && a.tmpl.match(data, &at)
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
	chunk := []byte(`{"choices":[{"delta":{"content":" quick"},"finish_reason":null,"index":0,"logprobs":null}],"created":1,"id":"c","model":"m","object":"chat.completion.chunk","obfuscation":"x7Q","usage":null}`)
	for _, tc := range []struct {
		name, from, to string
		used           bool
	}{
		{"another word", `" quick"`, `" brown"`, true},
		{"empty", `" quick"`, `""`, true},
		{"escapes", `" quick"`, `"a\"b\u00e9\n"`, true},
		{"invalid UTF-8", `" quick"`, "\"\xff\xfe\"", true},
		{"other padding", `"x7Q"`, `"pR2vk9"`, true},
		{"another id", `"id":"c"`, `"id":"chatcmpl-2"`, true},
		{"null", `" quick"`, `null`, false},
		{"a number", `" quick"`, `7`, false},
		{"control character", `" quick"`, "\"a\x01\"", false},
		{"bad escape", `" quick"`, `"\x"`, false},
		{"short unicode escape", `" quick"`, `"\u00e"`, false},
		{"closes early", `" quick"`, `"a","content":"b"`, false},
		{"unterminated", `"usage":null}`, `"usage":"abc`, false},
		{"another key", `"content"`, `"refusal"`, false},
		{"a key folded", `"content"`, `"Content"`, false},
		{"another number", `"index":0`, `"index":1`, false},
		{"a space", `,"created"`, `, "created"`, false},
		{"more after", `"usage":null}`, `"usage":null} `, false},
	} {
		data := bytes.Replace(chunk, []byte(tc.from), []byte(tc.to), 1)
		if used := readAfter(t, chunk, data); used != tc.used {
			t.Errorf("%s: template used %v; want %v", tc.name, used, tc.used)
		}
	}
	// The texts are counted in the full pass's order, whatever the order
	// of the strings.
	multi := []byte(`{"choices":[{"text":"T","delta":{"refusal":"r","content":"c"}}]}`)
	if !readAfter(t, multi, bytes.Replace(multi, []byte(`"T"`), []byte(`"U"`), 1)) {
		t.Error("a chunk of three texts: template not used")
	}
	// A chunk with more strings, or more bytes around them, than the
	// bounds is no template.
	many := `{"choices":[{"delta":{"content":"a"}}]` + strings.Repeat(`,"x":"y"`, maxTemplateStrings) + `}`
	long := `{"choices":[{"delta":{"content":"a"}}],"id":` + strings.Repeat(" ", maxTemplateBytes) + `"x"}`
	for _, data := range []string{many, long} {
		s := NewStreamReader(nil, StreamConfig{})
		s.readChunk([]byte(data))
		if s.tmpl.ok || cap(s.tmpl.fixed) > 2*maxTemplateBytes {
			t.Errorf("a chunk of %d bytes taken as a template", len(data))
		}
	}
}

// Random text chunks, each followed by itself with some of its value
// strings replaced (by strings, valid or not, or other values), and
// mangled anywhere or not: the template reads each as the full pass
// does.
func TestChunkTemplateRandomEvents(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 4))
	texts := []string{`" The"`, `"a\"b\u00e9"`, `""`, "\"\xff\"", `"日本"`, `"\ud800"`, `null`, `12`, `"x`, `"\"`, "\"\x1f\"", `"a"`, `"\u12"`}
	used, tried := 0, 0
	for range 200_000 {
		ev := randomEvent(rng, 0)
		if textSpans(ev) == nil {
			continue // not a text chunk, or one without text
		}
		tried++
		// Its value strings replaced, each or not.
		data := ev
		p := chunkParser{b: ev}
		p.event()
		for k := min(p.nstr, maxTemplateStrings) - 1; k >= 0; k-- {
			if sp := p.strs[k]; rng.IntN(2) == 0 {
				data = []byte(string(data[:sp.start]) + texts[rng.IntN(len(texts))] + string(data[sp.end:]))
			}
		}
		if rng.IntN(3) == 0 {
			data = mangle(rng, data)
		}
		if readAfter(t, ev, data) {
			used++
		}
	}
	t.Logf("the template read %d of %d text chunks", used, tried)
	if tried < 500 || used < tried/4 {
		t.Errorf("the template was used for %d of %d text chunks; the generator no longer tests it", used, tried)
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
