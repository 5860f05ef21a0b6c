// Package jsonscan reads JSON text strictly, as encoding/json accepts it,
// without building anything: a [Scanner] walks one text value by value,
// returning strings as views of the source and numbers as their literal
// text, and the functions beside it decode what a caller keeps (strings,
// integers, compact text).
//
// It is the one JSON reader of the module's hot paths: the request-body
// pricing of package weights, the request-log reader of package shadow
// and the batch input lines of the LLM gateway. It accepts exactly the
// texts encoding/json accepts (RFC 8259; invalid UTF-8 inside strings is
// accepted and decodes to U+FFFD, as encoding/json decodes it), nests at
// most [MaxDepth] deep, and extracts the same values; a fuzz test checks
// both against encoding/json.
package jsonscan

import (
	"fmt"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth is the deepest nesting of arrays and objects a text may have,
// encoding/json's own limit.
const MaxDepth = 10000

// Scanner reads one JSON text. The first syntax error is kept (see Err);
// from then on the scanner is at the end of its input and every read
// fails, so loops over members and elements end. The zero value reads an
// empty text; Reset starts another.
type Scanner struct {
	s     string
	i     int
	depth int
	err   error
}

// SyntaxError is invalid JSON at a byte offset.
type SyntaxError struct {
	// Offset is where the problem is, in bytes from the start of the text.
	Offset int
	// Msg says what the problem is, in encoding/json's words.
	Msg string
}

// Error implements error.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Msg)
}

// Reset starts reading src from its beginning.
func (s *Scanner) Reset(src string) { *s = Scanner{s: src} }

// ResetBytes starts reading b from its beginning, in place: b must not
// change while it is read, and the strings the scanner returns are views
// of b, valid as long as b is unchanged.
func (s *Scanner) ResetBytes(b []byte) { s.Reset(unsafe.String(unsafe.SliceData(b), len(b))) }

// Src returns the text being read.
func (s *Scanner) Src() string { return s.s }

// Pos returns the offset of the next byte to read.
func (s *Scanner) Pos() int { return s.i }

// Seek moves to offset pos, the start of a value already read without
// error, to read it again; the caller returns to where it was with Seek
// once that value is read.
func (s *Scanner) Seek(pos int) { s.i = pos }

// Err returns the first syntax error found, a *SyntaxError, or nil.
func (s *Scanner) Err() error { return s.err }

func (s *Scanner) fail(msg string) {
	if s.err == nil {
		s.err = &SyntaxError{Offset: s.i, Msg: msg}
	}
	s.i = len(s.s)
}

// unexpected fails on the byte at s.i (or the end of the input).
func (s *Scanner) unexpected(context string) {
	if s.i >= len(s.s) {
		s.fail("unexpected end of JSON input")
		return
	}
	s.fail(fmt.Sprintf("invalid character %q %s", s.s[s.i], context))
}

// SkipSpace skips white space.
func (s *Scanner) SkipSpace() {
	for s.i < len(s.s) {
		switch s.s[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Peek skips white space and returns the next byte, or 0 at the end: the
// first byte of the next value tells its type (see Kind).
func (s *Scanner) Peek() byte {
	s.SkipSpace()
	if s.i < len(s.s) {
		return s.s[s.i]
	}
	return 0
}

// End checks that only white space follows the value read.
func (s *Scanner) End() {
	if s.SkipSpace(); s.i < len(s.s) && s.err == nil {
		s.unexpected("after top-level value")
	}
}

// Kind names the JSON type of a value whose first byte is c, as
// encoding/json's type errors do.
func Kind(c byte) string {
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

// Str reads the string at the scanner (Peek returned '"') and returns its
// contents, without the quotes. dirty reports contents that differ from
// their value, escapes or invalid UTF-8: AppendUnquote decodes them.
func (s *Scanner) Str() (raw string, dirty bool) {
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

// Number reads the number at the scanner and returns its text (see
// Integral and Int64 for its value).
func (s *Scanner) Number() string {
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

// Literal reads one of the literals true, false and null at the scanner;
// the byte Peek returned tells which.
func (s *Scanner) Literal() {
	for _, w := range [...]string{"true", "false", "null"} {
		if len(s.s)-s.i >= len(w) && s.s[s.i:s.i+len(w)] == w {
			s.i += len(w)
			return
		}
	}
	s.unexpected("looking for beginning of value")
}

// Open consumes the '{' or '[' at the scanner (Peek returned it), counting
// the depth; More reads what it holds.
func (s *Scanner) Open() {
	s.i++
	if s.depth++; s.depth > MaxDepth {
		s.fail("exceeded max depth")
	}
}

// More reports whether the array or object being read (closed by end, ']'
// or '}') has another element or member, consuming the comma before it;
// n counts the elements read so far, from 0. At the end it consumes the
// closing byte. The caller reads the element (or the member: Key, then
// its value) before calling More again.
func (s *Scanner) More(n *int, end byte) bool {
	c := s.Peek()
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

// Key reads an object member's key and the colon after it, as Str does.
func (s *Scanner) Key() (raw string, dirty bool) {
	if s.Peek() != '"' {
		s.unexpected("looking for beginning of object key string")
		return "", false
	}
	raw, dirty = s.Str()
	if s.Peek() != ':' {
		s.unexpected("after object key")
		return "", false
	}
	s.i++
	return raw, dirty
}

// Skip reads any value, checking it.
func (s *Scanner) Skip() {
	switch c := s.Peek(); c {
	case '"':
		s.Str()
	case '{':
		s.Open()
		for n := 0; s.More(&n, '}'); {
			s.Key()
			s.Skip()
		}
	case '[':
		s.Open()
		for n := 0; s.More(&n, ']'); {
			s.Skip()
		}
	case 't', 'f', 'n':
		s.Literal()
	default:
		if c == '-' || c >= '0' && c <= '9' {
			s.Number()
			return
		}
		s.unexpected("looking for beginning of value")
	}
}

// Value reads any value and returns its text ("" after an error).
func (s *Scanner) Value() string {
	s.SkipSpace()
	start := s.i
	s.Skip()
	if s.err != nil {
		return ""
	}
	return s.s[start:s.i]
}
