package weights

import (
	"bytes"
	"encoding/json"
	"reflect"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/jsonscan"
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
		if v, ok := jsonscan.Unquote(in); ok {
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
	return &json.UnmarshalTypeError{Value: jsonscan.Kind(firstByte(b)), Type: t}
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
