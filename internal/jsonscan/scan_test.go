package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/benchcpu"
)

// check runs the scanner over data and compares it with encoding/json:
// the scanner accepts exactly the texts json.Valid accepts, and, reading
// a valid text value by value, finds the tokens encoding/json's decoder
// finds, with the same strings, keys and numbers; a number's Int64 is what
// encoding/json decodes into an int64 and its Integral the value of the
// number when it is an integer; Value's compact text is json.Compact's.
func check(t *testing.T, data []byte) {
	t.Helper()
	var sc Scanner
	sc.ResetBytes(data)
	sc.Skip()
	sc.End()
	valid := json.Valid(data)
	if valid != (sc.Err() == nil) {
		t.Fatalf("%q: scanner error %v; json.Valid = %v", data, sc.Err(), valid)
	}
	if !valid {
		var se *SyntaxError
		if !errors.As(sc.Err(), &se) || se.Offset < 0 || se.Offset > len(data) {
			t.Fatalf("%q: error %v; want a *SyntaxError within the text", data, sc.Err())
		}
		return
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	token := func() json.Token {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%q: encoding/json: %v", data, err)
		}
		return tok
	}
	str := func(what, raw string, dirty bool) {
		got := raw
		if dirty {
			var ok bool
			if got, ok = Unquote(raw); !ok {
				t.Fatalf("%q: Unquote(%q) failed", data, raw)
			}
		} else if Unquoted, _ := Unquote(raw); Unquoted != raw {
			t.Fatalf("%q: %s %q is not dirty but decodes to %q", data, what, raw, Unquoted)
		}
		if want := token(); want != got {
			t.Fatalf("%q: %s = %q; encoding/json: %#v", data, what, got, want)
		}
	}
	sc.ResetBytes(data)
	var walk func()
	walk = func() {
		switch c := sc.Peek(); c {
		case '{', '[':
			if tok := token(); tok != json.Delim(c) {
				t.Fatalf("%q: %c; encoding/json: %v", data, c, tok)
			}
			end := byte('}')
			if c == '[' {
				end = ']'
			}
			sc.Open()
			for n := 0; sc.More(&n, end); {
				if c == '{' {
					raw, dirty := sc.Key()
					str("key", raw, dirty)
				}
				walk()
			}
			if tok := token(); tok != json.Delim(end) {
				t.Fatalf("%q: %c; encoding/json: %v", data, end, tok)
			}
		case '"':
			raw, dirty := sc.Str()
			str("string", raw, dirty)
		case 't', 'f', 'n':
			sc.Literal()
			want := map[byte]json.Token{'t': true, 'f': false, 'n': nil}[c]
			if tok := token(); tok != want {
				t.Fatalf("%q: literal %c; encoding/json: %v", data, c, tok)
			}
		default:
			lit := sc.Number()
			if tok := token(); tok != json.Number(lit) {
				t.Fatalf("%q: number %s; encoding/json: %v", data, lit, tok)
			}
			checkNumber(t, lit)
		}
	}
	walk()
	if sc.End(); sc.Err() != nil {
		t.Fatalf("%q: second reading: %v", data, sc.Err())
	}
	sc.ResetBytes(data)
	var want bytes.Buffer
	if err := json.Compact(&want, data); err != nil {
		t.Fatal(err)
	}
	if got := AppendCompact(nil, sc.Value()); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("%q: AppendCompact = %q; json.Compact: %q", data, got, want.Bytes())
	}
}

// checkNumber compares Int64 with encoding/json's decoding into an int64,
// and Integral with the exact value of the number.
func checkNumber(t *testing.T, lit string) {
	t.Helper()
	var want int64
	wantErr := json.Unmarshal([]byte(lit), &want)
	if got, ok := Int64(lit); ok != (wantErr == nil) || got != want {
		t.Fatalf("Int64(%s) = %d, %v; encoding/json: %d, %v", lit, got, ok, want, wantErr)
	}
	got, ok := Integral(lit)
	mant, exp, _ := strings.Cut(strings.ToLower(lit), "e")
	if e, err := strconv.Atoi(exp); exp != "" && (err != nil || e > 400 || e < -400) {
		// Too large an exponent for big.Rat: its sign decides.
		zero := strings.Trim(mant, "-0.") == ""
		switch {
		case zero:
			if got != 0 || !ok {
				t.Fatalf("Integral(%s) = %d, %v; want 0, true", lit, got, ok)
			}
		case strings.HasPrefix(exp, "-"):
			if ok {
				t.Fatalf("Integral(%s) = %d, %v; want a fraction", lit, got, ok)
			}
		case got != math.MaxInt64 && got != -math.MaxInt64 || !ok:
			t.Fatalf("Integral(%s) = %d, %v; want saturated", lit, got, ok)
		}
		return
	}
	r, _ := new(big.Rat).SetString(lit)
	if !r.IsInt() {
		if ok {
			t.Fatalf("Integral(%s) = %d, true; want a fraction", lit, got)
		}
		return
	}
	n := r.Num()
	if n.Cmp(big.NewInt(math.MaxInt64)) > 0 {
		n = big.NewInt(math.MaxInt64)
	} else if n.Cmp(big.NewInt(-math.MaxInt64)) < 0 {
		n = big.NewInt(-math.MaxInt64)
	}
	if !ok || got != n.Int64() {
		t.Fatalf("Integral(%s) = %d, %v; want %d, true", lit, got, ok, n.Int64())
	}
}

// seeds are texts of the three readers (request bodies, request-log
// records, batch lines) and of the cases that decide a JSON reader.
func seeds(t testing.TB) [][]byte {
	var out [][]byte
	for _, s := range []string{
		`{}`, `[]`, `""`, `0`, `-0`, `1e400`, `-`, `01`, `1.`, `+1`, `.5`, `1e`, `1e+`, `NaN`, `tru`, `nul`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{'a':1}`,
		`{"a":[1,2.5e3,-0,"x\u00e9\n",true,false,null,{}]}`, `[`, `{"a":1,"a":2}`, "\"\xff\"", `{"a" :  1 } `, `"\ud800"`, `"\ud83d\ude00"`, `"\ud83d\u0041"`,
		`"\x"`, `"\u12"`, "\"a\x01b\"", `"a\/b"`, `{} x`, `{}{}`, " \t\r\n[ ] ", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"",
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"n":2}`,
		`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		`{"messages":[{"role":"user","ro\u006ce":"x"}]}`,
		`{"max_tokens":3.000e3,"n":0.1e2,"best_of":30000e-1,"x":9223372036854775808,"y":-9223372036854775809,"z":123456789012345678901234567890.0}`,
		`{"time":"t","tenant":"a","key_id":"k","user":"u","ip":"::1","operation":"op","model":"m","priority":-1,"tokens":1,"cost":2,"units":{"x":3},"actual":{"tokens":1,"cost":0,"units":{"x":1}},"duration":"1ms","sample":10}`,
		`{"sample":9223372036854775807}`, `{"tokens":-9223372036854775808}`, `{"begin_only":true}`, ` { "tenant" : "é" } `, `{"tenant":"a\u0041"}`,
		`{"custom_id":"r1","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"Hi"}]}}`,
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","x":[1,{"y":"}"}]}}`, `{"b\u006fdy":{}}`, `{"body":"\"}"}`,
		strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	} {
		out = append(out, []byte(s))
	}
	// The callers' test data: the request logs of the shadow tests.
	files, _ := filepath.Glob("../../shadow/testdata/*")
	more, _ := filepath.Glob("../../shadow/*/testdata/*")
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(b) {
			if bytes.HasPrefix(bytes.TrimSpace(line), []byte("{")) && len(out) < 200 {
				out = append(out, bytes.TrimSpace(line))
			}
		}
	}
	return out
}

// FuzzScan checks the scanner against encoding/json on arbitrary input
// (see check). Run it for a number of executions, not a duration:
//
//	go test -run '^$' -fuzz '^FuzzScan$' -fuzztime 200000x ./internal/jsonscan
func FuzzScan(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(check)
}

// TestScanMutations runs check on a fixed number of mutations of the
// seeds (bytes replaced, inserted, deleted, spans repeated), so that every
// test run covers more than the seed corpus, deterministically.
func TestScanMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 5))
	const alphabet = "{}[]:,\"\\/ \t\n0123456789-+.eEtrufalsn\x00\x1f\x7f\xc3\xa9\xff\xed"
	in := seeds(t)
	for range 5000 {
		b := bytes.Clone(in[rng.IntN(len(in))])
		for range 1 + rng.IntN(4) {
			at := 0
			if len(b) > 0 {
				at = rng.IntN(len(b))
			}
			c := alphabet[rng.IntN(len(alphabet))]
			switch rng.IntN(4) {
			case 0:
				if len(b) > 0 {
					b[at] = c
				}
			case 1:
				b = append(b[:at], append([]byte{c}, b[at:]...)...)
			case 2:
				if len(b) > 0 {
					b = append(b[:at], b[at+1:]...)
				}
			default:
				end := min(len(b), at+rng.IntN(8))
				b = append(b[:end], append(bytes.Clone(b[at:end]), b[end:]...)...)
			}
		}
		check(t, b)
	}
}

func TestSyntaxErrors(t *testing.T) {
	for _, tt := range []struct{ text, err string }{
		{`{"a":1,}`, `invalid JSON at byte 7: invalid character '}' looking for beginning of object key string`},
		{`[1,]`, `invalid JSON at byte 3: invalid character ']' looking for beginning of value`},
		{`[1 2]`, `invalid JSON at byte 3: invalid character '2' after array element`},
		{`{"a" 1}`, `invalid JSON at byte 5: invalid character '1' after object key`},
		{`{"a":1 "b":2}`, `invalid JSON at byte 7: invalid character '"' after object member`},
		{`{} x`, `invalid JSON at byte 3: invalid character 'x' after top-level value`},
		{`01`, `invalid JSON at byte 1: invalid character '1' after top-level value`},
		{`1.`, `invalid JSON at byte 2: unexpected end of JSON input`},
		{`-x`, `invalid JSON at byte 1: invalid character 'x' in number`},
		{`1ex`, `invalid JSON at byte 2: invalid character 'x' in exponent of number`},
		{`1.x`, `invalid JSON at byte 2: invalid character 'x' after decimal point in number`},
		{`"a`, `invalid JSON at byte 2: unexpected end of JSON input`},
		{`"\x"`, `invalid JSON at byte 1: invalid escape "\\x" in string`},
		{`"\u12"`, `invalid JSON at byte 1: invalid \u escape in string`},
		{"\"a\x01\"", `invalid JSON at byte 2: invalid character '\x01' in string`},
		{`tru`, `invalid JSON at byte 0: invalid character 't' looking for beginning of value`},
		{``, `invalid JSON at byte 0: unexpected end of JSON input`},
		{strings.Repeat("[", MaxDepth+1), fmt.Sprintf(`invalid JSON at byte %d: exceeded max depth`, MaxDepth+1)},
	} {
		var sc Scanner
		sc.Reset(tt.text)
		sc.Skip()
		sc.End()
		if err := sc.Err(); err == nil || err.Error() != tt.err {
			t.Errorf("scan(%.40q) error = %v; want %s", tt.text, err, tt.err)
		}
	}
}

func TestIntegral(t *testing.T) {
	tests := []struct {
		lit string
		v   int64
		ok  bool
	}{
		{"0", 0, true}, {"-0", 0, true}, {"7", 7, true}, {"-7", -7, true}, {"0.0", 0, true}, {"0e-5", 0, true},
		{"10", 10, true}, {"1e1", 10, true}, {"10.0", 10, true}, {"0.1e2", 10, true}, {"100e-1", 10, true}, {"1E+1", 10, true},
		{"9223372036854775807", math.MaxInt64, true}, {"9223372036854775808", math.MaxInt64, true},
		{"-9223372036854775807", -math.MaxInt64, true}, {"9.3e18", math.MaxInt64, true}, {"9.2e18", 9200000000000000000, true},
		{"1e400", math.MaxInt64, true}, {"1e1000000000000", math.MaxInt64, true}, {"-1e400", -math.MaxInt64, true},
		{"1.5", 0, false}, {"1e-1", 0, false}, {"1e-400", 0, false}, {"1e-1000000000000", 0, false}, {"12.34e1", 0, false},
		{"123.4e1", 1234, true}, {"0.00000000000000000000000001e26", 1, true},
	}
	for _, tt := range tests {
		if v, ok := Integral(tt.lit); v != tt.v || ok != tt.ok {
			t.Errorf("Integral(%s) = %d, %v; want %d, %v", tt.lit, v, ok, tt.v, tt.ok)
		}
		checkNumber(t, tt.lit)
	}
}

func TestInt64(t *testing.T) {
	tests := []struct {
		lit string
		v   int64
		ok  bool
	}{
		{"0", 0, true}, {"-0", 0, true}, {"42", 42, true}, {"-42", -42, true},
		{"9223372036854775807", math.MaxInt64, true}, {"-9223372036854775808", math.MinInt64, true},
		{"9223372036854775808", 0, false}, {"-9223372036854775809", 0, false}, {"18446744073709551616", 0, false},
		{"99999999999999999999", 0, false}, {"1.0", 0, false}, {"1e1", 0, false}, {"01", 0, false}, {"-", 0, false}, {"", 0, false},
	}
	for _, tt := range tests {
		if v, ok := Int64(tt.lit); v != tt.v || ok != tt.ok {
			t.Errorf("Int64(%q) = %d, %v; want %d, %v", tt.lit, v, ok, tt.v, tt.ok)
		}
	}
}

// TestUnquoteChunk: decoding a string a piece at a time gives what
// decoding it whole gives, each piece ending at a character.
func TestUnquoteChunk(t *testing.T) {
	in := `a\u00e9b\ud83d\ude00c` + "\xff" + `d\n` + strings.Repeat("é", 10)
	whole, ok := Unquote(in)
	if !ok {
		t.Fatalf("Unquote(%q) failed", in)
	}
	for limit := 1; limit < 8; limit++ {
		var got []byte
		for rest := in; len(rest) > 0; {
			var n int
			got, n, ok = UnquoteChunk(got, rest, len(got)+limit)
			if !ok || n == 0 {
				t.Fatalf("UnquoteChunk(limit %d) = %d, %v", limit, n, ok)
			}
			rest = rest[n:]
		}
		if string(got) != whole {
			t.Errorf("in pieces of %d: %q; whole: %q", limit, got, whole)
		}
	}
}

// TestScanAllocatesNothing: reading a text, its strings and its numbers
// allocates nothing.
func TestScanAllocatesNothing(t *testing.T) {
	data := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"héllo"}],"n":2,"x":[true,null,-1.5e3]}`)
	var sc Scanner
	allocs := testing.AllocsPerRun(100, func() {
		sc.ResetBytes(data)
		sc.Skip()
		sc.End()
	})
	if allocs != 0 || sc.Err() != nil {
		t.Errorf("scanning allocated %v times (error %v); want 0", allocs, sc.Err())
	}
}

// BenchmarkScan checks a chat request body of about 16 KB, against its
// peer json.Valid.
func BenchmarkScan(b *testing.B) {
	body := []byte(`{"model":"gpt-4o","max_tokens":1000,"messages":[` + strings.Repeat(`{"role":"user","content":"Summarise the history of the river and its bridges, caf\u00e9 and all."},`, 200) + `{"role":"user","content":"end"}]}`)
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		cpu := benchcpu.Start()
		var sc Scanner
		for b.Loop() {
			sc.ResetBytes(body)
			sc.Skip()
			if sc.End(); sc.Err() != nil {
				b.Fatal(sc.Err())
			}
		}
		cpu.Report(b)
	})
	b.Run("peer=json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		cpu := benchcpu.Start()
		for b.Loop() {
			if !json.Valid(body) {
				b.Fatal("invalid")
			}
		}
		cpu.Report(b)
	})
}
