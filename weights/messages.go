package weights

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"unsafe"
)

// Anthropic's published figures for the Messages API (docs.claude.com:
// "Tool use", "Vision", "PDF support"), used where Claude's tokenizer
// cannot be run.
const (
	// claudeToolPrompt is the system prompt the API adds to a request
	// with tools: 346 tokens for the Claude 4 and 3.7 models with
	// tool_choice auto or none (313 with any or tool), the largest
	// figure of the current models.
	claudeToolPrompt = 346
	// claudeImageMax is the price of an image of unknown size: an image
	// is scaled down to about 1.15 megapixels (1092×1092 costs 1,590
	// tokens), so no image costs much more.
	claudeImageMax = 1600
	// claudePDFPage is the price of one PDF page: its text (1,500 to
	// 3,000 tokens a page, as published) and its image.
	claudePDFPage = 3000 + claudeImageMax
	// claudeTokenScale multiplies the cl100k_base count of Claude text.
	// Claude 3 and later use a tokenizer Anthropic does not publish; its
	// guidance is that OpenAI's tokenizers undercount Claude's tokens by
	// 15 to 20% on typical text, and more on code and other languages.
	// Against the last published Claude tokenizer the factor measures
	// 1.05 (within 0.5% in total, 5.2% per text on average), and this one
	// overcounts it by 14.7% (TestClaudeTokenScale): over rather than
	// under, as the settlement refunds an overcount.
	claudeTokenScale = 1.2
)

// maxBlockDepth bounds the nesting of content blocks: a document in a
// tool result, its content source's blocks (the API nests no deeper).
// A block's content is checked where it stands and priced once its type
// is known, so each level may be walked twice: the bound keeps a hostile
// body's cost linear in its size.
const maxBlockDepth = 4

// blockPath is the paths of what a block at one path holds.
type blockPath struct{ content, source, sourceContent string }

// blockPaths maps the path of every block a request can hold (nesting is
// bounded) to the paths of what it holds, so that walking a block builds
// no string.
var blockPaths = func() map[string]blockPath {
	m := map[string]blockPath{}
	var add func(path string, depth int)
	add = func(path string, depth int) {
		p := blockPath{content: path + ".content", source: path + ".source", sourceContent: path + ".source.content"}
		m[path] = p
		if depth < maxBlockDepth {
			add(p.content, depth+1)
			add(p.sourceContent, depth+1)
		}
	}
	add("system", 1)
	add("messages.content", 1)
	return m
}()

// The members each object of a Messages API request is read for.
var (
	claudeMessageFields   = fields(true, "role", "content")
	claudeBlockFields     = fields(true, "type", "text", "id", "tool_use_id", "name", "input", "content", "thinking", "source", "title", "context", "file_id")
	claudeSourceFields    = fields(true, "type", "media_type", "data", "url", "file_id", "content")
	claudeToolFields      = fields(true, "type", "name", "description", "input_schema")
	claudeContainerFields = fields(true, "id", "skills")
	claudeSkillFields     = fields(true, "type", "skill_id")
)

// claudeContainer reads a Messages API container: the id of a code
// execution container (a string, or an object's id), a reference, and
// the skills loaded into it, of which those uploaded to the account (any
// type but "anthropic") are references.
func (w *walker) claudeContainer() {
	const path = "container"
	switch c := w.sc.Peek(); c {
	case '"', 'n':
		w.ref(RefContainer, path, w.str("", path))
		return
	case '{':
	default:
		w.wrongType(path, "a string or an object", c)
		w.sc.Skip()
		return
	}
	var o object
	w.begin(&o, claudeContainerFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			return
		}
		if name == "id" {
			w.ref(RefContainer, "container.id", w.str(path, name))
			continue
		}
		const skills = "container.skills"
		if !w.container('[', skills, "an array") {
			continue
		}
		w.sc.Open()
		for n := 0; w.sc.More(&n, ']'); {
			if !w.container('{', skills, "an object") {
				continue
			}
			var typ, id jstring
			var so object
			w.begin(&so, claudeSkillFields, skills)
			for {
				f, ok := w.next(&so)
				if !ok {
					break
				}
				if f == "type" {
					typ = w.str(skills, f)
				} else {
					id = w.str(skills, f)
				}
			}
			if w.decode(typ) != "anthropic" {
				w.ref(RefSkill, "container.skills.skill_id", id)
			}
		}
	}
}

// system prices the system prompt: a string or an array of text blocks.
func (w *walker) system() {
	if c := w.sc.Peek(); c == 'n' {
		w.sc.Literal()
		return
	}
	w.t.add(tokensPerMessage)
	w.content("system")
}

// claudeMessages prices the messages: each one a message of the chat
// format, its role and its content (a Converse request's content
// blocks on EndpointConverse).
func (w *walker) claudeMessages() {
	if !w.container('[', "messages", "an array") {
		return
	}
	w.sc.Open()
	for n := 0; w.sc.More(&n, ']'); {
		w.messages++
		w.t.add(tokensPerMessage)
		if !w.container('{', "messages", "an object") {
			continue
		}
		var o object
		w.begin(&o, claudeMessageFields, "messages")
		for {
			name, ok := w.next(&o)
			if !ok {
				break
			}
			switch {
			case name == "role":
				w.text("messages", name)
			case w.ep == EndpointConverse:
				w.converseBlocks("messages.content")
			default:
				w.content("messages.content")
			}
		}
	}
}

// claudeSource is the source of an image or a document.
type claudeSource struct {
	typ, data jstring
	content   span // a content source's blocks, priced once known
}

// block prices one content block: text, image, document, tool_use,
// tool_result and thinking as the API reads them; any other block
// (redacted thinking, search results, server tool results, block types
// added after this package was written) by size, see bytesTokens. A
// block's type may come after its content, so nested content is checked
// where it stands and priced once the type is known.
func (w *walker) block(path string) {
	start, ok := w.pricedObject(path)
	if !ok {
		return
	}
	if !w.nest(path) {
		return
	}
	defer func() { w.blocks-- }()
	paths := blockPaths[path]
	var typ, text, id, useID, name, thinking, title, context jstring
	var input, content span
	var src claudeSource
	typed := false
	var o object
	w.begin(&o, claudeBlockFields, path)
	for {
		f, ok := w.next(&o)
		if !ok {
			break
		}
		switch f {
		case "type":
			typ, typed = w.str(path, f), true
		case "text":
			text = w.str(path, f)
		case "id":
			id = w.str(path, f)
		case "tool_use_id":
			useID = w.str(path, f)
		case "name":
			name = w.str(path, f)
		case "thinking":
			thinking = w.str(path, f)
		case "title":
			title = w.str(path, f)
		case "context":
			context = w.str(path, f)
		case "input":
			input = w.raw()
		case "content":
			content = w.deferred(typed && w.decode(typ) == "tool_result", func() { w.content(paths.content) })
		case "source":
			w.source(&src, paths.source, paths.sourceContent)
		case "file_id": // a container_upload block
			w.ref(RefFile, path+".file_id", w.str(path, f))
		}
	}
	switch w.decode(typ) {
	case "text":
		w.textOf(text)
	case "thinking":
		w.textOf(thinking)
	case "tool_use", "server_tool_use":
		w.textOf(id)
		w.textOf(name)
		w.rawText(input)
	case "tool_result":
		w.textOf(useID)
		w.priceSpan(content, func() { w.content(paths.content) })
	case "image":
		w.claudeImage(&src)
	case "document":
		w.textOf(title)
		w.textOf(context)
		w.document(&src, paths.sourceContent)
	default:
		w.t.add(bytesTokens(w.sc.Pos() - start))
	}
}

// nest enters the content block at path, whose '{' was read, unless it
// is nested more than maxBlockDepth deep: it is then refused and skipped,
// and nest returns false. The caller leaves the block with w.blocks--.
func (w *walker) nest(path string) bool {
	if w.blocks >= maxBlockDepth {
		w.fail(path, fmt.Errorf("content blocks nested more than %d deep", maxBlockDepth))
		w.sc.Skip()
		return false
	}
	w.blocks++
	return true
}

// raw reads any value and returns its span.
func (w *walker) raw() span {
	w.sc.SkipSpace()
	start := w.sc.Pos()
	w.sc.Skip()
	return span{start, w.sc.Pos()}
}

// rawText prices the JSON text of a value as text (a tool call's input,
// a tool's input schema), as the model reads it.
func (w *walker) rawText(s span) {
	if s.end > s.start && w.sc.Err() == nil {
		w.t.text(w.sc.Src()[s.start:s.end])
	}
}

// source reads the source of an image or a document; a content source's
// blocks are at contentPath.
func (w *walker) source(src *claudeSource, path, contentPath string) {
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, claudeSourceFields, path)
	for {
		f, ok := w.next(&o)
		if !ok {
			return
		}
		switch f {
		case "type":
			src.typ = w.str(path, f)
		case "data":
			src.data = w.str(path, f)
		case "content":
			src.content = w.deferred(false, func() { w.content(contentPath) })
		case "file_id":
			w.ref(RefFile, path+".file_id", w.str(path, f))
		default: // media_type, url
			w.str(path, f)
		}
	}
}

// claudeImage prices an image by Anthropic's formula: width × height / 750
// tokens after scaling to fit 1568 pixels on the long edge, at most
// claudeImageMax. The size of a base64 image is read from its header
// (for the first images of a request, as with OpenAI's images); an image
// behind a URL or a file id costs claudeImageMax.
func (w *walker) claudeImage(src *claudeSource) {
	if w.t.mute || w.t.mode != sizeText {
		return
	}
	tokens := int64(claudeImageMax)
	if w.decode(src.typ) == "base64" && w.t.imageHeaders < maxImageHeaders {
		w.t.imageHeaders++
		if width, height, ok := base64ImageSize(w.decode(src.data)); ok {
			tokens = ClaudeImageTokens(width, height)
		}
	}
	w.t.add(tokens)
	w.t.images++
}

// ClaudeImageTokens returns the price, in tokens, of a w×h image in
// Anthropic's Messages API: w × h / 750 after scaling the image to fit
// 1568 pixels on its long edge, rounded up, and at most 1,600 (the size
// the API scales larger images down to).
func ClaudeImageTokens(w, h int) int64 {
	if w <= 0 || h <= 0 {
		return 0
	}
	fw, fh := fit(float64(w), float64(h), 1568)
	return min(int64(math.Ceil(fw*fh/750)), claudeImageMax)
}

// document prices a document block's source: plain text as text, a
// content source as its blocks, a base64 PDF at claudePDFPage per page
// (its pages counted in the file, else by size), and a document behind a
// URL or a file id not at all (its size is unknown: the settlement
// charges it).
func (w *walker) document(src *claudeSource, contentPath string) {
	switch w.decode(src.typ) {
	case "text":
		w.textOf(src.data)
	case "content":
		w.priceSpan(src.content, func() { w.content(contentPath) })
	case "base64":
		if w.t.mute || w.t.mode != sizeText {
			return
		}
		var pages int64
		if w.buf, pages = pdfPages(w.decode(src.data), w.buf); pages > 0 {
			w.t.add(satMul(pages, claudePDFPage))
		} else {
			w.t.add(bytesTokens(len(src.data.raw)))
		}
	}
}

// pdfPages counts the page objects of a base64-encoded PDF ("/Type
// /Page", not "/Pages"), decoding it 24 KiB at a time into buf. It
// returns 0 when it finds none (pages kept in compressed object streams),
// and what it found before a part that is not base64.
func pdfPages(data string, buf []byte) ([]byte, int64) {
	const chunk = 32 << 10 // encoded bytes, a multiple of 4
	const carry = 32       // longer than a marker with its white space
	buf = slices.Grow(buf[:0], carry+base64.StdEncoding.DecodedLen(chunk))[:carry]
	keep := 0 // decoded bytes carried over from the previous chunk
	var pages int64
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		n, err := base64.StdEncoding.Decode(buf[keep:cap(buf)], unsafe.Slice(unsafe.StringData(data[off:end]), end-off))
		b := buf[:keep+n]
		if err != nil || end == len(data) {
			return buf, pages + countPageObjects(b, len(b))
		}
		limit := max(len(b)-carry, 0)
		pages += countPageObjects(b, limit)
		keep = copy(buf[:cap(buf)], b[limit:])
	}
	return buf, pages
}

// countPageObjects counts the markers "/Type /Page" and "/Type/Page" not
// followed by "s" that start in b before limit.
func countPageObjects(b []byte, limit int) int64 {
	var n int64
	for at := 0; ; {
		i := bytes.Index(b[at:], []byte("/Type"))
		if i < 0 || at+i >= limit {
			return n
		}
		at += i + len("/Type")
		rest := bytes.TrimLeft(b[at:], " \r\n\t")
		if p, ok := bytes.CutPrefix(rest, []byte("/Page")); ok && (len(p) == 0 || p[0] != 's') {
			n++
		}
	}
}

// claudeTools prices tool definitions: a client tool as its name,
// description and input schema's JSON text; a server tool (a type other
// than "custom") by size. A request with tools also pays for the tool-use
// system prompt the API adds, once.
func (w *walker) claudeTools() {
	if !w.container('[', "tools", "an array") {
		return
	}
	w.sc.Open()
	for n := 0; w.sc.More(&n, ']'); {
		if n == 1 {
			w.t.add(claudeToolPrompt)
		}
		start, ok := w.pricedObject("tools")
		if !ok {
			continue
		}
		var typ, name, desc jstring
		var schema span
		var o object
		w.begin(&o, claudeToolFields, "tools")
		for {
			f, ok := w.next(&o)
			if !ok {
				break
			}
			switch f {
			case "type":
				typ = w.str("tools", f)
			case "name":
				name = w.str("tools", f)
			case "description":
				desc = w.str("tools", f)
			case "input_schema":
				schema = w.raw()
			}
		}
		if t := w.decode(typ); t == "" || t == "custom" {
			w.textOf(name)
			w.textOf(desc)
			w.rawText(schema)
		} else {
			w.t.add(bytesTokens(w.sc.Pos() - start))
		}
	}
}
