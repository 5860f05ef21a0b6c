package bpe

import (
	"unicode"
	"unicode/utf8"
)

// Character-class flags used by the pre-tokenizers. A rune's flags mirror the
// classes of the encodings' split patterns as the reference regular-expression
// engine (github.com/dlclark/regexp2) evaluates them: \s is unicode.IsSpace and
// \p{X} is unicode.Is(unicode.X, r).
const (
	fL  = 1 << iota // \p{L}
	fN              // \p{N}
	fS              // \s
	fNL             // \r or \n
	fU              // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (o200k_base)
	fW              // [\p{Ll}\p{Lm}\p{Lo}\p{M}] (o200k_base)
)

// bmpClass holds the flags of every rune in the Basic Multilingual Plane; it
// is filled from the unicode range tables at package initialisation, which
// takes well under a millisecond.
var bmpClass = buildBMPClass()

func buildBMPClass() *[0x10000]uint8 {
	var t [0x10000]uint8
	set := func(rt *unicode.RangeTable, f uint8) {
		for _, r := range rt.R16 {
			for c := uint32(r.Lo); c <= uint32(r.Hi); c += uint32(r.Stride) {
				t[c] |= f
			}
		}
		for _, r := range rt.R32 {
			for c := r.Lo; c <= r.Hi && c < 0x10000; c += r.Stride {
				t[c] |= f
			}
		}
	}
	set(unicode.Lu, fL|fU)
	set(unicode.Lt, fL|fU)
	set(unicode.Ll, fL|fW)
	set(unicode.Lm, fL|fU|fW)
	set(unicode.Lo, fL|fU|fW)
	set(unicode.M, fU|fW)
	set(unicode.N, fN)
	set(unicode.White_Space, fS)
	t['\r'] |= fNL
	t['\n'] |= fNL
	return &t
}

// classOf returns the flags of r.
func classOf(r rune) uint8 {
	if uint32(r) < 0x10000 {
		return bmpClass[r]
	}
	return classSlow(r)
}

// classSlow computes the flags of r from the unicode tables directly.
func classSlow(r rune) uint8 {
	var f uint8
	switch {
	case unicode.Is(unicode.Lu, r), unicode.Is(unicode.Lt, r):
		f = fL | fU
	case unicode.Is(unicode.Ll, r):
		f = fL | fW
	case unicode.Is(unicode.Lm, r), unicode.Is(unicode.Lo, r):
		f = fL | fU | fW
	case unicode.Is(unicode.M, r):
		f = fU | fW
	case unicode.Is(unicode.N, r):
		f = fN
	case unicode.IsSpace(r):
		f = fS
	}
	if r == '\r' || r == '\n' {
		f |= fNL
	}
	return f
}

// runeAt returns the flags and the width in bytes of the rune starting at
// b[p], which must exist. An invalid or truncated encoding counts as one byte
// holding U+FFFD, as converting the text to []rune does.
func runeAt(b []byte, p int) (uint8, int) {
	if c := b[p]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	return runeAtSlow(b, p)
}

// runeAtSlow is runeAt for a rune that is not ASCII.
func runeAtSlow(b []byte, p int) (uint8, int) {
	r, w := utf8.DecodeRune(b[p:])
	return classOf(r), w
}

// asciiClass holds the flags of the ASCII runes (the rest is unused), small
// enough to stay in cache and indexed by a byte without a bounds check.
var asciiClass = func() (t [256]uint8) {
	copy(t[:utf8.RuneSelf], bmpClass[:utf8.RuneSelf])
	return t
}()
