package weights

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// jstr is a JSON string decoded without a second scan when it holds no
// escape sequences, which is the common case for long prompt text. Null
// decodes to "". The result is the same string encoding/json would produce.
type jstr string

// UnmarshalJSON implements json.Unmarshaler.
func (s *jstr) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		in := b[1 : len(b)-1]
		if bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
			*s = jstr(in)
			return nil
		}
		if v, ok := unquote(in); ok {
			*s = jstr(v)
			return nil
		}
	}
	if string(b) == "null" {
		*s = ""
		return nil
	}
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return typeError(b, typeJstr)
	}
	*s = jstr(v)
	return nil
}

// functionCall is a function call's name and arguments, in the shape of
// the streamed responses' deltas.
type functionCall struct {
	Name      jstr `json:"name"`
	Arguments jstr `json:"arguments"`
}

var typeJstr = reflect.TypeFor[jstr]()

// typeError reports a JSON value b of the wrong kind for Go type t, in the
// form encoding/json completes with the field's path.
func typeError(b []byte, t reflect.Type) error {
	return &json.UnmarshalTypeError{Value: kind(firstByte(b)), Type: t}
}

// firstByte returns the first non-space byte of b, or 0.
func firstByte(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c
	}
	return 0
}

// bytesTokens is the price of content this package does not model (audio,
// files, encrypted reasoning): one token per four bytes of its JSON, rounded
// up.
func bytesTokens(n int) int64 { return int64(n+3) / 4 }

// unquote decodes the inside of a JSON string literal (without its quotes)
// exactly as encoding/json does: escapes are resolved, a lone or broken
// surrogate escape and each byte of invalid UTF-8 become U+FFFD. It reports
// false for input encoding/json would reject (a control character, a bad
// escape), so the caller can fall back to it for the error.
func unquote(in []byte) (string, bool) {
	out, ok := appendUnquote(make([]byte, 0, len(in)), in)
	return string(out), ok
}

// appendUnquote appends the decoded inside of a JSON string literal to out,
// as unquote decodes it.
func appendUnquote[S ~string | ~[]byte](out []byte, in S) ([]byte, bool) {
	out, _, ok := unquoteChunk(out, in, math.MaxInt)
	return out, ok
}

// unquoteChunk decodes the inside of a JSON string literal as
// appendUnquote does, stopping once out holds limit bytes or more, at the
// end of a character; it returns how much of in it decoded.
func unquoteChunk[S ~string | ~[]byte](out []byte, in S, limit int) (_ []byte, n int, ok bool) {
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
