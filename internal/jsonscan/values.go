package jsonscan

import (
	"math"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Unquote decodes the inside of a JSON string literal (without its
// quotes) exactly as encoding/json does: escapes are resolved, a lone or
// broken surrogate escape and each byte of invalid UTF-8 become U+FFFD. It
// reports false for input encoding/json would reject (a control
// character, a bad escape), so the caller can fall back to it for the
// error.
func Unquote[S ~string | ~[]byte](in S) (string, bool) {
	i := 0
	for i < len(in) && plainASCII[in[i]] {
		i++
	}
	if i == len(in) {
		return string(in), true // plain ASCII: one copy
	}
	out, ok := AppendUnquote(make([]byte, 0, len(in)), in)
	return string(out), ok
}

// AppendUnquote appends the decoded inside of a JSON string literal to
// out, as Unquote decodes it.
func AppendUnquote[S ~string | ~[]byte](out []byte, in S) ([]byte, bool) {
	out, _, ok := UnquoteChunk(out, in, math.MaxInt)
	return out, ok
}

// UnquoteChunk decodes the inside of a JSON string literal as
// AppendUnquote does, stopping once out holds limit bytes or more, at the
// end of a character; it returns how much of in it decoded, so that a
// long string can be decoded a piece at a time.
func UnquoteChunk[S ~string | ~[]byte](out []byte, in S, limit int) (_ []byte, n int, ok bool) {
	i := 0
	for i < len(in) && len(out) < limit {
		// Copy the run of plain ASCII up to the next byte that needs care.
		j, end := i, len(in)
		if limit-len(out) < end-i {
			end = i + limit - len(out)
		}
		for j < end && plainASCII[in[j]] {
			j++
		}
		out = append(out, in[i:j]...)
		if i = j; i == len(in) || len(out) >= limit {
			break
		}
		c := in[i]
		switch {
		case c == '\\':
			if i+1 >= len(in) {
				return out, i, false
			}
			switch in[i+1] {
			case '"', '\\', '/':
				out = append(out, in[i+1])
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(in[min(i+2, len(in)):])
				if !ok {
					return out, i, false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					r2, ok := rune(0), false
					if i+1 < len(in) && in[i] == '\\' && in[i+1] == 'u' {
						r2, ok = hex4(in[i+2:])
					}
					if dec := utf16.DecodeRune(r, r2); ok && dec != unicode.ReplacementChar {
						i += 6
						r = dec
					} else {
						r = unicode.ReplacementChar
					}
				}
				out = utf8.AppendRune(out, r)
				continue
			default:
				return out, i, false
			}
			i += 2
		case c < ' ' || c == '"':
			return out, i, false
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			// At most four bytes: the conversion does not allocate.
			r, size := utf8.DecodeRuneInString(string(in[i:min(i+utf8.UTFMax, len(in))]))
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, unicode.ReplacementChar)
			} else {
				out = append(out, in[i:i+size]...)
			}
			i += size
		}
	}
	return out, i, true
}

// hex4 decodes four hexadecimal digits.
func hex4[S ~string | ~[]byte](b S) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for i := range 4 {
		c := b[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}

// AppendCompact appends the text of a valid JSON value without
// insignificant white space, as json.Compact writes it.
func AppendCompact(dst []byte, v string) []byte {
	inStr := false
	start := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case inStr:
			if c == '\\' {
				i++
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			dst = append(dst, v[start:i]...)
			start = i + 1
		}
	}
	return append(dst, v[start:]...)
}

// Int64 reads a JSON number literal as encoding/json decodes it into an
// int64: an integer written without a fraction or an exponent, within
// the int64 range; ok is false for any other.
func Int64(lit string) (v int64, ok bool) {
	neg := len(lit) > 0 && lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	if len(lit) == 0 || len(lit) > 1 && lit[0] == '0' {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(lit); i++ {
		c := lit[i]
		if c < '0' || c > '9' || n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case neg && n <= 1<<63:
		return -int64(n), true
	case !neg && n <= 1<<63-1:
		return int64(n), true
	}
	return 0, false
}

// Integral reads a JSON number literal as an integer: any form of an
// integral value (10, 1e1, 10.0, 0.1e2) is accepted, and a magnitude
// beyond int64 saturates at math.MaxInt64 (or its negative). ok is false
// for a value with a fractional part (1.5, 1e-1).
func Integral(lit string) (v int64, ok bool) {
	neg := len(lit) > 0 && lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	mant, exp := lit, 0
	for i := 0; i < len(lit); i++ {
		if lit[i] == 'e' || lit[i] == 'E' {
			mant = lit[:i]
			e := lit[i+1:]
			eneg := len(e) > 0 && e[0] == '-'
			if len(e) > 0 && (e[0] == '-' || e[0] == '+') {
				e = e[1:]
			}
			for j := 0; j < len(e); j++ {
				// Beyond a billion the sign alone decides: a text holds
				// fewer digits than that.
				exp = min(exp*10+int(e[j]-'0'), 1e9)
			}
			if eneg {
				exp = -exp
			}
			break
		}
	}
	ip, fp := mant, ""
	for i := 0; i < len(mant); i++ {
		if mant[i] == '.' {
			ip, fp = mant[:i], mant[i+1:]
			break
		}
	}
	// The digits of ip then fp, numbered from 0: digit k weighs
	// 10^(len(ip)-1-k+exp).
	digit := func(k int) byte {
		if k < len(ip) {
			return ip[k]
		}
		return fp[k-len(ip)]
	}
	first, last := -1, -1
	for k := 0; k < len(ip)+len(fp); k++ {
		if digit(k) != '0' {
			if first < 0 {
				first = k
			}
			last = k
		}
	}
	if first < 0 {
		return 0, true
	}
	intLen := len(ip)
	if intLen-1-last+exp < 0 {
		return 0, false
	}
	var u uint64
	if intLen-1-first+exp >= 19 {
		u = 1 << 63
	} else {
		for k := first; k <= last; k++ {
			u = u*10 + uint64(digit(k)-'0')
		}
		for range intLen - 1 - last + exp {
			u *= 10
		}
	}
	if u > 1<<63-1 {
		u = 1<<63 - 1
	}
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}
