package weights

import (
	"fmt"
	"unicode/utf8"
)

// maxDepth is the deepest nesting of arrays and objects a body may have,
// encoding/json's own limit.
const maxDepth = 10000

// scanner reads one JSON text strictly (RFC 8259, as encoding/json does:
// invalid UTF-8 inside strings is accepted and decodes to U+FFFD) without
// building anything: strings are returned as views of the source, numbers
// as their literal text. The first syntax error is kept in err; from then
// on the scanner is at the end of its input and every read fails, so loops
// over members and elements end.
type scanner struct {
	s     string
	i     int
	depth int
	err   error
}

// syntaxError is invalid JSON at a byte offset.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.off, e.msg)
}

func (s *scanner) fail(msg string) {
	if s.err == nil {
		s.err = &syntaxError{off: s.i, msg: msg}
	}
	s.i = len(s.s)
}

// unexpected fails on the byte at s.i (or the end of the input).
func (s *scanner) unexpected(context string) {
	if s.i >= len(s.s) {
		s.fail("unexpected end of JSON input")
		return
	}
	s.fail(fmt.Sprintf("invalid character %q %s", s.s[s.i], context))
}

func (s *scanner) ws() {
	for s.i < len(s.s) {
		switch s.s[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.s) {
		return s.s[s.i]
	}
	return 0
}

// kind names the JSON type of a value starting with c, as encoding/json's
// type errors do.
func kind(c byte) string {
	switch c {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// plainByte marks the bytes a string holds as they are: not a quote, a
// backslash or a control character; plainASCII the ASCII ones among them.
var plainByte, plainASCII = func() (t, a [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
		a[c] = t[c] && c < utf8.RuneSelf
	}
	return t, a
}()

// str reads the string at s.i (a quote) and returns its contents, without
// the quotes. dirty reports contents that differ from their decoded value:
// escapes or invalid UTF-8 (see appendUnquote).
func (s *scanner) str() (raw string, dirty bool) {
	src := s.s
	i := s.i + 1
	start := i
	ascii := true // no byte above 0x7f so far, so no UTF-8 to check
	for {
		if ascii {
			for i < len(src) && plainASCII[src[i]] {
				i++
			}
		} else {
			for i < len(src) && plainByte[src[i]] {
				i++
			}
		}
		if i >= len(src) {
			s.i = i
			s.fail("unexpected end of JSON input")
			return "", false
		}
		switch c := src[i]; {
		case c >= utf8.RuneSelf:
			ascii = false
			i++
		case c == '"':
			raw = src[start:i]
			s.i = i + 1
			return raw, dirty || !ascii && !utf8.ValidString(raw)
		case c == '\\':
			dirty = true
			if i+1 >= len(src) {
				s.i = i + 1
				s.fail("unexpected end of JSON input")
				return "", false
			}
			switch src[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := hex4(src[min(i+2, len(src)):]); !ok {
					s.i = i
					s.fail("invalid \\u escape in string")
					return "", false
				}
				i += 6
			default:
				s.i = i
				s.fail(fmt.Sprintf("invalid escape %q in string", src[i:i+2]))
				return "", false
			}
		default:
			s.i = i
			s.fail(fmt.Sprintf("invalid character %q in string", c))
			return "", false
		}
	}
}

// num reads the number at s.i and returns its text.
func (s *scanner) num() string {
	src, i := s.s, s.i
	digits := func() bool {
		j := i
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(src) && src[i] == '-' {
		i++
	}
	switch {
	case i < len(src) && src[i] == '0':
		i++
	case !digits():
		s.i = i
		s.unexpected("in number")
		return ""
	}
	if i < len(src) && src[i] == '.' {
		i++
		if !digits() {
			s.i = i
			s.unexpected("after decimal point in number")
			return ""
		}
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if !digits() {
			s.i = i
			s.unexpected("in exponent of number")
			return ""
		}
	}
	lit := src[s.i:i]
	s.i = i
	return lit
}

// lit reads one of the literals true, false and null at s.i.
func (s *scanner) lit() {
	for _, w := range [...]string{"true", "false", "null"} {
		if len(s.s)-s.i >= len(w) && s.s[s.i:s.i+len(w)] == w {
			s.i += len(w)
			return
		}
	}
	s.unexpected("looking for beginning of value")
}

// open consumes the '{' or '[' at s.i, counting the depth.
func (s *scanner) open() {
	s.i++
	if s.depth++; s.depth > maxDepth {
		s.fail("exceeded max depth")
	}
}

// more reports whether the array or object being read (closed by end) has
// another element or member, consuming the comma before it; n counts the
// elements read so far. At the end it consumes the closing byte.
func (s *scanner) more(n *int, end byte) bool {
	c := s.peek()
	if s.err != nil {
		return false
	}
	if c == end {
		s.i++
		s.depth--
		return false
	}
	if *n > 0 {
		if c != ',' {
			if end == ']' {
				s.unexpected("after array element")
			} else {
				s.unexpected("after object member")
			}
			return false
		}
		s.i++
	}
	*n++
	return true
}

// key reads an object member's key and the colon after it.
func (s *scanner) key() (raw string, dirty bool) {
	if s.peek() != '"' {
		s.unexpected("looking for beginning of object key string")
		return "", false
	}
	raw, dirty = s.str()
	if s.peek() != ':' {
		s.unexpected("after object key")
		return "", false
	}
	s.i++
	return raw, dirty
}

// skip reads any value, checking it.
func (s *scanner) skip() {
	switch c := s.peek(); c {
	case '"':
		s.str()
	case '{':
		s.open()
		for n := 0; s.more(&n, '}'); {
			s.key()
			s.skip()
		}
	case '[':
		s.open()
		for n := 0; s.more(&n, ']'); {
			s.skip()
		}
	case 't', 'f', 'n':
		s.lit()
	default:
		if c == '-' || c >= '0' && c <= '9' {
			s.num()
			return
		}
		s.unexpected("looking for beginning of value")
	}
}

// span reads any value and returns its text.
func (s *scanner) span() string {
	s.ws()
	start := s.i
	s.skip()
	if s.err != nil {
		return ""
	}
	return s.s[start:s.i]
}

// appendCompact appends the text of a valid JSON value without
// insignificant white space, as json.Compact writes it.
func appendCompact(dst []byte, v string) []byte {
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

// intValue reads a JSON number literal as an integer: any form of an
// integral value (10, 1e1, 10.0, 0.1e2) is accepted, and a magnitude
// beyond int64 saturates at math.MaxInt64 (or its negative). ok is false
// for a value with a fractional part (1.5, 1e-1).
func intValue(lit string) (v int64, ok bool) {
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
				// Beyond a billion the sign alone decides: a body holds
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
