package bpe

import (
	"strings"
	"sync"
	"testing"

	"github.com/dlclark/regexp2"
	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

var refOnce = sync.OnceValue(func() map[string]*tiktoken.Tiktoken {
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	m := map[string]*tiktoken.Tiktoken{}
	for _, name := range []string{O200kBase, Cl100kBase} {
		tk, err := tiktoken.GetEncoding(name)
		if err != nil {
			panic(err)
		}
		m[name] = tk
	}
	return m
})

// reference returns tiktoken-go's encoder for the named encoding.
func reference(t testing.TB, name string) *tiktoken.Tiktoken {
	t.Helper()
	return refOnce()[name]
}

// encodings lists the encodings under test.
func encodings(t testing.TB) []*Encoding {
	t.Helper()
	var es []*Encoding
	for _, name := range []string{O200kBase, Cl100kBase} {
		e, err := Get(name)
		if err != nil {
			t.Fatalf("Get(%q): %v", name, err)
		}
		es = append(es, e)
	}
	return es
}

// Split patterns of the encodings, verbatim from tiktoken-go v0.1.8.
var refPatterns = map[string]*regexp2.Regexp{
	O200kBase: regexp2.MustCompile(strings.Join([]string{
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`\p{N}{1,3}`,
		` ?[^\s\p{L}\p{N}]+[\r\n/]*`,
		`\s*[\r\n]+`,
		`\s+(?!\S)`,
		`\s+`,
	}, "|"), regexp2.None),
	Cl100kBase: regexp2.MustCompile(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, regexp2.None),
}

// refPieces splits text as tiktoken-go does: the pattern runs over the text
// converted to runes.
func refPieces(name, text string) []string {
	runes := []rune(text)
	var out []string
	m, _ := refPatterns[name].FindRunesMatch(runes)
	for m != nil {
		out = append(out, string(runes[m.Index:m.Index+m.Length]))
		m, _ = refPatterns[name].FindNextMatch(m)
	}
	return out
}

// pieces splits text with e's pre-tokenizer.
func pieces(e *Encoding, text string) []string {
	b := []byte(text)
	var out []string
	for p := 0; p < len(b); {
		end := e.split(b, p)
		out = append(out, string(b[p:end]))
		p = end
	}
	return out
}
