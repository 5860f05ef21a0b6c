package weights

import (
	"bytes"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/jsonscan"
)

// chunkVerdict is what chunkParser made of an event.
type chunkVerdict int

const (
	// chunkOther: not a plain text chunk; the general path decides.
	chunkOther chunkVerdict = iota
	// chunkText: a text chunk, whose text was counted.
	chunkText
	// chunkInvalid: not valid JSON, which the general path ignores too.
	chunkInvalid
)

// readChunk reads, in one pass over data and without allocating, the
// chunk most streamed events are: a Chat Completions or Completions chunk
// ({"choices":[{"delta":{"content":...}}],...} with no usage, or "usage":
// null). It validates the JSON as encoding/json does and counts the text
// in the order handleEvent would; any other event (a usage object, a
// "type", a message, an error, a response; a member handleEvent reads that
// appears twice, or matches only in case, or has an escaped name; a value
// of a type handleEvent refuses, which makes it ignore the whole event) is
// chunkOther, with nothing counted, so the result never depends on which
// path read an event.
//
// A chunk that differs from the last text chunk read in full only in the
// strings of its values (see chunkTemplate) is read as that chunk was,
// without the full pass.
func (s *StreamReader) readChunk(data []byte) chunkVerdict {
	if s.tmpl.ok {
		var at [maxTemplateStrings]span
		if s.tmpl.match(data, &at) {
			for _, k := range s.tmpl.texts[:s.tmpl.nt] {
				s.jsonText(data[at[k].start:at[k].end])
			}
			return chunkText
		}
	}
	p := chunkParser{b: data}
	v := p.event()
	if v != chunkText {
		return v
	}
	for _, sp := range p.spans[:p.n] {
		if sp.end > sp.start { // an absent or null value has none
			s.jsonText(data[sp.start:sp.end])
		}
	}
	s.tmpl.set(data, &p)
	return v
}

// maxChunkSpans bounds the text values of one chunk read by readChunk;
// a chunk with more goes to the general path.
const maxChunkSpans = 32

// chunkParser is a one-pass reader of a text chunk.
type chunkParser struct {
	b     []byte
	i     int
	spans [maxChunkSpans]span // the text values (strings, quotes included) to count, in order
	n     int
	// strs are the spans of the strings that are values (not keys), in
	// order, for a chunkTemplate; nstr counts them, past
	// maxTemplateStrings once there are more.
	strs [maxTemplateStrings]span
	nstr int
}

// valueString records the string value at b[start:p.i].
func (p *chunkParser) valueString(start int) {
	if p.nstr < len(p.strs) {
		p.strs[p.nstr] = span{start, p.i}
	}
	p.nstr = min(p.nstr+1, len(p.strs)+1)
}

// The members handleEvent reads, per level of a chunk: a key that matches
// one of them only in case (encoding/json matches names case
// insensitively) sends the event there.
var (
	eventFields  = []string{"object", "type", "choices", "usage", "delta", "content_block", "message", "error", "response", "candidates", "usageMetadata", "promptFeedback"}
	choiceFields = []string{"delta", "text"}
	deltaFields  = []string{"content", "refusal", "reasoning_content", "tool_calls", "function_call"}
	callFields   = []string{"function"}
	funcFields   = []string{"name", "arguments"}
)

func (p *chunkParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// event reads the whole data: one object, and only space after it.
func (p *chunkParser) event() chunkVerdict {
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return chunkOther
	}
	v := p.object(eventFields, func(k int) chunkVerdict {
		switch eventFields[k] {
		case "object":
			var sp span
			return p.text(&sp) // not counted: a text only for the template
		case "usage":
			return p.null()
		case "choices":
			return p.array(p.choice)
		}
		return chunkOther
	})
	if v != chunkText {
		return v
	}
	p.ws()
	if p.i != len(p.b) {
		return chunkInvalid
	}
	return chunkText
}

// choice reads one element of "choices": its delta's content, refusal,
// reasoning, tool calls and function call, then its text (the Completions
// API's) are counted in that order, as handleEvent does.
func (p *chunkParser) choice() chunkVerdict {
	if p.b[p.i] != '{' {
		return p.null()
	}
	var text, content, refusal, reasoning, name, args span
	base := p.n
	v := p.object(choiceFields, func(k int) chunkVerdict {
		if choiceFields[k] == "text" {
			return p.text(&text)
		}
		if p.b[p.i] != '{' {
			return p.null()
		}
		return p.object(deltaFields, func(k int) chunkVerdict {
			switch deltaFields[k] {
			case "content":
				return p.text(&content)
			case "refusal":
				return p.text(&refusal)
			case "reasoning_content":
				return p.text(&reasoning)
			case "tool_calls":
				return p.array(p.toolCall)
			}
			return p.function(&name, &args)
		})
	})
	if v != chunkText {
		return v
	}
	// The tool calls' spans are at base; the delta's text goes before
	// them, the function call's and the choice's text after.
	calls := p.n - base
	if p.n+6 > maxChunkSpans {
		return chunkOther
	}
	copy(p.spans[base+3:], p.spans[base:base+calls])
	p.spans[base], p.spans[base+1], p.spans[base+2] = content, refusal, reasoning
	p.n += 3
	p.add(name)
	p.add(args)
	p.add(text)
	return chunkText
}

// toolCall reads one element of "tool_calls", whose function's name and
// arguments are counted.
func (p *chunkParser) toolCall() chunkVerdict {
	if p.b[p.i] != '{' {
		return p.null()
	}
	return p.object(callFields, func(int) chunkVerdict {
		var name, args span
		if v := p.function(&name, &args); v != chunkText {
			return v
		}
		if p.n+2 > maxChunkSpans {
			return chunkOther
		}
		p.add(name)
		p.add(args)
		return chunkText
	})
}

// function reads a function call object, or null.
func (p *chunkParser) function(name, args *span) chunkVerdict {
	if p.b[p.i] != '{' {
		return p.null()
	}
	return p.object(funcFields, func(k int) chunkVerdict {
		if funcFields[k] == "name" {
			return p.text(name)
		}
		return p.text(args)
	})
}

func (p *chunkParser) add(sp span) {
	p.spans[p.n] = sp
	p.n++
}

// text reads a string or null into sp (a value string, for the
// template).
func (p *chunkParser) text(sp *span) chunkVerdict {
	start := p.i
	v := p.stringOrNull(false)
	if v == chunkText && p.b[start] == '"' {
		*sp = span{start, p.i}
		p.valueString(start)
	}
	return v
}

// object reads the object at p.i, calling member at each member whose key
// is one of fields (with its index, p.i at the value), which must read
// the value. It skips the others' values, and gives chunkOther at a key
// that repeats one of fields, matches one only in case, or is escaped or
// not ASCII.
func (p *chunkParser) object(fields []string, member func(k int) chunkVerdict) chunkVerdict {
	p.i++ // '{'
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return chunkText
	}
	var seen uint
	for {
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return chunkInvalid
		}
		start := p.i
		plain := p.plainKey()
		if !plain {
			if v := p.stringOrNull(true); v != chunkText {
				return v
			}
		}
		key := p.b[start+1 : p.i-1]
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return chunkInvalid
		}
		p.i++
		p.ws()
		if p.i >= len(p.b) {
			return chunkInvalid
		}
		var v chunkVerdict
		k := -2 // escaped or not ASCII: it could match once unescaped or folded
		if plain {
			k = fieldIndex(key, fields)
		}
		switch {
		case k == -2 || (k >= 0 && seen&(1<<k) != 0):
			return chunkOther
		case k >= 0:
			seen |= 1 << k
			v = member(k)
		default:
			v = p.value()
		}
		if v != chunkText {
			return v
		}
		if more, v := p.more('}'); !more {
			return v
		}
	}
}

// array reads null or the array at p.i, calling elem at each element.
func (p *chunkParser) array(elem func() chunkVerdict) chunkVerdict {
	if p.b[p.i] != '[' {
		return p.null()
	}
	p.i++
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return chunkText
	}
	for {
		if p.i >= len(p.b) {
			return chunkInvalid
		}
		if v := elem(); v != chunkText {
			return v
		}
		if more, v := p.more(']'); !more {
			return v
		}
	}
}

// more reads what follows a member or an element: a comma and the space
// after it (true), or the closing byte (false, chunkText); anything else
// is invalid.
func (p *chunkParser) more(closing byte) (bool, chunkVerdict) {
	p.ws()
	if p.i >= len(p.b) {
		return false, chunkInvalid
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		p.ws()
		return true, chunkText
	case closing:
		p.i++
		return false, chunkText
	}
	return false, chunkInvalid
}

// null reads a value that must be null; another valid value is of a type
// handleEvent refuses there.
func (p *chunkParser) null() chunkVerdict {
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return chunkText
	}
	return chunkOther
}

// stringOrNull reads a string (validated by the module's JSON scanner, as
// encoding/json does) or, unless key, null.
func (p *chunkParser) stringOrNull(key bool) chunkVerdict {
	if p.b[p.i] != '"' {
		if key {
			return chunkInvalid
		}
		return p.null()
	}
	sc := p.scanner()
	sc.Str()
	p.i = sc.Pos()
	if sc.Err() != nil {
		return chunkInvalid
	}
	return chunkText
}

// number reads the number at p.i and reports whether it is valid JSON.
func (p *chunkParser) number() bool {
	sc := p.scanner()
	sc.Number()
	p.i = sc.Pos()
	return sc.Err() == nil
}

// scanner returns the module's JSON scanner at p.i, to read a string or
// a number.
func (p *chunkParser) scanner() (sc jsonscan.Scanner) {
	sc.ResetBytes(p.b)
	sc.Seek(p.i)
	return sc
}

// maxSkipDepth bounds the nesting of a value readChunk skips; a deeper one
// goes to the general path.
const maxSkipDepth = 64

// value skips any valid JSON value at p.i.
func (p *chunkParser) value() chunkVerdict {
	var arrays uint64 // bit d: the container at depth d is an array
	depth := 0
	for {
		// A value.
		if p.i >= len(p.b) {
			return chunkInvalid
		}
		switch c := p.b[p.i]; {
		case c == '{' || c == '[':
			if depth == maxSkipDepth {
				return chunkOther
			}
			p.i++
			p.ws()
			if c == '[' {
				arrays |= 1 << depth
			} else {
				arrays &^= 1 << depth
			}
			depth++
			if p.i < len(p.b) && (c == '[' && p.b[p.i] == ']' || c == '{' && p.b[p.i] == '}') {
				p.i++
				depth--
				break
			}
			if c == '{' {
				if v := p.member(); v != chunkText {
					return v
				}
			}
			continue
		case c == '"':
			start := p.i
			if v := p.stringOrNull(true); v != chunkText {
				return v
			}
			p.valueString(start)
		case c == 't':
			if !bytes.HasPrefix(p.b[p.i:], []byte("true")) {
				return chunkInvalid
			}
			p.i += 4
		case c == 'f':
			if !bytes.HasPrefix(p.b[p.i:], []byte("false")) {
				return chunkInvalid
			}
			p.i += 5
		case c == 'n':
			if !bytes.HasPrefix(p.b[p.i:], []byte("null")) {
				return chunkInvalid
			}
			p.i += 4
		default:
			if !p.number() {
				return chunkInvalid
			}
		}
		// After a value: close containers, or go on to the next element.
		for {
			if depth == 0 {
				return chunkText
			}
			p.ws()
			if p.i >= len(p.b) {
				return chunkInvalid
			}
			inArray := arrays&(1<<(depth-1)) != 0
			c := p.b[p.i]
			switch {
			case c == ',':
				p.i++
				p.ws()
				if !inArray {
					if v := p.member(); v != chunkText {
						return v
					}
				}
			case inArray && c == ']', !inArray && c == '}':
				p.i++
				depth--
				continue
			default:
				return chunkInvalid
			}
			break
		}
	}
}

// member reads an object member's key and colon, leaving p.i at its value.
func (p *chunkParser) member() chunkVerdict {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return chunkInvalid
	}
	if v := p.stringOrNull(true); v != chunkText {
		return v
	}
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != ':' {
		return chunkInvalid
	}
	p.i++
	p.ws()
	return chunkText
}

// jsonText adds the text of a JSON string value, decoded as jstr does.
func (s *StreamReader) jsonText(v []byte) {
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

// fieldIndex returns the index of key, a plain ASCII key (see plainKey),
// in fields, -1 when key is none of them, -2 when it matches one only in
// case.
func fieldIndex(key []byte, fields []string) int {
	k := -1
	for i, f := range fields {
		// key is ASCII: a name it matches in case or not has its length,
		// and its first byte equal but for the case bit.
		if len(f) != len(key) || key[0]|0x20 != f[0]|0x20 {
			continue
		}
		if string(key) == f {
			return i
		}
		if bytes.EqualFold(key, []byte(f)) {
			k = -2
		}
	}
	return k
}

// plainKey reads the key at p.i (a '"') when it is plain: printable ASCII
// with no escape, the only keys fieldIndex matches. It reports whether it
// did; p.i is left at the key otherwise.
func (p *chunkParser) plainKey() bool {
	i := p.i + 1
	for i < len(p.b) && plainKeyByte[p.b[i]] {
		i++
	}
	if i < len(p.b) && p.b[i] == '"' {
		p.i = i + 1
		return true
	}
	return false
}

// plainKeyByte marks the bytes of a plain key: ASCII but the quote, the
// backslash and control characters.
var plainKeyByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
