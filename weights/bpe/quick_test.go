package bpe

import (
	"slices"
	"testing"
)

func TestQuick(t *testing.T) {
	for _, e := range encodings(t) {
		ref := reference(t, e.Name())
		for _, s := range []string{"Hello, world! I'm here.", "  foo\n\n  bar   ", "HELLOあworld", "12345678 ab'S", "日本語のテキスト", "\xff\xfeab\xed\xa0\x80", "<|endoftext|> x"} {
			want := ref.Encode(s, nil, nil)
			got := e.Encode(nil, []byte(s))
			if !slices.Equal(got, want) {
				t.Errorf("%s %q: got %v want %v", e.Name(), s, got, want)
			}
		}
	}
}
