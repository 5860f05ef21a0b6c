package weights

import (
	"bytes"
	"unicode/utf8"
)

// chunkText reads the text of the chunk most streamed events are: a Chat
// Completions or Completions chunk ({"choices":[{"delta":{"content":...}}],
// ...} with no usage, or "usage": null), without reflection or
// allocation, and adds it to the fallback count in the order handleEvent
// would. It reports false, having done nothing, for every other event:
// one with a usage object, a "type", a message, an error or a response;
// one whose members the general path reads appear twice, differ only in
// case, or have an escaped name; one with a value of a type the general
// path refuses (which makes it ignore the whole event). Those go to
// handleEvent, so the result never depends on which path read an event.
// data is valid JSON.
func (s *StreamReader) chunkText(data []byte) bool {
	return s.chunk(data, false) && s.chunk(data, true)
}

// The members the general path reads, per level of a chunk: a key that
// matches one of them only in case (encoding/json matches names case
// insensitively) sends the event there.
var (
	eventFields    = []string{"object", "type", "choices", "usage", "delta", "content_block", "message", "error", "response"}
	choiceFields   = []string{"delta", "text"}
	deltaFields    = []string{"content", "refusal", "reasoning_content", "tool_calls", "function_call"}
	callFields = []string{"function"}
	funcFields = []string{"name", "arguments"}
)

// chunk checks the event (emit false) or adds its text (emit true).
func (s *StreamReader) chunk(data []byte, emit bool) bool {
	if firstByte(data) != '{' || data[0] != '{' {
		return false
	}
	var seen uint
	return members(data, eventFields, &seen, func(k int, v []byte) bool {
		switch eventFields[k] {
		case "object":
			return v[0] == '"' || isNull(v)
		case "usage":
			return isNull(v)
		case "choices":
			return isNull(v) || (v[0] == '[' && elements(v, func(c []byte) bool { return s.choice(c, emit) }))
		}
		return false
	})
}

// choice checks or adds the text of one element of "choices": its delta's
// content, refusal, reasoning, tool calls and function call, then its
// text (the Completions API's), as handleEvent does.
func (s *StreamReader) choice(c []byte, emit bool) bool {
	if isNull(c) {
		return true
	}
	if c[0] != '{' {
		return false
	}
	var seen, dseen uint
	var text, content, refusal, reasoning, calls, call []byte
	ok := members(c, choiceFields, &seen, func(k int, v []byte) bool {
		if choiceFields[k] == "text" {
			text = v
			return isString(v)
		}
		if isNull(v) {
			return true
		}
		return v[0] == '{' && members(v, deltaFields, &dseen, func(k int, v []byte) bool {
			switch deltaFields[k] {
			case "content":
				content = v
			case "refusal":
				refusal = v
			case "reasoning_content":
				reasoning = v
			case "tool_calls":
				calls = v
				return isNull(v) || (v[0] == '[' && elements(v, func(tc []byte) bool { return s.toolCall(tc, false) }))
			case "function_call":
				call = v
				return s.function(v, false)
			}
			return isString(v)
		})
	})
	if !ok || !emit {
		return ok
	}
	s.jsonText(content)
	s.jsonText(refusal)
	s.jsonText(reasoning)
	if calls != nil && !isNull(calls) {
		elements(calls, func(tc []byte) bool { return s.toolCall(tc, true) })
	}
	s.function(call, true)
	s.jsonText(text)
	return true
}

// toolCall checks or adds the text of one tool call: its function's.
func (s *StreamReader) toolCall(tc []byte, emit bool) bool {
	if isNull(tc) {
		return true
	}
	var seen uint
	return tc[0] == '{' && members(tc, callFields, &seen, func(_ int, v []byte) bool { return s.function(v, emit) })
}

// function checks or adds the text of a function call: its name, then its
// arguments. A nil or null f has none.
func (s *StreamReader) function(f []byte, emit bool) bool {
	if f == nil || isNull(f) {
		return true
	}
	var seen uint
	var name, args []byte
	ok := f[0] == '{' && members(f, funcFields, &seen, func(k int, v []byte) bool {
		if funcFields[k] == "name" {
			name = v
		} else {
			args = v
		}
		return isString(v)
	})
	if ok && emit {
		s.jsonText(name)
		s.jsonText(args)
	}
	return ok
}

// jsonText adds the text of a JSON string value (nil or null adds
// nothing), decoded as jstr does.
func (s *StreamReader) jsonText(v []byte) {
	if len(v) < 2 || v[0] != '"' {
		return
	}
	in := v[1 : len(v)-1]
	if bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
		streamText(s, in)
		return
	}
	var t jstr
	if t.UnmarshalJSON(v) == nil {
		streamText(s, t)
	}
}

func isNull(v []byte) bool   { return string(v) == "null" }
func isString(v []byte) bool { return v[0] == '"' || isNull(v) }

// members calls f with the index in fields of each member of the valid
// JSON object obj whose key is one of fields, and its value; it skips the
// members whose key is none of them, and fails (false) at a key that
// repeats one of fields (seen marks those met), matches one only in case,
// or is escaped or not ASCII, or when f fails.
func members(obj []byte, fields []string, seen *uint, f func(k int, v []byte) bool) bool {
	i := skipSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		kEnd := skipString(obj, i)
		key := obj[i+1 : kEnd-1]
		i = skipSpace(obj, skipSpace(obj, kEnd)+1) // past the ':'
		vEnd := skipValue(obj, i)
		if k := fieldIndex(key, fields); k == -2 {
			return false
		} else if k >= 0 {
			if *seen&(1<<k) != 0 || !f(k, obj[i:vEnd]) {
				return false
			}
			*seen |= 1 << k
		}
		i = skipSpace(obj, vEnd)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return true
}

// fieldIndex returns the index of key in fields, -1 when key is none of
// them, -2 when it matches one only in case, or could once unescaped or
// folded (a backslash, a byte beyond ASCII).
func fieldIndex(key []byte, fields []string) int {
	for _, c := range key {
		if c == '\\' || c >= utf8.RuneSelf {
			return -2
		}
	}
	for i, f := range fields {
		if string(key) == f {
			return i
		}
	}
	for _, f := range fields {
		if bytes.EqualFold(key, []byte(f)) {
			return -2
		}
	}
	return -1
}

// elements calls f with each element of the valid JSON array arr, until f
// fails.
func elements(arr []byte, f func(v []byte) bool) bool {
	i := skipSpace(arr, 1)
	for i < len(arr) && arr[i] != ']' {
		end := skipValue(arr, i)
		if !f(arr[i:end]) {
			return false
		}
		i = skipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
	return true
}
