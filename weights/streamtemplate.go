package weights

import (
	"bytes"

	"github.com/sluicehq/sluice/internal/jsonscan"
)

// Bounds of what a chunkTemplate holds: the bytes of a chunk around its
// value strings, and the number of those. A stream's chunks differ, as a
// rule, only in their strings (the text; OpenAI's random "obfuscation"
// padding), the rest of their bytes, a few hundred, repeating (the id,
// model, creation time, fingerprint, indexes, nulls).
const (
	maxTemplateBytes   = 512
	maxTemplateStrings = 16
)

// chunkTemplate is the last text chunk readChunk read in full, its value
// strings (not its keys) cut out. A chunk made of the same bytes around
// as many valid JSON strings is read by the full pass exactly as the
// template was but for those strings: the pass is a function of the
// bytes, and treats a value string the same whatever it holds (it
// validates it, and counts it when it is a text). So it is a text chunk
// whose texts are its strings at the template's texts, found with a
// comparison of each run of bytes between strings and a scan of each
// string.
type chunkTemplate struct {
	fixed []byte                    // the chunk but its value strings
	cuts  [maxTemplateStrings]int32 // value string k was at fixed[cuts[k]]
	n     int                       // value strings
	// texts are the value strings the full pass counted, in its order.
	texts [maxTemplateStrings]uint8
	nt    int
	ok    bool
}

// match reports whether data is the template around n valid JSON
// strings, and sets at[k] to the span of string k (quotes included).
func (t *chunkTemplate) match(data []byte, at *[maxTemplateStrings]span) bool {
	i, f := 0, 0 // in data, in fixed
	var sc jsonscan.Scanner
	sc.ResetBytes(data)
	for k := range t.n {
		run := t.fixed[f:t.cuts[k]]
		if len(data)-i < len(run)+2 || !bytes.Equal(data[i:i+len(run)], run) || data[i+len(run)] != '"' {
			return false
		}
		i, f = i+len(run), int(t.cuts[k])
		sc.Seek(i)
		if sc.Str(); sc.Err() != nil {
			return false
		}
		at[k], i = span{i, sc.Pos()}, sc.Pos()
	}
	return bytes.Equal(data[i:], t.fixed[f:])
}

// set makes data, the text chunk p read, the template, unless it holds
// more value strings than maxTemplateStrings or more bytes around them
// than maxTemplateBytes.
func (t *chunkTemplate) set(data []byte, p *chunkParser) {
	t.ok = false
	if p.nstr > maxTemplateStrings {
		return
	}
	size := len(data)
	for _, sp := range p.strs[:p.nstr] {
		size -= sp.end - sp.start
	}
	if size > maxTemplateBytes {
		return
	}
	t.fixed, t.n, t.nt = t.fixed[:0], p.nstr, 0
	prev := 0
	for k, sp := range p.strs[:p.nstr] {
		t.fixed = append(t.fixed, data[prev:sp.start]...)
		t.cuts[k], prev = int32(len(t.fixed)), sp.end
	}
	t.fixed = append(t.fixed, data[prev:]...)
	for _, sp := range p.spans[:p.n] {
		if sp.end == sp.start {
			continue
		}
		// A text is a value string: find which (strings are in order).
		k := 0
		for k < p.nstr && p.strs[k].start != sp.start {
			k++
		}
		if k == p.nstr || t.nt == maxTemplateStrings {
			return
		}
		t.texts[t.nt] = uint8(k)
		t.nt++
	}
	t.ok = true
}

// reset drops the template.
func (t *chunkTemplate) reset() { t.ok = false }
