package weights

import "unicode/utf8"

// sampleWindows is the number of windows a sampled estimate tokenises,
// spread evenly over the text so that a system prompt, a pasted document and
// a question in another language all weigh in.
const sampleWindows = 8

// sampleCount estimates the tokens of pieces (total bytes in all) by
// tokenising sampleWindows windows of budget/sampleWindows bytes, centred at
// evenly spaced offsets of the concatenated text, and scaling the tokens per
// byte found to the whole. Windows are aligned to white space so that they
// split the text where the tokenizer would: a window starts at a space (the
// space belongs to the next word's token) and ends before one.
func sampleCount(c Counter, pieces []string, total, budget int) int64 {
	w := max(budget/sampleWindows, 64)
	var sBytes, sTokens int64
	pi, base := 0, 0 // current piece and the offset where it starts
	for k := range sampleWindows {
		centre := int((int64(2*k+1) * int64(total)) / (2 * sampleWindows))
		for pi < len(pieces)-1 && base+len(pieces[pi]) <= centre {
			base += len(pieces[pi])
			pi++
		}
		p := pieces[pi]
		start := min(max(centre-base-w/2, 0), len(p))
		end := min(start+w, len(p))
		start = max(end-w, 0)
		win := alignWindow(p, start, end)
		if win == "" {
			continue
		}
		sBytes += int64(len(win))
		sTokens += int64(c.Count(win))
	}
	if sBytes == 0 {
		// Nothing sampleable (no piece had a complete word or character in
		// a window): count everything.
		var n int64
		for _, p := range pieces {
			n += int64(c.Count(p))
		}
		return n
	}
	return (sTokens*int64(total) + sBytes/2) / sBytes
}

// alignWindow narrows p[start:end] to white-space boundaries, or to rune
// boundaries when the window holds no white space near its ends (scripts
// written without spaces, base64).
func alignWindow(p string, start, end int) string {
	if start > 0 {
		s := start
		for s < end && !isSpace(p[s]) && s-start < (end-start)/4 {
			s++
		}
		if s < end && isSpace(p[s]) {
			start = s
		} else {
			for start < end && !utf8.RuneStart(p[start]) {
				start++
			}
		}
	}
	if end < len(p) {
		e := end
		for e > start && !isSpace(p[e]) && end-e < (end-start)/4 {
			e--
		}
		if e > start && isSpace(p[e]) {
			end = e
		} else {
			for end > start && !utf8.RuneStart(p[end]) {
				end--
			}
		}
	}
	return p[start:end]
}

func isSpace(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }
