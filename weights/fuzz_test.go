package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/jsonscan"
)

// fuzzEstimator has a small body cap and sampling threshold so that fuzzed
// bodies reach both the exact and the sampled paths.
var fuzzEstimator = sync.OnceValues(func() (*Estimator, error) {
	return NewEstimator(Config{MaxBodyBytes: 64 << 10, SampleThreshold: 4096, SampleBytes: 1024})
})

// fuzzExactEstimator is fuzzEstimator without sampling.
var fuzzExactEstimator = sync.OnceValues(func() (*Estimator, error) {
	return NewEstimator(Config{MaxBodyBytes: 64 << 10, SampleThreshold: -1})
})

// fuzzEstimate checks that any body yields either a typed error or an
// estimate with non-negative figures, the same on a second call, whose
// MaxInputTokens, when sampled, is at least the exact count.
func fuzzEstimate(f *testing.F, path string, seeds ...string) {
	fuzzEstimateWith(f, func(e *Estimator, body []byte) (Estimate, error) { return e.Estimate(path, body) }, seeds...)
}

// fuzzEstimateWith is fuzzEstimate for bodies priced by estimate.
func fuzzEstimateWith(f *testing.F, estimate func(*Estimator, []byte) (Estimate, error), seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"model":"gpt-4o","max_tokens":-1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := fuzzEstimator()
		if err != nil {
			t.Fatal(err)
		}
		est, err := estimate(e, body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Estimate error %v matches neither ErrMalformed nor ErrTooLarge", err)
			}
			if errors.Is(err, ErrTooLarge) && len(body) <= 64<<10 {
				t.Fatalf("ErrTooLarge for a %d-byte body", len(body))
			}
			return
		}
		if est.InputTokens < 0 || est.OutputTokens < 0 || est.Images < 0 {
			t.Fatalf("negative estimate %+v", est)
		}
		if !json.Valid(body) {
			t.Fatalf("estimated an invalid JSON body: %+v", est)
		}
		again, err := estimate(e, body)
		if err != nil || !reflect.DeepEqual(again, est) {
			t.Fatalf("second Estimate = %+v, %v; want %+v", again, err, est)
		}
		if !est.Sampled {
			if est.MaxInputTokens != 0 {
				t.Fatalf("counted estimate %+v has a MaxInputTokens", est)
			}
			return
		}
		xe, err := fuzzExactEstimator()
		if err != nil {
			t.Fatal(err)
		}
		exact, err := estimate(xe, body)
		if err != nil || exact.InputTokens > est.MaxInputTokens || est.InputTokens > est.MaxInputTokens {
			t.Fatalf("sampled %+v; exact count %d (error %v) above its MaxInputTokens", est, exact.InputTokens, err)
		}
	})
}

func FuzzEstimateChat(f *testing.F) {
	fuzzEstimate(f, "/v1/chat/completions",
		string(chatBody(f, "gpt-4o", cookbookMessages, nil)),
		`{"model":"gpt-4","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,`+tinyPNG+`"}}]}],"tools":`+cookbookTools+`}`,
		`{"model":"gpt-4o","n":2,"stream":true,"messages":[{"role":"assistant","tool_calls":[{"id":"1","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object"}}}}`,
		`{"messages":[{"role":"user","content":"`+strings.Repeat("word ", 1200)+`"}]}`,
		`{"messages":[{"role":"user","content":"\u00e9\ud83d\ude00"}],"functions":[{"name":"f","parameters":{"properties":{"a":{"type":["string","null"],"enum":[1,"x"]},"b":{"type":"object","properties":{"c":{"type":"string"}}}}}}]}`,
	)
}

func FuzzEstimateCompletions(f *testing.F) {
	fuzzEstimate(f, "/v1/completions",
		`{"model":"gpt-3.5-turbo-instruct","prompt":"Say this is a test","max_tokens":7,"n":2,"best_of":3}`,
		`{"prompt":["a","b"],"suffix":"c"}`,
		`{"prompt":[1,2,3]}`,
		`{"prompt":[[1,2],[3]]}`,
		`{"prompt":[]}`,
	)
}

func FuzzEstimateEmbeddings(f *testing.F) {
	fuzzEstimate(f, "/v1/embeddings",
		`{"model":"text-embedding-3-small","input":"The food was delicious and the waiter..."}`,
		`{"model":"text-embedding-3-large","input":["a","b"],"dimensions":256}`,
		`{"input":[1,2,3]}`,
		`{"input":[[1],[2,3]]}`,
	)
}

func FuzzEstimateResponses(f *testing.F) {
	fuzzEstimate(f, "/v1/responses",
		`{"model":"gpt-5","instructions":"Be brief.","input":"Tell me a story.","max_output_tokens":100}`,
		`{"model":"gpt-5","input":[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"https://x/y.png"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"},{"type":"reasoning","encrypted_content":"AAAA"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"x":{"type":"string"}}}},{"type":"web_search"}],"text":{"format":{"type":"json_schema","schema":{"type":"object"}}}}`,
	)
}

// FuzzStreamReader checks, for any stream, that reading it whole, split in
// two at any byte, or one byte at a time gives the same output and result;
// that the output equals the input when nothing is stripped; and that no
// buffer outgrows MaxEventBytes.
func FuzzStreamReader(f *testing.F) {
	for _, in := range streamFixtures() {
		f.Add(in, uint16(len(in)/2), false)
		f.Add(in, uint16(len(in)/3), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, split uint16, strip bool) {
		const maxEv = 256
		cfg := StreamConfig{StripUsage: strip, MaxEventBytes: maxEv, InputTokens: 1, OutputTokens: 64}
		read := func(r io.Reader) ([]byte, StreamResult) {
			s := NewStreamReader(r, cfg)
			var out []byte
			buf := make([]byte, 61)
			for {
				n, err := s.Read(buf)
				out = append(out, buf[:n]...)
				if cap(s.line) > 2*maxEv || cap(s.data) > 2*maxEv || cap(s.raw) > 2*maxEv {
					t.Fatalf("buffers outgrew MaxEventBytes: line %d data %d raw %d", cap(s.line), cap(s.data), cap(s.raw))
				}
				if err == io.EOF {
					res := s.Result()
					if err := usageWithin(Estimate{InputTokens: 1, OutputTokens: 64}, s.StreamedTokens(), res.Usage); err != nil {
						t.Fatalf("Result() = %+v: %v", res, err)
					}
					return out, res
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		wantOut, wantRes := read(bytes.NewReader(in))
		if !strip && !bytes.Equal(wantOut, in) {
			t.Fatalf("pass-through changed the stream")
		}
		if strip && len(wantOut) > len(in) {
			t.Fatalf("stripping added bytes")
		}
		i := int(split) % (len(in) + 1)
		out, res := read(&chunkReader{chunks: [][]byte{bytes.Clone(in[:i]), bytes.Clone(in[i:])}})
		if !bytes.Equal(out, wantOut) || res != wantRes {
			t.Fatalf("split at %d: %q %+v; want %q %+v", i, out, res, wantOut, wantRes)
		}
		out, res = read(&chunkReader{chunks: oneByteChunks(in)})
		if !bytes.Equal(out, wantOut) || res != wantRes {
			t.Fatalf("byte by byte: %q %+v; want %q %+v", out, res, wantOut, wantRes)
		}
	})
}

func oneByteChunks(b []byte) [][]byte {
	c := make([][]byte, len(b))
	for i := range b {
		c[i] = b[i : i+1 : i+1]
	}
	return c
}

// FuzzInjectIncludeUsage checks that an injected body is valid JSON that
// asks for usage, that injecting twice changes nothing, and that every other
// member is kept.
func FuzzInjectIncludeUsage(f *testing.F) {
	for _, s := range []string{`{"model":"m","stream":true}`, `{"stream":true,"stream_options":{"include_usage":false,"x":[1,{"a":"}"}]}}`, `{"stream":true,"stream_options":null}`, ` {"a":"\"","stream":true} `, `{"stream":false}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, injected, err := InjectIncludeUsage(EndpointChatCompletions, body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not match ErrMalformed", err)
			}
			return
		}
		if !injected {
			if !bytes.Equal(out, body) {
				t.Fatalf("not injected but changed: %s", out)
			}
			return
		}
		var before, after map[string]any
		if err := json.Unmarshal(body, &before); err != nil {
			t.Fatalf("injected into an invalid body: %v", err)
		}
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("injected body is not valid JSON: %v\n%s", err, out)
		}
		if after["stream"] != true {
			t.Fatalf("injected into a request that does not stream: %s", body)
		}
		opts, _ := after["stream_options"].(map[string]any)
		if opts["include_usage"] != true {
			t.Fatalf("injected body does not ask for usage: %s", out)
		}
		for k, v := range before {
			if k == "stream_options" {
				continue
			}
			a, _ := json.Marshal(v)
			b, _ := json.Marshal(after[k])
			if !bytes.Equal(a, b) {
				t.Fatalf("member %q changed: %s -> %s", k, a, b)
			}
		}
		again, injected2, err := InjectIncludeUsage(EndpointChatCompletions, out)
		if err != nil || injected2 || !bytes.Equal(again, out) {
			t.Fatalf("second injection = %s, %v, %v; want unchanged", again, injected2, err)
		}
	})
}

// FuzzUnquote checks the string decoder against encoding/json: the same
// string for every literal encoding/json accepts, and a fallback (not a
// different answer) otherwise.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\nb\t\"q\" \\ \/"`, `"\u00e9\ud83d\ude00"`, `"\ud800x"`, `"\ud800\u0041"`, `"\udc00"`, "\"\xff\xfe\"", `"\u12"`, `"\x"`, "\"a\x01\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, lit []byte) {
		var want string
		wantErr := json.Unmarshal(lit, &want)
		var got jstr
		gotErr := got.UnmarshalJSON(lit)
		if wantErr == nil && (gotErr != nil || string(got) != want) {
			t.Fatalf("jstr(%q) = %q, %v; encoding/json gives %q", lit, got, gotErr, want)
		}
		if len(lit) >= 2 && lit[0] == '"' && lit[len(lit)-1] == '"' {
			if v, ok := jsonscan.Unquote(lit[1 : len(lit)-1]); ok && (wantErr != nil || v != want) {
				t.Fatalf("jsonscan.Unquote(%q) = %q; encoding/json gives %q, %v", lit, v, want, wantErr)
			}
		}
	})
}
