package weights

import (
	"math"
	"math/bits"
	"unicode/utf8"
)

// sampleWindows is the number of windows a sampled estimate tokenises,
// spread evenly over the text so that a system prompt, a pasted document and
// a question in another language all weigh in.
const sampleWindows = 8

// sampler estimates the tokens of a text given piece by piece, whose total
// size in bytes is known in advance: it tokenises sampleWindows windows of
// budget/sampleWindows bytes, centred at evenly spaced offsets of the
// concatenated text, and scales the tokens found by the ratio of a cheap
// proxy count (textProxy) over the whole text to the same proxy over the
// windows. Windows are aligned to white space so that they split the text
// where the tokenizer would: a window starts at a space (the space belongs
// to the next word's token) and ends before one. A window lies within the
// piece that holds its centre, or, when that piece is shorter than a
// window, starts with it and takes the pieces after it, each counted on
// its own as the exact count does.
type sampler struct {
	c      Counter
	total  int // bytes in all pieces
	w      int // window size
	k      int // next window
	base   int // offset of the next piece
	tokens int64
	proxy  int64 // proxy count of the windows
	bytes  int64 // size of the windows
	all    int64 // proxy count of the pieces so far
	rest   int   // bytes the current window takes from the pieces to come
}

func newSampler(c Counter, total, budget int) sampler {
	return sampler{c: c, total: total, w: max(budget/sampleWindows, 64)}
}

// piece adds the next piece of the text.
func (s *sampler) piece(p string) {
	s.all += textProxy(p)
	whole := false // p is counted whole, as part of a window
	if s.rest > 0 {
		// A window that started in a shorter piece goes on here.
		if len(p) <= s.rest {
			s.window(p)
			whole = true
		} else {
			s.window(alignWindow(p, 0, s.rest))
		}
		s.rest = max(s.rest-len(p), 0)
	}
	for ; s.k < sampleWindows; s.k++ {
		centre := int((int64(2*s.k+1) * int64(s.total)) / (2 * sampleWindows))
		if centre >= s.base+len(p) {
			break
		}
		if len(p) < s.w {
			// A piece shorter than a window (a role, an id, a short
			// message): the window is it and the pieces after it, each
			// counted whole, so that it weighs what a window weighs.
			if !whole {
				s.window(p)
				whole = true
				s.rest = s.w - len(p)
			}
			continue
		}
		start := min(max(centre-s.base-s.w/2, 0), len(p))
		end := min(start+s.w, len(p))
		start = max(end-s.w, 0)
		s.window(alignWindow(p, start, end))
	}
	s.base += len(p)
}

// window counts the text of a window.
func (s *sampler) window(win string) {
	if win != "" {
		s.tokens += int64(countText(s.c, win))
		s.proxy += textProxy(win)
		s.bytes += int64(len(win))
	}
}

// estimate returns the estimate once every piece was added. When the
// windows hold nothing the proxy counts (white space only) the tokens
// found are scaled by size instead; ok is false when the windows held no
// complete character, and the text must then be counted in full.
func (s *sampler) estimate() (n int64, ok bool) {
	switch {
	case s.proxy > 0:
		return scale(s.tokens, s.all, s.proxy), true
	case s.bytes > 0:
		return scale(s.tokens, int64(s.total), s.bytes), true
	}
	return 0, false
}

// scale returns a*b/c rounded to the nearest integer, for non-negative a
// and b and positive c, saturating at math.MaxInt64.
func scale(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	lo, carry := bits.Add64(lo, uint64(c/2), 0)
	hi += carry
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, math.MaxInt64))
}

// alignWindow narrows p[start:end] to white-space boundaries, or to rune
// boundaries when the window holds no white space near its ends (scripts
// written without spaces, base64).
func alignWindow(p string, start, end int) string {
	if start > 0 {
		s := start
		for s < end && !isSpace(p[s]) && s-start < (end-start)/4 {
			s++
		}
		if s < end && isSpace(p[s]) {
			start = s
		} else {
			for start < end && !utf8.RuneStart(p[start]) {
				start++
			}
		}
	}
	if end < len(p) {
		e := end
		for e > start && !isSpace(p[e]) && end-e < (end-start)/4 {
			e--
		}
		if e > start && isSpace(p[e]) {
			end = e
		} else {
			for end > start && !utf8.RuneStart(p[end]) {
				end--
			}
		}
	}
	return p[start:end]
}

func isSpace(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }

// textProxy is a cheap stand-in for a token count, used to scale sampled
// counts: tokens per proxy unit varies far less between languages and code
// than tokens per byte. In sixths of a token, roughly: a word (a run of
// ASCII letters) is one token, plus one per further 6 letters; a group of up
// to three digits is one; punctuation two thirds; a line break half; each
// non-ASCII character by its UTF-8 length (a third for two-byte letters such
// as accented Latin or Cyrillic, most of a token for CJK, more for emoji).
func textProxy(s string) int64 {
	var n int64
	run, digits := 0, 0 // lengths of the current runs of letters and digits
	for i := 0; i < len(s); i++ {
		switch k := proxyClass[s[i]]; k {
		case classLetter:
			if run == 0 {
				n += 6
			}
			run++
			if run%6 == 0 {
				n += 6
			}
			digits = 0
		case classDigit:
			if digits%3 == 0 {
				n += 6
			}
			digits++
			run = 0
		default:
			run, digits = 0, 0
			n += int64(k)
		}
	}
	return n
}

// Byte classes of textProxy: a weight (in sixths of a token) for bytes that
// count on their own, or one of the two run classes.
const (
	classLetter = 255
	classDigit  = 254
)

var proxyClass = func() (t [256]uint8) {
	for b := range 256 {
		switch {
		case b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z':
			t[b] = classLetter
		case b >= '0' && b <= '9':
			t[b] = classDigit
		case b == ' ' || b == '\t':
			t[b] = 0
		case b == '\n':
			t[b] = 3
		case b < 0x80:
			t[b] = 4
		case b >= 0xF0:
			t[b] = 9 // four-byte sequences: emoji and rare scripts
		case b >= 0xE0:
			t[b] = 5 // three-byte sequences: CJK, most Asian scripts
		case b >= 0xC0:
			t[b] = 2 // two-byte sequences: accented Latin, Cyrillic, Greek, Arabic
		}
	}
	return t
}()
