package bpe

import (
	"testing"
	"unicode"
)

// TestClassOf compares the class table with the unicode tables, evaluated
// the way the reference engine evaluates \s and \p{...}, for every rune.
func TestClassOf(t *testing.T) {
	bad := 0
	for r := rune(0); r <= unicode.MaxRune && bad < 10; r++ {
		var want uint8
		if unicode.Is(unicode.L, r) {
			want |= fL
		}
		if unicode.Is(unicode.N, r) {
			want |= fN
		}
		if unicode.IsSpace(r) {
			want |= fS
		}
		if r == '\r' || r == '\n' {
			want |= fNL
		}
		if unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M) {
			want |= fU
		}
		if unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M) {
			want |= fW
		}
		if got := classOf(r); got != want {
			t.Errorf("classOf(%U) = %06b; want %06b", r, got, want)
			bad++
		}
		if r >= 0x10000 {
			continue
		}
		if got := classSlow(r); got != want {
			t.Errorf("classSlow(%U) = %06b; want %06b", r, got, want)
			bad++
		}
	}
}

// TestContractionFolding backs contraction's ASCII-only case folding: the
// reference engine compares unicode.ToLower of the input with the pattern,
// and no non-ASCII rune lowers to an apostrophe or a contraction letter.
func TestContractionFolding(t *testing.T) {
	for r := rune(0x80); r <= unicode.MaxRune; r++ {
		switch l := unicode.ToLower(r); l {
		case '\'', 's', 't', 'r', 'e', 'v', 'm', 'l', 'd':
			t.Errorf("unicode.ToLower(%U) = %q", r, l)
		}
	}
	for c := rune(0); c < 0x80; c++ {
		for _, x := range "'strevmld" {
			folds := unicode.ToLower(c) == x
			if got := byte(c)|0x20 == byte(x); x != '\'' && got != folds {
				t.Errorf("byte %q|0x20 == %q is %v; unicode.ToLower says %v", c, x, got, folds)
			}
		}
	}
}
