package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/benchcpu"
	"github.com/sluicehq/sluice/weights"
)

var (
	fuzzEstOnce sync.Once
	fuzzEst     *weights.Estimator
)

func fuzzEstimator(t testing.TB) *weights.Estimator {
	fuzzEstOnce.Do(func() {
		var err error
		if fuzzEst, err = weights.NewEstimator(weights.Config{}); err != nil {
			t.Fatal(err)
		}
	})
	return fuzzEst
}

// countLines runs data through a line counter in writes of chunk bytes
// and returns its summary and problem, checking on the way that it never
// holds more than a line.
func countLines(t *testing.T, data []byte, chunk int) (fileSummary, string) {
	const maxLine, maxLines, maxBytes = 512, 4, 4096
	lc := newLineCounter(fuzzEstimator(t), maxLine, maxLines, maxBytes, 0)
	var err error
	for rest := data; len(rest) > 0 && err == nil; {
		n := min(chunk, len(rest))
		_, err = lc.Write(rest[:n])
		rest = rest[n:]
		if len(lc.buf) > maxLine {
			t.Fatalf("the counter holds %d bytes; at most a line of %d", len(lc.buf), maxLine)
		}
	}
	if err == nil {
		err = lc.Close()
	}
	if err != nil {
		return fileSummary{}, err.Error()
	}
	s := lc.sum
	if s.lines < 1 || s.lines > maxLines || s.in < 0 || s.out < 0 || !ValidModelName(s.model) || s.model == "" {
		t.Fatalf("summary %+v out of bounds", s)
	}
	if _, ok := batchLineEndpoint(s.endpoint); !ok {
		t.Fatalf("summary endpoint %q is not a priced url", s.endpoint)
	}
	for _, l := range bytes.Split(data, []byte{'\n'}) {
		if len(l) > maxLine {
			t.Fatalf("a line of %d bytes was accepted; the bound is %d", len(l), maxLine)
		}
	}
	return s, ""
}

// FuzzLineCounter: however a batch input file is cut into writes, the
// counter reaches the same summary or the same problem, holds at most a
// line, and accepts only files within its bounds.
func FuzzLineCounter(f *testing.F) {
	ok := `{"custom_id":"r1","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"Hi"}]}}`
	for _, s := range []string{
		ok, ok + "\n" + ok + "\r\n", ok + "\n\n" + strings.Replace(ok, "gpt-4o-mini", "gpt-4o", 1),
		`{"custom_id":"r","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"x"}}`,
		`{"custom_id":"r","custom_id":"s"}`, "[", "\n\n\n", strings.Repeat("x", 600), `{"body":{}}`,
	} {
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		whole, werr := countLines(t, data, len(data)+1)
		cut, cerr := countLines(t, data, int(chunk)%64+1)
		if whole != cut || werr != cerr {
			t.Fatalf("whole: %+v %q; in writes of %d: %+v %q", whole, werr, int(chunk)%64+1, cut, cerr)
		}
	})
}

// TestLineCounterSums: a file's figures are the sums of its lines'
// estimates, each as the body sent alone would be estimated, the output
// capped by the gateway's reservation cap.
func TestLineCounterSums(t *testing.T) {
	est := fuzzEstimator(t)
	bodies := []string{
		`{"model":"gpt-4o-mini","max_tokens":100,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is a river?"}]}`,
		`{"model":"gpt-4o-mini","max_tokens":3000,"messages":[{"role":"user","content":"Tell me about the Loire."}]}`,
	}
	var file strings.Builder
	var in, out int64
	for i, b := range bodies {
		file.WriteString(`{"custom_id":"r` + string(rune('0'+i)) + `","method":"POST","url":"/v1/chat/completions","body":` + b + "}\n")
		e, err := est.EstimateEndpoint(weights.EndpointChatCompletions, []byte(b))
		if err != nil {
			t.Fatal(err)
		}
		in, out = in+e.InputTokens, out+min(e.OutputTokens, 1000)
	}
	lc := newLineCounter(est, 1<<20, 10, 1<<20, 1000)
	if _, err := lc.Write([]byte(file.String())); err != nil {
		t.Fatal(err)
	}
	if err := lc.Close(); err != nil {
		t.Fatal(err)
	}
	want := fileSummary{model: "gpt-4o-mini", endpoint: "/v1/chat/completions", lines: 2, in: in, out: out}
	if lc.sum != want {
		t.Errorf("summary = %+v; want %+v", lc.sum, want)
	}
}

// benchFile is a batch input file of 1,000 chat requests of about 600
// bytes of text each, and its bodies.
func benchFile() (file []byte, bodies [][]byte) {
	var buf bytes.Buffer
	for i := range 1000 {
		body := `{"model":"gpt-4o-mini","max_tokens":200,"messages":[{"role":"system","content":"You are a careful assistant."},{"role":"user","content":"` +
			strings.Repeat("Summarise the history of the river and its bridges, ", 12) + `"}]}`
		bodies = append(bodies, []byte(body))
		buf.WriteString(`{"custom_id":"req-` + strings.Repeat("x", i%7) + `","method":"POST","url":"/v1/chat/completions","body":` + body + "}\n")
	}
	return buf.Bytes(), bodies
}

// BenchmarkLineCounter counts a batch input file in 32 KiB writes, as an
// upload streams through the gateway.
func BenchmarkLineCounter(b *testing.B) {
	file, _ := benchFile()
	est := fuzzEstimator(b)
	b.SetBytes(int64(len(file)))
	b.ReportAllocs()
	cpu := benchcpu.Start()
	for b.Loop() {
		lc := newLineCounter(est, 1<<20, 50_000, 1<<30, 0)
		for rest := file; len(rest) > 0; {
			n := min(32<<10, len(rest))
			if _, err := lc.Write(rest[:n]); err != nil {
				b.Fatal(err)
			}
			rest = rest[n:]
		}
		if err := lc.Close(); err != nil {
			b.Fatal(err)
		}
	}
	cpu.Report(b)
}

// BenchmarkLineCounterPeer prices the same bodies one by one, as the
// chat route would: the counter's cost beyond it is its envelope parse.
func BenchmarkLineCounterPeer(b *testing.B) {
	file, bodies := benchFile()
	est := fuzzEstimator(b)
	b.SetBytes(int64(len(file)))
	b.ReportAllocs()
	cpu := benchcpu.Start()
	for b.Loop() {
		for _, body := range bodies {
			if _, err := est.EstimateEndpoint(weights.EndpointChatCompletions, body); err != nil {
				b.Fatal(err)
			}
		}
	}
	cpu.Report(b)
}

// objectFieldsRef is objectFields written with encoding/json's decoder,
// the reference of FuzzObjectFields.
func objectFieldsRef(data []byte, names []string) (map[string]string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	got := map[string]string{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		k, _ := t.(string)
		if _, dup := got[k]; dup || !slices.Contains(names, k) {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		got[k] = string(v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return got, true
}

// FuzzObjectFields: objectFields accepts exactly the objects the
// decoder-based reference accepts, with the same values (the reference
// decodes escaped keys, which objectFields refuses, so inputs with a
// backslash are only checked for the values' validity).
func FuzzObjectFields(f *testing.F) {
	for _, s := range []string{
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","x":[1,{"y":"}"}]}}`,
		`{}`, ` { "url" : "x" , "body" : [ ] } `, `{"url":1e5,"method":null,"body":true}`, `{"url":"a","url":"b"}`,
		`{"b\u006fdy":{}}`, `{"body":"\"}"}`, `[]`, `{"url":"x"} {}`, `{"url"}`, `{"other":1}`,
	} {
		f.Add([]byte(s))
	}
	names := []string{"custom_id", "method", "url", "body"}
	f.Fuzz(func(t *testing.T, data []byte) {
		vals := make([]json.RawMessage, len(names))
		fields := make([]objField, len(names))
		for i, n := range names {
			fields[i] = objField{n, &vals[i]}
		}
		err := objectFields(data, fields...)
		got := map[string]string{}
		for i, v := range vals {
			if v != nil {
				if !json.Valid(v) {
					t.Fatalf("objectFields(%q): %s = %q is not a JSON value", data, names[i], v)
				}
				got[names[i]] = string(v)
			}
		}
		if bytes.IndexByte(data, '\\') >= 0 {
			return
		}
		want, ok := objectFieldsRef(data, names)
		if (err == nil) != ok {
			t.Fatalf("objectFields(%q) = %v; the reference accepts it: %v", data, err, ok)
		}
		if ok {
			for k, v := range want {
				if got[k] != v {
					t.Fatalf("objectFields(%q)[%s] = %q; want %q", data, k, got[k], v)
				}
			}
		}
	})
}

// TestLineCustomIDBound: the bound on custom_id is on its value as the
// upstream decodes it, where each byte of invalid UTF-8 becomes U+FFFD
// (three bytes): 200 such bytes are 600 bytes upstream.
func TestLineCustomIDBound(t *testing.T) {
	line := func(id string) []byte {
		return []byte(`{"custom_id":"` + id + `","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"x"}}`)
	}
	for _, tt := range []struct {
		name, id string
		ok       bool
	}{
		{"plain", strings.Repeat("a", maxCustomID), true},
		{"plain, one byte over", strings.Repeat("a", maxCustomID+1), false},
		{"escaped", strings.Repeat(`\u00e9`, maxCustomID/2), true},
		{"escaped, over once decoded", strings.Repeat(`\u20ac`, maxCustomID/3+1), false},
		{"invalid UTF-8, over once decoded", strings.Repeat("\xff", 200), false},
		{"invalid UTF-8", strings.Repeat("\xff", maxCustomID/3), true},
	} {
		lc := newLineCounter(fuzzEstimator(t), 8<<10, 4, 1<<20, 0)
		err := lc.count(line(tt.id))
		if ok := err == nil; ok != tt.ok {
			t.Errorf("%s: count = %v; want accepted %v", tt.name, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "custom_id must be a string of 1 to 512 bytes") {
			t.Errorf("%s: count = %v; want the custom_id bound", tt.name, err)
		}
	}
}
