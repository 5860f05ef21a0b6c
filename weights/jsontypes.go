package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
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

var (
	typeJstr    = reflect.TypeFor[jstr]()
	typeContent = reflect.TypeFor[content]()
	typeInput   = reflect.TypeFor[textInput]()
)

// typeError reports a JSON value b of the wrong kind for Go type t, in the
// form encoding/json completes with the field's path.
func typeError(b []byte, t reflect.Type) error {
	v := "value"
	switch firstByte(b) {
	case '"':
		v = "string"
	case '{':
		v = "object"
	case '[':
		v = "array"
	case 't', 'f':
		v = "bool"
	case 'n':
		v = "null"
	default:
		v = "number"
	}
	return &json.UnmarshalTypeError{Value: v, Type: t}
}

// describeType names what a Go type accepts, for error messages.
func describeType(t reflect.Type) string {
	switch t {
	case typeJstr:
		return "a string"
	case typeContent:
		return "a string or an array of content parts"
	case typeInput:
		return "a string, an array of strings, an array of token ids or an array of token arrays"
	}
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another type"
}

// embeddedPath removes the names of embedded structs from field paths.
var embeddedPath = strings.NewReplacer("limits.", "", "functionDef.", "")

// decode unmarshals a request body into v, turning every failure into a
// *MalformedError.
func decode(ep Endpoint, body []byte, v any) error {
	if firstByte(body) != '{' {
		return malformed(ep, "", errors.New("want a JSON object"))
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var (
		ute *json.UnmarshalTypeError
		se  *json.SyntaxError
	)
	switch {
	case errors.As(err, &ute):
		return malformed(ep, embeddedPath.Replace(ute.Field), fmt.Errorf("want %s, got %s", describeType(ute.Type), ute.Value))
	case errors.As(err, &se):
		return malformed(ep, "", fmt.Errorf("invalid JSON at byte %d: %w", se.Offset, se))
	}
	return malformed(ep, "", err)
}

// content is a message's content: a string, an array of parts, or null.
type content struct {
	text  jstr
	parts []contentPart
}

// UnmarshalJSON implements json.Unmarshaler.
func (c *content) UnmarshalJSON(b []byte) error {
	switch firstByte(b) {
	case '"':
		return c.text.UnmarshalJSON(b)
	case '[':
		return json.Unmarshal(b, &c.parts)
	case 'n':
		return nil
	}
	return typeError(b, typeContent)
}

// contentPart is one part of an array content, in the shapes of the Chat
// Completions API ("text", "image_url", "refusal") and of the Responses API
// ("input_text", "output_text", "input_image", "refusal").
type contentPart struct {
	Type     string   `json:"type"`
	Text     jstr     `json:"text"`
	Refusal  jstr     `json:"refusal"`
	ImageURL imageRef `json:"image_url"`
	Detail   string   `json:"detail"`
	rawLen   int
}

// UnmarshalJSON implements json.Unmarshaler, recording the part's size for
// part types that are priced by size.
func (p *contentPart) UnmarshalJSON(b []byte) error {
	type plain contentPart
	if err := json.Unmarshal(b, (*plain)(p)); err != nil {
		return err
	}
	p.rawLen = len(b)
	return nil
}

// imageRef is an image_url value: an object {"url", "detail"} in the Chat
// Completions API, a plain string in the Responses API.
type imageRef struct {
	URL    jstr   `json:"url"`
	Detail string `json:"detail"`
}

// UnmarshalJSON implements json.Unmarshaler.
func (r *imageRef) UnmarshalJSON(b []byte) error {
	switch firstByte(b) {
	case '"', 'n':
		return r.URL.UnmarshalJSON(b)
	case '{':
	default:
		return typeError(b, reflect.TypeFor[imageRef]())
	}
	type plain imageRef
	return json.Unmarshal(b, (*plain)(r))
}

// sized is a JSON value of any type whose encoded size is kept, for items
// priced by size.
type sized int

// UnmarshalJSON implements json.Unmarshaler.
func (s *sized) UnmarshalJSON(b []byte) error { *s = sized(len(b)); return nil }

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
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		// Copy the run of plain ASCII up to the next byte that needs care.
		j := i
		for j < len(in) && in[j] >= ' ' && in[j] < utf8.RuneSelf && in[j] != '\\' && in[j] != '"' {
			j++
		}
		out = append(out, in[i:j]...)
		if i = j; i == len(in) {
			break
		}
		c := in[i]
		switch {
		case c == '\\':
			if i+1 >= len(in) {
				return "", false
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
				r, ok := hex4(in[i+2:])
				if !ok {
					return "", false
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
				return "", false
			}
			i += 2
		case c < ' ' || c == '"':
			return "", false
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, unicode.ReplacementChar)
			} else {
				out = append(out, in[i:i+size]...)
			}
			i += size
		}
	}
	return string(out), true
}

// hex4 decodes four hexadecimal digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
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
