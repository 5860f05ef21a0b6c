package weights

import "bytes"

// maxTemplateBytes bounds what a chunkTemplate holds: the bytes of a
// chunk around its text value. A stream's chunks differ, as a rule, only
// in their text (the id, model, creation time and fingerprint repeat),
// and their other bytes are a few hundred.
const maxTemplateBytes = 512

// chunkTemplate is the last text chunk readChunk read in full that had
// one text value (a non-null string), that value cut out. A chunk made of
// the same bytes before and after, around one valid JSON string, is read
// by the full pass exactly as the template was, but for that string: the
// pass is a function of the bytes, and treats a string in that place the
// same whatever it holds. So it is a text chunk whose one text is that
// string, found with two comparisons and a scan of the string.
type chunkTemplate struct {
	b  []byte // the chunk less its text value: b[:at] came before it, b[at:] after
	at int
	ok bool
}

// match reports whether data is the template around one valid JSON
// string, and returns the string's span in data (quotes included).
func (t *chunkTemplate) match(data []byte) (span, bool) {
	if !t.ok || len(data) < len(t.b)+2 {
		return span{}, false
	}
	pre, post := t.b[:t.at], t.b[t.at:]
	start, end := len(pre), len(data)-len(post)
	if data[start] != '"' || !bytes.Equal(data[:start], pre) || !bytes.Equal(data[end:], post) || stringEnd(data[:end], start) != end {
		return span{}, false
	}
	return span{start, end}, true
}

// set makes data, a text chunk whose one text value is at sp, the
// template, unless its bytes around the value exceed maxTemplateBytes.
func (t *chunkTemplate) set(data []byte, sp span) {
	if len(data)-(sp.end-sp.start) > maxTemplateBytes {
		t.reset()
		return
	}
	t.b = append(append(t.b[:0], data[:sp.start]...), data[sp.end:]...)
	t.at, t.ok = sp.start, true
}

// reset drops the template.
func (t *chunkTemplate) reset() { t.ok = false }
