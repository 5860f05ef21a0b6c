package weights

import (
	"errors"
	"strings"
)

// The members each object of a Converse request is read for. A content
// block is a union: the one member it has names its kind, and a kind
// this package does not read is priced by size (see converseBlock).
var (
	converseRequestFields = fields(true, "messages", "system", "inferenceConfig", "toolConfig", "promptVariables")
	converseBlockFields   = fields(true, "text", "image", "document", "video", "toolUse", "toolResult", "json", "cachePoint")
	converseMediaFields   = fields(true, "format", "name", "source")
	converseSourceFields  = fields(true, "bytes", "text", "content", "s3Location")
	converseToolUseFields = fields(true, "toolUseId", "name", "input")
	converseResultFields  = fields(true, "toolUseId", "content", "status")
	converseConfigFields  = fields(true, "maxTokens")
	converseToolsFields   = fields(true, "tools")
	converseToolFields    = fields(true, "toolSpec")
	converseSpecFields    = fields(true, "name", "description", "inputSchema")
)

// errS3 refuses content stored in S3: its size cannot be priced before
// the call.
var errS3 = errors.New("content in S3 is not supported by this gateway: its size cannot be priced before the call; send the bytes inline")

// converseWalk reads a Converse request: messages (each a message of the
// chat format: its role and its content blocks), system (blocks), the
// tools of toolConfig, and inferenceConfig's maxTokens (the output
// reservation). promptVariables, which fill a prompt stored upstream,
// are priced by size; the other members (additionalModelRequestFields,
// guardrailConfig, requestMetadata...) are not prompt text.
func (w *walker) converseWalk() {
	w.model, w.messages, w.lim = jstring{raw: w.pathModel}, 0, limits{}
	if w.sc.Peek() != '{' {
		w.fail("", errors.New("want a JSON object"))
		return
	}
	var o object
	w.begin(&o, converseRequestFields, "")
	for {
		name, ok := w.next(&o)
		if !ok {
			break
		}
		switch name {
		case "messages":
			w.claudeMessages()
		case "system":
			w.t.add(tokensPerMessage)
			w.converseBlocks("system")
		case "inferenceConfig":
			w.converseConfig()
		case "toolConfig":
			w.converseTools()
		default: // promptVariables
			w.bySize()
		}
	}
	w.t.add(replyPriming)
	w.sc.End()
}

// converseBlocks prices an array of content blocks.
func (w *walker) converseBlocks(path string) {
	if !w.container('[', path, "an array") {
		return
	}
	w.sc.Open()
	for n := 0; w.sc.More(&n, ']'); {
		w.converseBlock(path)
	}
}

// converseBlock prices one content block: text as text; an image by
// Anthropic's formula (see ClaudeImageTokens, at most 1,600 tokens;
// Amazon's and Meta's models bill less); a document as its name and its
// text, its blocks, or its bytes (a PDF at claudePDFPage per page, other
// bytes by size); a tool call as its id, name and input's JSON text; a
// tool result as its id and content blocks; a JSON block (in a tool
// result) as its JSON text; a cache point as nothing; any other block
// (video, guard content, reasoning, kinds added after this package was
// written) by size. Content in S3 is refused.
func (w *walker) converseBlock(path string) {
	if _, ok := w.pricedObject(path); !ok {
		return
	}
	if !w.nest(path) {
		return
	}
	defer func() { w.blocks-- }()
	var o object
	w.begin(&o, converseBlockFields, path)
	for {
		_, name, ok := w.member(&o)
		if !ok {
			return
		}
		p := join(path, name)
		switch name {
		case "text":
			w.text(path, name)
		case "image", "document", "video":
			w.converseMedia(p, name)
		case "toolUse":
			w.textAndJSON(p, converseToolUseFields, "input")
		case "toolResult":
			w.converseToolResult(p)
		case "json":
			w.rawText(w.raw())
		case "cachePoint":
			w.sc.Skip()
		default:
			w.bySize()
		}
	}
}

// converseMedia prices an image, a document or a video block (kind).
func (w *walker) converseMedia(path, kind string) {
	if !w.container('{', path, "an object") {
		return
	}
	var format, data, text jstring
	var o object
	w.begin(&o, converseMediaFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			break
		}
		switch name {
		case "format":
			format = w.str(path, name)
		case "name":
			w.text(path, name)
		default: // source
			data, text = w.converseSource(path + ".source")
		}
	}
	switch {
	case kind == "image" && data.raw != "":
		w.claudeImage(&claudeSource{typ: jstring{raw: "base64"}, data: data})
	case kind == "document" && data.raw != "" && w.decode(format) == "pdf":
		w.document(&claudeSource{typ: jstring{raw: "base64"}, data: data}, "")
	case kind == "document":
		w.textOf(text)
		w.t.add(bytesTokens(len(data.raw)))
	default:
		w.t.add(bytesTokens(len(data.raw)))
	}
}

// converseSource reads the source of a medium: its base64 bytes, its
// text; its content blocks (a document's) are priced where they stand.
func (w *walker) converseSource(path string) (data, text jstring) {
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, converseSourceFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			return
		}
		switch name {
		case "bytes":
			data = w.str(path, name)
		case "text":
			text = w.str(path, name)
		case "content":
			w.converseBlocks(path + ".content")
		default: // s3Location
			w.fail(join(path, name), errS3)
			w.sc.Skip()
		}
	}
}

// textAndJSON prices an object whose members fs are text, but for
// jsonName, a JSON value priced as its JSON text: a tool call (its id,
// name and input), a tool specification (its name, description and
// input schema).
func (w *walker) textAndJSON(path string, fs *fieldSet, jsonName string) {
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, fs, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			return
		}
		if name == jsonName {
			w.rawText(w.raw())
		} else {
			w.text(path, name)
		}
	}
}

// converseToolResult prices a tool result: its id and content blocks.
func (w *walker) converseToolResult(path string) {
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, converseResultFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			return
		}
		switch name {
		case "toolUseId":
			w.text(path, name)
		case "content":
			w.converseBlocks(path + ".content")
		default: // status
			w.str(path, name)
		}
	}
}

// converseConfig reads inferenceConfig's maxTokens.
func (w *walker) converseConfig() {
	const path = "inferenceConfig"
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, converseConfigFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			return
		}
		w.lim.maxTokens = w.int(path, name)
	}
}

// converseTools prices toolConfig's tools: a tool specification as its
// name, description and input schema's JSON text, any other entry (a
// cache point, a system tool) by size; a request with tools also pays
// once for the tool-use system prompt Claude adds (claudeToolPrompt, an
// overcount for the other models). toolChoice is not priced.
func (w *walker) converseTools() {
	const path = "toolConfig"
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, converseToolsFields, path)
	for {
		if _, ok := w.next(&o); !ok {
			return
		}
		const tp = path + ".tools"
		if !w.container('[', tp, "an array") {
			continue
		}
		w.sc.Open()
		for n := 0; w.sc.More(&n, ']'); {
			if n == 1 {
				w.t.add(claudeToolPrompt)
			}
			w.converseTool(tp)
		}
	}
}

// converseTool prices one entry of toolConfig.tools.
func (w *walker) converseTool(path string) {
	start, ok := w.pricedObject(path)
	if !ok {
		return
	}
	spec := false
	var o object
	w.begin(&o, converseToolFields, path)
	for {
		if _, ok := w.next(&o); !ok {
			break
		}
		spec = true
		w.textAndJSON(path+".toolSpec", converseSpecFields, "inputSchema")
	}
	if !spec {
		w.t.add(bytesTokens(w.sc.Pos() - start))
	}
}

// bySize reads any value and prices it by size (see bytesTokens).
func (w *walker) bySize() {
	s := w.raw()
	w.t.add(bytesTokens(s.end - s.start))
}

// bedrockRegions are the prefixes of Bedrock's cross-region inference
// profile ids ("us.anthropic.claude-sonnet-4-20250514-v1:0").
var bedrockRegions = []string{"us.", "us-gov.", "eu.", "apac.", "jp.", "au.", "ca.", "global."}

// bedrockProviders are the provider parts of Bedrock's model ids.
var bedrockProviders = []string{"anthropic.", "amazon.", "meta.", "mistral.", "cohere.", "ai21.", "deepseek.", "openai.", "qwen.", "writer.", "stability."}

// BedrockModel returns the provider's own name of an Amazon Bedrock model
// id, lower case: the region group of an inference profile ("us.",
// "eu.", "global."...), the provider ("anthropic.") and the version
// suffix ("-v1:0", "-v2:0:200k") taken off, so that
// "us.anthropic.claude-3-5-sonnet-20240620-v1:0" is
// "claude-3-5-sonnet-20240620", priced as the provider's model by its
// dated name. A name with no provider part of Bedrock's is returned
// lower-cased only.
func BedrockModel(id string) string {
	name := strings.ToLower(id)
	rest := name
	for _, r := range bedrockRegions {
		if s, ok := strings.CutPrefix(rest, r); ok {
			rest = s
			break
		}
	}
	found := false
	for _, p := range bedrockProviders {
		if s, ok := strings.CutPrefix(rest, p); ok {
			rest, found = s, true
			break
		}
	}
	if !found {
		return name
	}
	// The version: "-v<digits>", then ":<digits>" and a context-window
	// variant (":200k", ":mm").
	if i := strings.LastIndex(rest, "-v"); i > 0 && versionSuffix(rest[i+2:]) {
		rest = rest[:i]
	}
	return rest
}

// versionSuffix reports whether s, what follows "-v" at the end of a
// Bedrock model id, is a version: digits, then ":"-separated parts of
// letters and digits.
func versionSuffix(s string) bool {
	major, rest, _ := strings.Cut(s, ":")
	if major == "" || strings.Trim(major, "0123456789") != "" {
		return false
	}
	return strings.Trim(rest, "abcdefghijklmnopqrstuvwxyz0123456789:") == ""
}
