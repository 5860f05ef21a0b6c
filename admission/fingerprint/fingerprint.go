// Package fingerprint computes the fingerprint of one step of an agent
// session (limits.Fingerprint), the value a loop policy counts (a policy
// keyed by limits.KeyFingerprint, see docs/sessions.md): an agent that
// loops keeps making the same step, and so the same fingerprint.
//
// A step is what is new in a request, not the request: a chat-style body
// grows with every turn, so hashing all of it would never repeat. Chat
// hashes the conversation's tail: the model, the tool calls of the last
// assistant message (each tool's name and arguments; its text is left
// out, since a model rephrases it around the same call) or its text when
// it calls no tool, and every message after it (the tool results or the
// user's turn). ToolCall hashes a tool call: the tool's name and its
// arguments.
//
// Normalised: two steps that differ only in the following are the same
// step.
//
//   - JSON key order and whitespace between tokens; call ids (keys id,
//     tool_call_id, tool_use_id and call_id, whose values are new on
//     every call).
//   - In strings: leading and trailing white space, runs of white space
//     (any becomes one space), and letter case (Unicode simple folding
//     to lower case).
//   - Numbers by value (1, 1.0 and 1e0 are one number).
//   - Arguments sent as a JSON string (OpenAI's function.arguments) are
//     read as the JSON they hold.
//
// Anything else makes another step: a different argument, a result that
// changed, a counter or a time stamp that moves with each call. A loop
// whose every step carries a fresh counter is not seen by this
// fingerprint; a session's step budget bounds it.
//
// Bounded: each string is compared by its first MaxPart bytes, each array
// by its first MaxItems elements, nesting by MaxDepth levels, and a
// conversation's tail by its last MaxTail messages. One scan of the body
// finds its messages without decoding them (a 200-turn, 87 KB
// conversation takes about 0.25 ms, ten times less than encoding/json
// takes to split it); only the tail is decoded, once per level of nesting
// under MaxDepth, so a hostile body costs time in proportion to its size.
// A request that is not a conversation gets no fingerprint (a loop policy
// does not count it).
package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/admission/limits"
)

// The bounds of what a fingerprint reads (see the package documentation).
const (
	// MaxPart is the prefix of each string compared, in bytes.
	MaxPart = 4096
	// MaxItems is the number of elements of an array compared.
	MaxItems = 64
	// MaxDepth is the nesting of JSON values compared; deeper values are
	// compared as their text.
	MaxDepth = 8
	// MaxTail is the number of last messages a conversation's tail is
	// looked for in.
	MaxTail = 16
	// MaxToolName is the longest tool name ToolName accepts.
	MaxToolName = 64
)

// idKeys are the keys of call ids, new on every call, left out.
var idKeys = []string{"id", "tool_call_id", "tool_use_id", "call_id"}

// ToolCall returns the fingerprint of a call of the tool name with the
// JSON arguments args (normalised; text that is not JSON is compared as
// text).
func ToolCall(name string, args []byte) limits.Fingerprint {
	w := newWriter("tool")
	w.str(name)
	w.raw(args, 0)
	return w.sum()
}

// ToolName returns name when it can be shown in a refusal's evidence: 1
// to MaxToolName bytes of ASCII letters, digits, '_', '-', '.' and '/'
// (the names of OpenAI functions and MCP tools); "" otherwise.
func ToolName(name string) string {
	if name == "" || len(name) > MaxToolName {
		return ""
	}
	for i := range len(name) {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == '/') {
			return ""
		}
	}
	return name
}

// message is the part of a chat message a step reads: OpenAI's
// tool_calls, or Anthropic's tool_use blocks in content.
type message struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls []struct {
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// block is an Anthropic content block, as far as a tool_use reads.
type block struct {
	Type  string          `json:"type"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// Chat returns the fingerprint of the step a chat-style request body
// makes (an OpenAI chat completion or an Anthropic message: a model and
// a messages array), and the name of the first tool its last assistant
// message calls when ToolName accepts it ("" otherwise). ok is false
// when body holds no messages: the request makes no step to count.
func Chat(body []byte) (fp limits.Fingerprint, tool string, ok bool) {
	model, msgs := split(body)
	if len(msgs) == 0 {
		return fp, "", false
	}
	start := len(msgs) - 1
	var last message
	for i := len(msgs) - 1; i >= max(0, len(msgs)-MaxTail); i-- {
		var m message
		if json.Unmarshal(msgs[i], &m) == nil && m.Role == "assistant" {
			start, last = i, m
			break
		}
	}
	w := newWriter("chat")
	w.str(model)
	tail := msgs[start:]
	if last.Role == "assistant" {
		tail = tail[1:]
		tool = w.calls(&last)
	}
	for _, m := range tail {
		w.raw(m, 0)
	}
	return w.sum(), tool, true
}

// split returns the model and the last MaxTail elements of the messages
// array of a JSON object body (all that Chat reads), by one scan that
// decodes nothing else: the body was parsed strictly before, and only the
// tail of the messages is decoded after. A key written with escapes is
// unquoted first, as the upstream reads it. No messages array: nil.
func split(body []byte) (model string, msgs [][]byte) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return "", nil
	}
	i++
	for {
		i = skipSpace(body, i)
		if i >= len(body) || body[i] != '"' {
			return model, msgs
		}
		k := skipValue(body, i)
		if k <= i {
			return "", nil
		}
		key := body[i:k]
		if bytes.IndexByte(key, '\\') >= 0 {
			var s string
			if json.Unmarshal(key, &s) != nil {
				return "", nil
			}
			key = []byte(`"` + s + `"`)
		}
		i = skipSpace(body, k)
		if i >= len(body) || body[i] != ':' {
			return "", nil
		}
		i = skipSpace(body, i+1)
		end := skipValue(body, i)
		if end <= i {
			return "", nil
		}
		switch string(key) {
		case `"model"`:
			_ = json.Unmarshal(body[i:end], &model)
		case `"messages"`:
			msgs = elements(body[i:end])
		}
		i = skipSpace(body, end)
		if i >= len(body) || body[i] != ',' && body[i] != '}' {
			return "", nil
		}
		if body[i] == '}' {
			return model, msgs
		}
		i++
	}
}

// elements returns the last MaxTail elements of the JSON array a, nil
// when a is not an array. It holds at most 2×MaxTail of them at a time,
// however many the array has.
func elements(a []byte) [][]byte {
	if len(a) == 0 || a[0] != '[' {
		return nil
	}
	var out [][]byte
	for i := 1; ; {
		i = skipSpace(a, i)
		if i >= len(a) || a[i] == ']' {
			return out[max(0, len(out)-MaxTail):]
		}
		end := skipValue(a, i)
		if end <= i {
			return nil
		}
		if len(out) == 2*MaxTail {
			out = append(out[:0], out[MaxTail:]...)
		}
		out = append(out, a[i:end])
		i = skipSpace(a, end)
		if i >= len(a) || a[i] != ',' && a[i] != ']' {
			return nil
		}
		if a[i] == ',' {
			i++
		}
	}
}

// skipSpace returns the index of the first byte of b from i that is not
// JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value that starts at b[i], or -1
// when b ends first. It counts brackets and skips strings, without
// recursion, so nesting costs nothing more.
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return -1
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of a literal
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i
			}
		}
	}
	if depth == 0 {
		return i
	}
	return -1
}

// calls writes the step of an assistant message m: its tool calls, or
// its content when it calls none, and returns the first tool's name for
// the evidence.
func (w *writer) calls(m *message) (tool string) {
	n := 0
	for _, c := range m.ToolCalls {
		args := c.Function.Arguments
		var s string
		if json.Unmarshal(args, &s) == nil {
			args = []byte(s)
		}
		w.call(c.Function.Name, args, &tool)
		n++
	}
	if t := bytes.TrimSpace(m.Content); len(t) > 0 && t[0] == '[' {
		var blocks []block
		if json.Unmarshal(t, &blocks) == nil {
			for _, b := range blocks {
				if b.Type == "tool_use" {
					w.call(b.Name, b.Input, &tool)
					n++
				}
			}
		}
	}
	if n == 0 {
		w.raw(m.Content, 0)
	}
	return tool
}

// call writes one tool call and keeps the first valid tool name.
func (w *writer) call(name string, args []byte, tool *string) {
	w.tag('c')
	w.str(name)
	w.raw(args, 0)
	if *tool == "" {
		*tool = ToolName(name)
	}
}

// writer feeds a normalised step into a hash.
type writer struct {
	h   hash.Hash
	buf []byte
}

// newWriter returns a writer whose hash starts with the kind of step.
func newWriter(kind string) *writer {
	w := &writer{h: sha256.New(), buf: make([]byte, 0, 256)}
	w.str("sluice-step-v1/" + kind)
	return w
}

// sum returns the fingerprint: the first 16 bytes of the SHA-256 of the
// normalised step, never zero (zero means none).
func (w *writer) sum() limits.Fingerprint {
	var fp limits.Fingerprint
	copy(fp[:], w.h.Sum(w.buf[:0]))
	if fp.IsZero() {
		fp[0] = 1
	}
	return fp
}

// tag writes the one-byte tag of a JSON value or of a tool call.
func (w *writer) tag(c byte) { w.h.Write([]byte{c}) }

// str writes s normalised: its first MaxPart bytes, trimmed, white space
// runs made one space, case folded; length-prefixed, so that no two
// sequences of strings write the same bytes.
func (w *writer) str(s string) {
	if len(s) > MaxPart {
		s = s[:MaxPart]
	}
	b := w.buf[:0]
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			space = len(b) > 0
			continue
		}
		if space {
			b = append(b, ' ')
			space = false
		}
		b = utf8.AppendRune(b, unicode.ToLower(r))
	}
	var n [binary.MaxVarintLen64 + 1]byte
	n[0] = 's'
	w.h.Write(n[:1+binary.PutUvarint(n[1:], uint64(len(b)))])
	w.h.Write(b)
	w.buf = b[:0]
}

// raw writes the JSON value v normalised (see the package
// documentation); text that is not JSON is written as a string.
func (w *writer) raw(v []byte, depth int) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		w.tag('-')
		return
	}
	if depth >= MaxDepth {
		w.str(string(v))
		return
	}
	switch v[0] {
	case '{':
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil {
			break
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			if !slices.Contains(idKeys, k) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		w.tag('{')
		for _, k := range keys {
			w.str(k)
			w.raw(m[k], depth+1)
		}
		w.tag('}')
		return
	case '[':
		var a []json.RawMessage
		if json.Unmarshal(v, &a) != nil {
			break
		}
		w.tag('[')
		for _, e := range a[:min(len(a), MaxItems)] {
			w.raw(e, depth+1)
		}
		w.tag(']')
		return
	case '"':
		var s string
		if json.Unmarshal(v, &s) != nil {
			break
		}
		w.str(s)
		return
	case 't', 'f', 'n':
		w.tag('l')
		w.str(string(v))
		return
	default:
		if f, err := strconv.ParseFloat(string(v), 64); err == nil {
			w.tag('n')
			w.h.Write(strconv.AppendFloat(w.buf[:0], f, 'g', -1, 64))
			return
		}
	}
	w.str(string(v)) // not JSON: compared as text
}
