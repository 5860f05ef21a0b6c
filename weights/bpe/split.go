package bpe

import "unicode/utf8"

// The pre-tokenizers below are hand-written equivalents of the split patterns
// of the two encodings, evaluated with the leftmost-first, backtracking
// semantics of the reference engine. Each returns the end of the piece that
// starts at b[p] (p < len(b)); every position starts a piece, so repeated
// calls tile the text.

// splitCl100k matches, in order of preference,
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)
//	[^\r\n\p{L}\p{N}]?\p{L}+
//	\p{N}{1,3}
//	 ?[^\s\p{L}\p{N}]+[\r\n]*
//	\s*[\r\n]+
//	\s+(?!\S)
//	\s+
func splitCl100k(b []byte, p int) int {
	n := len(b)
	if b[p] == '\'' {
		if e := contraction(b, p); e > 0 {
			return e
		}
	}
	f0, w0 := runeAt(b, p)
	q := p + w0
	if f0&fL != 0 {
		return letters(b, q)
	}
	if f0&fN != 0 {
		return numbers(b, q)
	}
	var f1 uint8
	var w1 int
	if q < n {
		f1, w1 = runeAt(b, q)
	}
	// f0 is neither a letter nor a number here, so it is a valid prefix
	// unless it is a line break.
	if f0&fNL == 0 && f1&fL != 0 {
		return letters(b, q+w1)
	}
	if f0&fS == 0 {
		return punct(b, q, false)
	}
	if b[p] == ' ' && q < n && f1&(fL|fN|fS) == 0 {
		return punct(b, q+w1, false)
	}
	return spaces(b, p)
}

// splitO200k matches, in order of preference,
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	\p{N}{1,3}
//	 ?[^\s\p{L}\p{N}]+[\r\n/]*
//	\s*[\r\n]+
//	\s+(?!\S)
//	\s+
func splitO200k(b []byte, p int) int {
	n := len(b)
	f0, w0 := runeAt(b, p)
	q := p + w0
	prefix := f0&(fL|fN|fNL) == 0 && q < n
	if prefix {
		if e := upperLower(b, q); e >= 0 {
			return suffix(b, e)
		}
	}
	if f0&(fU|fW) != 0 {
		if e := upperLower(b, p); e >= 0 {
			return suffix(b, e)
		}
	}
	var f1 uint8
	var w1 int
	if q < n {
		f1, w1 = runeAt(b, q)
	}
	if prefix && f1&fU != 0 {
		return suffix(b, upperThenLower(b, q))
	}
	if f0&fU != 0 {
		return suffix(b, upperThenLower(b, p))
	}
	if f0&fN != 0 {
		return numbers(b, q)
	}
	if f0&fS == 0 {
		return punct(b, q, true)
	}
	if b[p] == ' ' && q < n && f1&(fL|fN|fS) == 0 {
		return punct(b, q+w1, true)
	}
	return spaces(b, p)
}

// upperLower matches [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+
// at b[p] and returns its end, or -1. When the greedy first run leaves no
// lower-class rune after it, the engine backtracks to the last rune of that
// run that is also in the lower class (Lm, Lo, M), which then forms the
// one-rune second run.
func upperLower(b []byte, p int) int {
	n := len(b)
	last := -1
	for p < n {
		f, w := asciiClass[b[p]], 1 // runeAt, with its ASCII case inlined
		if b[p] >= utf8.RuneSelf {
			f, w = runeAtSlow(b, p)
		}
		if f&fU == 0 {
			if f&fW == 0 {
				break
			}
			return lowerRun(b, p+w)
		}
		p += w
		if f&fW != 0 {
			last = p
		}
	}
	return last
}

// upperThenLower matches [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*
// at b[p], whose first rune is known to be in the upper class.
func upperThenLower(b []byte, p int) int {
	n := len(b)
	for p < n {
		f, w := asciiClass[b[p]], 1 // runeAt, with its ASCII case inlined
		if b[p] >= utf8.RuneSelf {
			f, w = runeAtSlow(b, p)
		}
		if f&fU == 0 {
			break
		}
		p += w
	}
	return lowerRun(b, p)
}

// lowerRun extends a run of [\p{Ll}\p{Lm}\p{Lo}\p{M}] from b[p].
func lowerRun(b []byte, p int) int {
	n := len(b)
	for p < n {
		f, w := asciiClass[b[p]], 1 // runeAt, with its ASCII case inlined
		if b[p] >= utf8.RuneSelf {
			f, w = runeAtSlow(b, p)
		}
		if f&fW == 0 {
			break
		}
		p += w
	}
	return p
}

// suffix matches the optional (?i:'s|'t|'re|'ve|'m|'ll|'d)? at b[p].
func suffix(b []byte, p int) int {
	if p < len(b) && b[p] == '\'' {
		if e := contraction(b, p); e > 0 {
			return e
		}
	}
	return p
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at b[p] == '\” and returns
// its end, or 0. Only ASCII letters fold to these letters under
// unicode.ToLower, which is how the reference engine compares case-insensitively.
func contraction(b []byte, p int) int {
	n := len(b)
	if p+1 >= n {
		return 0
	}
	switch b[p+1] | 0x20 {
	case 's', 't', 'm', 'd':
		return p + 2
	case 'r', 'v':
		if p+2 < n && b[p+2]|0x20 == 'e' {
			return p + 3
		}
	case 'l':
		if p+2 < n && b[p+2]|0x20 == 'l' {
			return p + 3
		}
	}
	return 0
}

// letters extends a run of \p{L} from b[p].
func letters(b []byte, p int) int {
	n := len(b)
	for p < n {
		c := b[p]
		if c < 0x80 {
			if asciiLetter[c] {
				p++
				continue
			}
			break
		}
		f, w := asciiClass[b[p]], 1 // runeAt, with its ASCII case inlined
		if b[p] >= utf8.RuneSelf {
			f, w = runeAtSlow(b, p)
		}
		if f&fL == 0 {
			break
		}
		p += w
	}
	return p
}

// asciiLetter reports which ASCII bytes are letters.
var asciiLetter = func() (t [128]bool) {
	for c := range t {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
	}
	return t
}()

// numbers completes \p{N}{1,3} after the first number at b[p-w].
func numbers(b []byte, p int) int {
	for i := 0; i < 2 && p < len(b); i++ {
		f, w := asciiClass[b[p]], 1 // runeAt, with its ASCII case inlined
		if b[p] >= utf8.RuneSelf {
			f, w = runeAtSlow(b, p)
		}
		if f&fN == 0 {
			break
		}
		p += w
	}
	return p
}

// punct completes [^\s\p{L}\p{N}]+ from b[p], its first rune already taken,
// then takes [\r\n]* (or [\r\n/]* when slash is set).
func punct(b []byte, p int, slash bool) int {
	n := len(b)
	for p < n {
		f, w := asciiClass[b[p]], 1 // runeAt, with its ASCII case inlined
		if b[p] >= utf8.RuneSelf {
			f, w = runeAtSlow(b, p)
		}
		if f&(fL|fN|fS) != 0 {
			break
		}
		p += w
	}
	for p < n && (b[p] == '\r' || b[p] == '\n' || slash && b[p] == '/') {
		p++
	}
	return p
}

// spaces matches \s*[\r\n]+ | \s+(?!\S) | \s+ at b[p], which is whitespace.
// The first takes the whitespace run up to and including its last line break;
// the second, without a line break, leaves the run's last rune to start the
// next piece unless the run ends the text; the third takes a lone rune.
func spaces(b []byte, p int) int {
	n := len(b)
	lastNL, lastStart, k := -1, p, 0
	for p < n {
		f, w := asciiClass[b[p]], 1 // runeAt, with its ASCII case inlined
		if b[p] >= utf8.RuneSelf {
			f, w = runeAtSlow(b, p)
		}
		if f&fS == 0 {
			break
		}
		if f&fNL != 0 {
			lastNL = p + w
		}
		lastStart = p
		p += w
		k++
	}
	switch {
	case lastNL >= 0:
		return lastNL
	case p == n || k == 1:
		return p
	default:
		return lastStart
	}
}
