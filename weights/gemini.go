package weights

import (
	"encoding/json"
	"errors"
	"math"
	"strings"

	"github.com/sluicehq/sluice/internal/jsonscan"
)

// Google's published figures for the Gemini API (ai.google.dev, "Understand
// and count tokens", as of 2026-12): an image whose sides are both at most
// 384 pixels costs 258 tokens, a larger one is cut into tiles of 768×768
// pixels at 258 tokens each.
const (
	geminiImageTile  = 258
	geminiSmallImage = 384
	geminiTileSide   = 768
)

// The members each object of a generateContent request is read for, in
// both spellings the API accepts (proto3 JSON takes the lowerCamelCase
// name and the original snake_case one): a value the estimate reads
// cannot hide under the other spelling, and a request that spells one
// member both ways is refused (see geminiAliases).
var (
	geminiRequestFields  = fields(true, "contents", "systemInstruction", "system_instruction", "tools", "generationConfig", "generation_config", "cachedContent", "cached_content")
	geminiContentFields  = fields(true, "role", "parts")
	geminiPartFields     = fields(true, "text", "inlineData", "inline_data", "fileData", "file_data", "functionCall", "function_call", "functionResponse", "function_response", "executableCode", "executable_code", "codeExecutionResult", "code_execution_result", "thoughtSignature", "thought_signature")
	geminiBlobFields     = fields(true, "mimeType", "mime_type", "data")
	geminiCallFields     = fields(true, "id", "name", "args", "response")
	geminiToolFields     = fields(true, "functionDeclarations", "function_declarations")
	geminiFunctionFields = fields(true, "name", "description", "parameters", "parametersJsonSchema", "parameters_json_schema", "response", "responseJsonSchema", "response_json_schema")
	geminiConfigFields   = fields(true, "maxOutputTokens", "max_output_tokens", "candidateCount", "candidate_count")
)

// geminiAliases maps each snake_case member name to its lowerCamelCase
// spelling, the name the walk switches on.
var geminiAliases = map[string]string{
	"system_instruction": "systemInstruction", "generation_config": "generationConfig", "cached_content": "cachedContent",
	"inline_data": "inlineData", "file_data": "fileData", "function_call": "functionCall", "function_response": "functionResponse",
	"executable_code": "executableCode", "code_execution_result": "codeExecutionResult", "thought_signature": "thoughtSignature",
	"mime_type": "mimeType", "function_declarations": "functionDeclarations", "parameters_json_schema": "parametersJsonSchema",
	"response_json_schema": "responseJsonSchema", "max_output_tokens": "maxOutputTokens", "candidate_count": "candidateCount",
}

// errBothSpellings refuses a member spelled both ways in one object.
var errBothSpellings = errors.New("given in both its camelCase and its snake_case spelling")

// gnext is next for the objects of a generateContent request: it returns
// the lowerCamelCase name of the member, and refuses a member whose other
// spelling the object already had.
func (w *walker) gnext(o *object) (string, bool) {
	name, ok := w.next(o)
	if !ok {
		return "", false
	}
	camel, snake := name, ""
	if c, isSnake := geminiAliases[name]; isSnake {
		camel, snake = c, name
	} else {
		for s, c := range geminiAliases {
			if c == name {
				snake = s
				break
			}
		}
	}
	if snake != "" {
		other := snake
		if name == snake {
			other = camel
		}
		if i := o.fields.index(other); i >= 0 && o.seen&(1<<i) != 0 {
			w.fail(join(o.path, camel), errBothSpellings)
		}
	}
	return camel, true
}

// EstimateModel is EstimateEndpoint for an API whose model is named by
// the request's path rather than its body: Gemini's generateContent
// ([EndpointGenerateContent]), whose path is
// /v1beta/models/{model}:generateContent, and Bedrock's Converse
// ([EndpointConverse]), /model/{modelId}/converse. model is the path's model,
// validated by the caller; it names the tokenizer, the default output
// reservation and the price. For any other endpoint model must be empty
// (the body names it), else the error matches [ErrUnsupportedEndpoint].
func (e *Estimator) EstimateModel(ep Endpoint, model string, body []byte) (Estimate, error) {
	return e.estimate(ep, model, nil, body)
}

// EstimateAs is EstimateEndpoint for a request that runs another model
// than the one its body names: an Azure OpenAI deployment's, whose name
// the path or the body's model field gives. as is given the body's
// model ("" when it names none) once the body is read, before any text
// is counted, and returns the model the request runs, which names the
// tokenizer, the default output reservation and the price, and is the
// estimate's Model; an error of as is returned as is. The endpoint must
// name its model in the body (not [EndpointGenerateContent]), else the
// error matches [ErrUnsupportedEndpoint].
func (e *Estimator) EstimateAs(ep Endpoint, body []byte, as func(named string) (string, error)) (Estimate, error) {
	return e.estimate(ep, "", as, body)
}

// geminiWalk reads a generateContent request: contents (each a message
// of the chat format: its role and its parts), systemInstruction (a
// content), tools (function declarations as their JSON text, other tools
// by size) and generationConfig's maxOutputTokens and candidateCount
// (the output reservation, as max_tokens and n are). A request naming a
// cachedContent is refused: the cached prompt is stored upstream, beyond
// what an estimate can see, and can be larger than the plausibility
// bound of the settlement.
func (w *walker) geminiWalk() {
	w.model, w.messages, w.lim = jstring{raw: w.pathModel}, 0, limits{}
	sc := &w.sc
	if sc.Peek() != '{' {
		w.fail("", errors.New("want a JSON object"))
		return
	}
	var o object
	w.begin(&o, geminiRequestFields, "")
	for {
		name, ok := w.gnext(&o)
		if !ok {
			break
		}
		switch name {
		case "contents":
			if !w.container('[', name, "an array") {
				break
			}
			sc.Open()
			for n := 0; sc.More(&n, ']'); {
				w.messages++
				w.geminiContent(name)
			}
		case "systemInstruction":
			w.geminiContent(name)
		case "tools":
			w.geminiTools()
		case "generationConfig":
			w.geminiConfig()
		case "cachedContent":
			if v := w.str("", name); v.raw != "" {
				w.fail(name, errors.New("cached contents are not supported by this gateway: their size cannot be priced before the call"))
			}
		}
	}
	w.t.add(replyPriming)
	sc.End()
}

// geminiContent prices a Content: its role and parts, as a message of
// the chat format.
func (w *walker) geminiContent(path string) {
	w.t.add(tokensPerMessage)
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, geminiContentFields, path)
	for {
		name, ok := w.gnext(&o)
		if !ok {
			return
		}
		if name == "role" {
			w.text(path, name)
			continue
		}
		pp := path + ".parts"
		if !w.container('[', pp, "an array") {
			continue
		}
		w.sc.Open()
		for n := 0; w.sc.More(&n, ']'); {
			w.geminiPart(pp)
		}
	}
}

// geminiPart prices one Part: text as text; a function call or response
// as its name and the JSON text of its arguments or response; inline
// data that is an image of a size its header tells by Gemini's tiles
// (see GeminiImageTokens), any other inline data (audio, video, PDF, an
// image of unknown size) by size, one token per four bytes of its
// base64 text, which prices every medium the API takes above what it
// bills; code and its results, and a thought signature, by size. A part
// holding fileData is refused: the file lives upstream and its size,
// which can be an hour of video, cannot be priced before the call.
func (w *walker) geminiPart(path string) {
	if _, ok := w.pricedObject(path); !ok {
		return
	}
	var o object
	w.begin(&o, geminiPartFields, path)
	for {
		name, ok := w.gnext(&o)
		if !ok {
			return
		}
		switch name {
		case "text":
			w.text(path, name)
		case "inlineData":
			w.geminiBlob(join(path, name))
		case "fileData":
			w.fail(join(path, name), errors.New("files by URI are not supported by this gateway: their size cannot be priced before the call; send the data inline"))
			w.sc.Skip()
		case "functionCall", "functionResponse":
			w.geminiCall(join(path, name))
		default: // executableCode, codeExecutionResult, thoughtSignature
			w.bySize()
		}
	}
}

// geminiBlob prices inline data (see geminiPart).
func (w *walker) geminiBlob(path string) {
	if !w.container('{', path, "an object") {
		return
	}
	var mime, data jstring
	var o object
	w.begin(&o, geminiBlobFields, path)
	for {
		name, ok := w.gnext(&o)
		if !ok {
			break
		}
		if name == "mimeType" {
			mime = w.str(path, name)
		} else {
			data = w.str(path, name)
		}
	}
	if w.t.mute || w.t.mode != sizeText {
		return
	}
	tokens := bytesTokens(len(data.raw))
	if strings.HasPrefix(w.decode(mime), "image/") && w.t.imageHeaders < maxImageHeaders {
		w.t.imageHeaders++
		if width, height, ok := base64ImageSize(w.decode(data)); ok {
			tokens = GeminiImageTokens(width, height)
		}
	}
	w.t.add(tokens)
	w.t.images++
}

// GeminiImageTokens returns the price, in tokens, of a w×h image in the
// Gemini API: 258 when both sides are at most 384 pixels, else 258 per
// tile of 768×768 pixels the image covers.
func GeminiImageTokens(w, h int) int64 {
	if w <= 0 || h <= 0 {
		return 0
	}
	if w <= geminiSmallImage && h <= geminiSmallImage {
		return geminiImageTile
	}
	tiles := int64(math.Ceil(float64(w)/geminiTileSide)) * int64(math.Ceil(float64(h)/geminiTileSide))
	return satMul(tiles, geminiImageTile)
}

// geminiCall prices a functionCall or functionResponse: its id and name
// as text, its args or response as their JSON text.
func (w *walker) geminiCall(path string) {
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, geminiCallFields, path)
	for {
		name, ok := w.gnext(&o)
		if !ok {
			return
		}
		switch name {
		case "id", "name":
			w.text(path, name)
		default:
			w.rawText(w.raw())
		}
	}
}

// geminiTools prices the tools: each function declaration as its name,
// description and schemas' JSON text (the tools format's fixed costs of
// OpenAI's chat format are not Gemini's), any other tool (Google Search,
// code execution, URL context) by size.
func (w *walker) geminiTools() {
	if !w.container('[', "tools", "an array") {
		return
	}
	w.sc.Open()
	for n := 0; w.sc.More(&n, ']'); {
		start, ok := w.pricedObject("tools")
		if !ok {
			continue
		}
		declared := false
		var o object
		w.begin(&o, geminiToolFields, "tools")
		for {
			if _, ok := w.gnext(&o); !ok {
				break
			}
			declared = true
			w.geminiFunctions("tools.functionDeclarations")
		}
		if !declared {
			w.t.add(bytesTokens(w.sc.Pos() - start))
		}
	}
}

// geminiFunctions prices an array of function declarations.
func (w *walker) geminiFunctions(path string) {
	if !w.container('[', path, "an array") {
		return
	}
	w.sc.Open()
	for n := 0; w.sc.More(&n, ']'); {
		if !w.container('{', path, "an object") {
			continue
		}
		var o object
		w.begin(&o, geminiFunctionFields, path)
		for {
			name, ok := w.gnext(&o)
			if !ok {
				break
			}
			switch name {
			case "name", "description":
				w.text(path, name)
			default: // the schemas
				w.rawText(w.raw())
			}
		}
	}
}

// geminiConfig reads generationConfig's output limits.
func (w *walker) geminiConfig() {
	const path = "generationConfig"
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, geminiConfigFields, path)
	for {
		name, ok := w.gnext(&o)
		if !ok {
			return
		}
		if name == "maxOutputTokens" {
			w.lim.maxOutputTokens = w.int(path, name)
		} else if w.lim.n = w.int(path, name); w.lim.n.set && w.lim.n.v < 1 {
			w.fail(join(path, name), errors.New("must be >= 1"))
		}
	}
}

// readGeminiUsage reads a Gemini usageMetadata object, given as its JSON
// text: the prompt is promptTokenCount (which includes
// cachedContentTokenCount) plus toolUsePromptTokenCount, the output
// candidatesTokenCount plus thoughtsTokenCount (thinking is billed as
// output), the cached part cachedContentTokenCount and the reasoning part
// thoughtsTokenCount. The API leaves out a count of zero, so an absent
// output count is zero once the object has a prompt count; and when
// totalTokenCount says more than the parts add up to, the output is the
// rest of the total, so a report is never charged below its own total.
func readGeminiUsage(v string) UsageReport {
	var s jsonscan.Scanner
	s.Reset(v)
	if s.Peek() != '{' {
		return malformedReport
	}
	var prompt, toolUse, candidates, thoughts, cached, total string
	s.Open()
	for n := 0; s.More(&n, '}'); {
		switch memberKey(&s) {
		case "promptTokenCount":
			prompt = s.Value()
		case "toolUsePromptTokenCount":
			toolUse = s.Value()
		case "candidatesTokenCount":
			candidates = s.Value()
		case "thoughtsTokenCount":
			thoughts = s.Value()
		case "cachedContentTokenCount":
			cached = s.Value()
		case "totalTokenCount":
			total = s.Value()
		default:
			s.Skip()
		}
	}
	if s.Err() != nil {
		return malformedReport
	}
	var rep UsageReport
	in, ist := parseCount(prompt)
	tool, tst := parseCount(toolUse)
	rep.Input = ist
	if ist == FallbackNone && tst != FallbackNone && tst != FallbackMissing {
		rep.Input = tst
	}
	if rep.Input == FallbackNone {
		rep.Usage.InputTokens = satAdd(in, tool)
	}
	cand, cst := parseCount(candidates)
	thought, hst := parseCount(thoughts)
	tot, totst := parseCount(total)
	switch {
	case cst != FallbackNone && cst != FallbackMissing:
		rep.Output = cst
	case hst != FallbackNone && hst != FallbackMissing:
		rep.Output = hst
	case cst == FallbackMissing && hst == FallbackMissing && totst == FallbackMissing && rep.Input != FallbackNone:
		rep.Output = FallbackMissing
	default:
		rep.Usage.OutputTokens = satAdd(cand, thought)
		if totst == FallbackNone && rep.Input == FallbackNone && tot > satAdd(rep.Usage.InputTokens, rep.Usage.OutputTokens) {
			rep.Usage.OutputTokens = tot - rep.Usage.InputTokens
		}
	}
	if rep.Input == FallbackMissing && rep.Output != FallbackNone {
		return noReport
	}
	rep.Usage.CachedInputTokens = detailCount(cached)
	rep.Usage.ReasoningTokens = detailCount(thoughts)
	return rep
}

// detailCount reads a count that is part of another, or 0 when it is not
// usable.
func detailCount(raw string) int64 {
	if n, st := parseCount(raw); st == FallbackNone {
		return n
	}
	return 0
}

// geminiCandidate is what a Gemini stream chunk's candidate says: its
// parts' text and function calls, and its finish reason on the last
// chunk.
type geminiCandidate struct {
	Content struct {
		Parts []struct {
			Text         jstr `json:"text"`
			FunctionCall *struct {
				Name jstr            `json:"name"`
				Args json.RawMessage `json:"args"`
			} `json:"functionCall"`
		} `json:"parts"`
	} `json:"content"`
	FinishReason string `json:"finishReason"`
}

// geminiUsage is a usageMetadata object (see readGeminiUsage). It decodes
// any JSON value without failing.
type geminiUsage struct{ rep UsageReport }

// UnmarshalJSON implements json.Unmarshaler; it never fails.
func (g *geminiUsage) UnmarshalJSON(b []byte) error {
	g.rep = readGeminiUsage(view(b))
	return nil
}
