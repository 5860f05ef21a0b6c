package bpe

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// check compares e with tiktoken-go on text: the tokens of Encode must equal
// those of tiktoken-go's Encode(text, nil, nil) and EncodeOrdinary, and Count
// and CountString must equal their number.
func check(t *testing.T, e *Encoding, text string) bool {
	t.Helper()
	ref := reference(t, e.Name())
	want := ref.Encode(text, nil, nil)
	if ord := ref.EncodeOrdinary(text); !slices.Equal(ord, want) {
		t.Fatalf("reference disagrees with itself on %q: Encode = %v, EncodeOrdinary = %v", text, want, ord)
	}
	return compare(t, e, text, want)
}

// compare checks e's split of text against the pattern and its tokens and
// counts against want, the reference's tokens.
func compare(t *testing.T, e *Encoding, text string, want []int) bool {
	t.Helper()
	// The split itself must match the pattern, which is stricter than
	// comparing tokens: different splits often merge to the same tokens.
	valid := string([]rune(text))
	if got, want := pieces(e, valid), refPieces(e.Name(), valid); !slices.Equal(got, want) {
		t.Errorf("%s split of %q\n got %q\nwant %q", e.Name(), valid, got, want)
		return false
	}
	got := e.Encode(nil, []byte(text))
	if !slices.Equal(got, want) {
		t.Errorf("%s.Encode(%q)\n got %v\nwant %v", e.Name(), text, got, want)
		return false
	}
	if n := e.Count([]byte(text)); n != len(want) {
		t.Errorf("%s.Count(%q) = %d; want %d", e.Name(), text, n, len(want))
		return false
	}
	if n := e.CountString(text); n != len(want) {
		t.Errorf("%s.CountString(%q) = %d; want %d", e.Name(), text, n, len(want))
		return false
	}
	return true
}

// corpus returns the texts under testdata/corpus, and the chat texts the
// estimator's tests are built from (../testdata/*.txt).
func corpus(t testing.TB) map[string]string {
	t.Helper()
	files, err := filepath.Glob("testdata/corpus/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	chats, _ := filepath.Glob("../testdata/*.txt")
	files = append(files, chats...)
	m := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m[filepath.Base(filepath.Dir(f))+"/"+filepath.Base(f)] = string(b)
	}
	return m
}

func TestCorpusMatchesTiktoken(t *testing.T) {
	texts := corpus(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, e := range encodings(t) {
		for name, text := range texts {
			t.Run(e.Name()+"/"+name, func(t *testing.T) {
				check(t, e, text)
				for _, line := range strings.SplitAfter(text, "\n") {
					check(t, e, line)
				}
				// Arbitrary byte ranges: these cut runes in half, leaving
				// invalid UTF-8 at either end.
				for range 40 {
					i := rng.IntN(len(text))
					j := i + rng.IntN(min(len(text)-i, 200)+1)
					check(t, e, text[i:j])
				}
			})
		}
	}
}

// TestExhaustiveShort compares every string of up to four symbols over
// alphabets chosen to exercise the pattern's branches: whitespace, line
// breaks, the slash of o200k_base, contractions and every letter class.
func TestExhaustiveShort(t *testing.T) {
	alphabets := map[string][]string{
		"space": {" ", "\t", "\n", "\r", "\u3000", "a", ".", "1", "/"},
		"case":  {"a", "A", "ǅ", "ʰ", "あ", "\u0301", "'", "s", "L", " "},
		"punct": {"'", "r", "E", "l", "!", "\n", " ", "7", "\xff"},
	}
	for _, e := range encodings(t) {
		for name, alpha := range alphabets {
			t.Run(e.Name()+"/"+name, func(t *testing.T) {
				t.Parallel()
				ref := reference(t, e.Name())
				fails := 0
				var rec func(prefix string, depth int)
				rec = func(prefix string, depth int) {
					if fails > 10 {
						return
					}
					if prefix != "" && !compare(t, e, prefix, ref.EncodeOrdinary(prefix)) {
						fails++
					}
					if depth == 0 {
						return
					}
					for _, s := range alpha {
						rec(prefix+s, depth-1)
					}
				}
				rec("", 4)
			})
		}
	}
}

func TestGeneratedMatchesTiktoken(t *testing.T) {
	var cases []string
	// Whitespace runs of many lengths and mixes, alone and between words.
	for _, unit := range []string{" ", "\t", "\n", "\r\n", " \t", "\n ", " \n\t", "\u00a0", "\u3000 "} {
		for _, n := range []int{1, 2, 3, 7, 16, 31, 64, 200} {
			ws := strings.Repeat(unit, n)
			cases = append(cases, ws, "x"+ws, ws+"x", "x"+ws+"y", "x"+ws+"!", ws+"1", "."+ws+"'s")
		}
	}
	// Special tokens are plain text.
	for _, s := range []string{"<|endoftext|>", "<|endofprompt|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"} {
		cases = append(cases, s, "a "+s+" b", s+s, "<|"+s[2:], "Sluice counts tokens exactly, even "+s+".")
	}
	// Long pieces that take the heap merge.
	cases = append(cases,
		strings.Repeat("a", 1000),
		strings.Repeat("ab", 300),
		strings.Repeat("!@#", 100),
		strings.Repeat("😀", 50),
		strings.Repeat("日本", 200),
		strings.Repeat("0123456789", 30),
		strings.Repeat("ǅ", 70)+"abc'LL",
		"base64:"+strings.Repeat("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=", 8),
	)
	// Random bytes and random runes from a mixed alphabet.
	rng := rand.New(rand.NewPCG(3, 4))
	runes := []rune("aZé\u0301ǅʰあ日한ñ' \t\r\n\u00a0\u2028\u3000.,!?/-_'\"1٣²½😀\u200d🏻\ufffd<|>")
	for range 600 {
		b := make([]byte, rng.IntN(48))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		cases = append(cases, string(b))
		var sb strings.Builder
		for range rng.IntN(40) {
			sb.WriteRune(runes[rng.IntN(len(runes))])
		}
		cases = append(cases, sb.String())
	}
	for _, e := range encodings(t) {
		t.Run(e.Name(), func(t *testing.T) {
			fails := 0
			for _, c := range cases {
				if !check(t, e, c) {
					if fails++; fails > 10 {
						t.Fatal("too many failures")
					}
				}
			}
		})
	}
}

// TestMergeStrategiesAgree checks that the heap merge used for long pieces
// gives the same tokens as the linear merge on pieces of every length.
func TestMergeStrategiesAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	alpha := []byte("aaabbcdeefghst  ll..!!\xe3\x81\x82\xff")
	for _, e := range encodings(t) {
		var s scratch
		for n := 2; n < 300; n++ {
			piece := make([]byte, n)
			for i := range piece {
				piece[i] = alpha[rng.IntN(len(alpha))]
			}
			var lin, hp []int
			nl := e.t.mergeLinear(piece, &s, &lin)
			nh := e.t.mergeHeap(piece, &s, &hp)
			if !slices.Equal(lin, hp) || nl != len(lin) || nh != len(hp) {
				t.Errorf("%s: merge(%q): linear %v (%d), heap %v (%d)", e.Name(), piece, lin, nl, hp, nh)
			}
		}
	}
}

func TestEncodeAppends(t *testing.T) {
	e := O200k()
	dst := []int{-1}
	got := e.Encode(dst, []byte("hello world"))
	if got[0] != -1 || len(got) != 3 {
		t.Errorf("Encode([-1], %q) = %v; want -1 followed by 2 tokens", "hello world", got)
	}
	if got := e.Count(nil); got != 0 {
		t.Errorf("Count(nil) = %d; want 0", got)
	}
	if got := string(e.Decode(nil, got[1:])); got != "hello world" {
		t.Errorf("Decode(Encode(%q)) = %q", "hello world", got)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, e := range encodings(t) {
		for name, text := range corpus(t) {
			if !utf8.ValidString(text) {
				continue
			}
			if got := string(e.Decode(nil, e.Encode(nil, []byte(text)))); got != text {
				t.Errorf("%s: Decode(Encode(%s)) differs from the input", e.Name(), name)
			}
		}
	}
}

func TestGet(t *testing.T) {
	if e, err := Get("o200k_base"); err != nil || e != O200k() {
		t.Errorf(`Get("o200k_base") = %p, %v; want O200k()`, e, err)
	}
	if e, err := Get("cl100k_base"); err != nil || e != Cl100k() {
		t.Errorf(`Get("cl100k_base") = %p, %v; want Cl100k()`, e, err)
	}
	if e, err := Get("p50k_base"); err == nil {
		t.Errorf(`Get("p50k_base") = %v, nil; want an error`, e)
	}
}
