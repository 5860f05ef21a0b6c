package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strings"
)

// The chat format's fixed costs, from OpenAI's cookbook "How to count tokens
// with tiktoken" (num_tokens_from_messages and num_tokens_for_tools), which
// reproduce the API's prompt_tokens for gpt-3.5-turbo, gpt-4, gpt-4o and
// gpt-4o-mini.
const (
	tokensPerMessage = 3  // <|start|>{role}<|message|>...<|end|>
	tokensPerName    = 1  // a name field
	replyPriming     = 3  // every reply is primed with <|start|>assistant<|message|>
	toolPropInit     = 3  // start of a function's properties
	toolPropKey      = 3  // each property
	toolEnumInit     = -3 // a property with an enum
	toolEnumItem     = 3  // each enum value
	toolsEnd         = 12 // end of the tool definitions
	// toolInit (per function) is 7 for o200k_base and 10 for cl100k_base:
	// see model.toolInit.
)

// tally collects the text of one request and its fixed token costs, then
// counts the text exactly or, above the sampling threshold, from samples.
type tally struct {
	m      model
	pieces []string
	bytes  int
	fixed  int64
	images int
}

func (t *tally) text(s string) {
	if s != "" {
		t.pieces = append(t.pieces, s)
		t.bytes += len(s)
	}
}

// total returns the input tokens: fixed costs plus the counted text.
func (t *tally) total(threshold, sampleBytes int) (tokens int64, sampled bool) {
	var n int64
	if threshold >= 0 && t.bytes > threshold {
		n, sampled = sampleCount(t.m.counter, t.pieces, t.bytes, sampleBytes), true
	} else {
		for _, p := range t.pieces {
			n += int64(countText(t.m.counter, p))
		}
	}
	n += t.fixed
	if n < 0 {
		n = 0
	}
	return n, sampled
}

// limits are the output-limit fields shared by the request shapes. A field
// that is absent or null is nil.
type limits struct {
	MaxTokens           *int64 `json:"max_tokens"`
	MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	MaxOutputTokens     *int64 `json:"max_output_tokens"`
	N                   *int64 `json:"n"`
	BestOf              *int64 `json:"best_of"`
	Stream              *bool  `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
}

// output computes the output reservation: the first limit set, else def,
// times the number of choices (the larger of n and best_of) and prompts.
func (l *limits) output(ep Endpoint, def, prompts int64) (int64, error) {
	limit := def
	for _, f := range []struct {
		name string
		v    *int64
	}{{"max_completion_tokens", l.MaxCompletionTokens}, {"max_tokens", l.MaxTokens}, {"max_output_tokens", l.MaxOutputTokens}} {
		if f.v == nil {
			continue
		}
		if *f.v < 0 {
			return 0, malformed(ep, f.name, errors.New("must be >= 0"))
		}
		limit = *f.v
		break
	}
	choices := int64(1)
	for _, f := range []struct {
		name string
		v    *int64
	}{{"n", l.N}, {"best_of", l.BestOf}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 {
			return 0, malformed(ep, f.name, errors.New("must be >= 1"))
		}
		choices = max(choices, *f.v)
	}
	return satMul(satMul(limit, choices), max(prompts, 1)), nil
}

func (l *limits) stream() (stream, includeUsage bool) {
	stream = l.Stream != nil && *l.Stream
	includeUsage = l.StreamOptions != nil && l.StreamOptions.IncludeUsage != nil && *l.StreamOptions.IncludeUsage
	return stream, includeUsage
}

// chatRequest is the part of a /v1/chat/completions body that costs tokens.
type chatRequest struct {
	Model          jstr            `json:"model"`
	Messages       []chatMessage   `json:"messages"`
	Tools          []toolDef       `json:"tools"`
	Functions      []functionDef   `json:"functions"`
	ResponseFormat *responseFormat `json:"response_format"`
	limits
}

type chatMessage struct {
	Role         jstr          `json:"role"`
	Name         jstr          `json:"name"`
	Content      content       `json:"content"`
	ToolCallID   jstr          `json:"tool_call_id"`
	ToolCalls    []toolCall    `json:"tool_calls"`
	FunctionCall *functionCall `json:"function_call"`
	Refusal      jstr          `json:"refusal"`
}

type toolCall struct {
	ID       jstr         `json:"id"`
	Function functionCall `json:"function"`
}

type functionCall struct {
	Name      jstr `json:"name"`
	Arguments jstr `json:"arguments"`
}

// toolDef is a tool definition: {"type":"function","function":{...}} in the
// Chat Completions API, {"type":"function","name":...} in the Responses API,
// or a built-in tool priced by size.
type toolDef struct {
	Type     string       `json:"type"`
	Function *functionDef `json:"function"`
	functionDef
	rawLen int
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *toolDef) UnmarshalJSON(b []byte) error {
	type plain toolDef
	if err := json.Unmarshal(b, (*plain)(d)); err != nil {
		return err
	}
	d.rawLen = len(b)
	return nil
}

type functionDef struct {
	Name        jstr            `json:"name"`
	Description jstr            `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type responseFormat struct {
	Type       string          `json:"type"`
	JSONSchema json.RawMessage `json:"json_schema"`
	Schema     json.RawMessage `json:"schema"` // Responses API text.format
}

// schema is the part of a JSON schema the tool formula reads.
type schema struct {
	Type        json.RawMessage            `json:"type"`
	Description jstr                       `json:"description"`
	Enum        []json.RawMessage          `json:"enum"`
	Properties  map[string]json.RawMessage `json:"properties"`
}

func (e *Estimator) chat(body []byte) (Estimate, error) {
	const ep = EndpointChatCompletions
	var req chatRequest
	if err := decode(ep, body, &req); err != nil {
		return Estimate{}, err
	}
	if len(req.Messages) == 0 {
		return Estimate{}, malformed(ep, "messages", errors.New("must be a non-empty array"))
	}
	m, err := e.resolve(string(req.Model))
	if err != nil {
		return Estimate{}, err
	}
	t := &tally{m: m, pieces: make([]string, 0, 2*len(req.Messages)+4)}
	for i := range req.Messages {
		msg := &req.Messages[i]
		t.fixed += tokensPerMessage
		t.text(string(msg.Role))
		if msg.Name != "" {
			t.fixed += tokensPerName
			t.text(string(msg.Name))
		}
		e.content(t, &msg.Content)
		t.text(string(msg.Refusal))
		t.text(string(msg.ToolCallID))
		for _, c := range msg.ToolCalls {
			t.text(string(c.ID))
			t.text(string(c.Function.Name))
			t.text(string(c.Function.Arguments))
		}
		if msg.FunctionCall != nil {
			t.text(string(msg.FunctionCall.Name))
			t.text(string(msg.FunctionCall.Arguments))
		}
	}
	t.fixed += replyPriming
	if err := tools(t, req.Tools, req.Functions); err != nil {
		return Estimate{}, malformed(ep, "tools", err)
	}
	if rf := req.ResponseFormat; rf != nil && len(rf.JSONSchema) > 0 {
		t.text(compactJSON(rf.JSONSchema))
	}
	out, err := req.output(ep, m.maxOutput, 1)
	if err != nil {
		return Estimate{}, err
	}
	return e.finish(t, string(req.Model), out, &req.limits), nil
}

// finish turns a tally into an Estimate.
func (e *Estimator) finish(t *tally, modelName string, out int64, l *limits) Estimate {
	in, sampled := t.total(e.sampleThreshold, e.sampleBytes)
	stream, inc := l.stream()
	return Estimate{
		Model:        modelName,
		Encoding:     t.m.encoding,
		InputTokens:  in,
		OutputTokens: out,
		Stream:       stream,
		IncludeUsage: inc,
		Sampled:      sampled,
		Images:       t.images,
	}
}

// content adds a message content (string or parts) to t.
func (e *Estimator) content(t *tally, c *content) {
	t.text(string(c.text))
	for i := range c.parts {
		p := &c.parts[i]
		switch p.Type {
		case "text", "input_text", "output_text":
			t.text(string(p.Text))
		case "refusal":
			t.text(string(p.Refusal))
		case "image_url", "input_image":
			detail := p.ImageURL.Detail
			if detail == "" {
				detail = p.Detail
			}
			t.fixed += e.images.tokens(string(p.ImageURL.URL), detail)
			t.images++
		default:
			// Audio, files and part types added after this package was
			// written: priced by size, see bytesTokens.
			t.fixed += bytesTokens(p.rawLen)
		}
	}
}

// tools adds tool and legacy function definitions to t, with the formula of
// OpenAI's cookbook (num_tokens_for_tools). Nested schema keywords the
// formula does not cover (properties of nested objects, items, etc.) are
// counted as their compact JSON text.
func tools(t *tally, defs []toolDef, fns []functionDef) error {
	n := 0
	for i := range defs {
		d := &defs[i]
		switch {
		case d.Function != nil:
			if err := function(t, d.Function); err != nil {
				return err
			}
		case d.Type == "function" || d.Name != "":
			if err := function(t, &d.functionDef); err != nil {
				return err
			}
		default:
			// Built-in tools (web_search, file_search, ...): priced by size.
			t.fixed += bytesTokens(d.rawLen)
			continue
		}
		n++
	}
	for i := range fns {
		if err := function(t, &fns[i]); err != nil {
			return err
		}
		n++
	}
	if n > 0 {
		t.fixed += toolsEnd
	}
	return nil
}

func function(t *tally, f *functionDef) error {
	t.fixed += t.m.toolInit
	t.text(string(f.Name) + ":" + strings.TrimSuffix(string(f.Description), "."))
	if firstByte(f.Parameters) != '{' {
		return nil
	}
	var s schema
	if err := json.Unmarshal(f.Parameters, &s); err != nil {
		return errors.New("function parameters: want a JSON schema object")
	}
	if len(s.Properties) == 0 {
		return nil
	}
	t.fixed += toolPropInit
	keys := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic order; the count does not depend on it
	for _, k := range keys {
		raw := s.Properties[k]
		t.fixed += toolPropKey
		var p schema
		var rest map[string]json.RawMessage
		if firstByte(raw) != '{' || json.Unmarshal(raw, &p) != nil || json.Unmarshal(raw, &rest) != nil {
			t.text(k + ":" + compactJSON(raw))
			continue
		}
		if len(p.Enum) > 0 {
			t.fixed += toolEnumInit
			for _, item := range p.Enum {
				t.fixed += toolEnumItem
				t.text(scalarText(item))
			}
		}
		t.text(k + ":" + scalarText(p.Type) + ":" + strings.TrimSuffix(string(p.Description), "."))
		for key, v := range rest {
			switch key {
			case "type", "description", "enum":
				continue
			}
			t.text(key + ":" + compactJSON(v))
		}
	}
	return nil
}

// scalarText returns a JSON string's value, or any other value's compact
// JSON text.
func scalarText(raw json.RawMessage) string {
	if firstByte(raw) == '"' {
		var s jstr
		if s.UnmarshalJSON(bytes.TrimSpace(raw)) == nil {
			return string(s)
		}
	}
	return compactJSON(raw)
}

// compactJSON returns raw without insignificant white space.
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// textInput is a completions prompt or an embeddings input: a string, an
// array of strings, an array of token ids, or an array of token arrays.
type textInput struct {
	texts   []jstr
	tokens  int64 // inputs given as token ids
	items   int64 // number of separate inputs
	present bool
}

// UnmarshalJSON implements json.Unmarshaler.
func (in *textInput) UnmarshalJSON(b []byte) error {
	switch firstByte(b) {
	case 'n':
		return nil
	case '"':
		var s jstr
		if err := s.UnmarshalJSON(b); err != nil {
			return err
		}
		in.texts, in.items, in.present = []jstr{s}, 1, true
		return nil
	case '[':
	default:
		return typeError(b, typeInput)
	}
	in.present = true
	switch firstByte(b[1:]) {
	case ']':
		return nil
	case '"':
		if err := json.Unmarshal(b, &in.texts); err != nil {
			return typeError(b, typeInput)
		}
		in.items = int64(len(in.texts))
		return nil
	case '[':
		var arrays []sizedArray
		if err := json.Unmarshal(b, &arrays); err != nil {
			return typeError(b, typeInput)
		}
		for _, a := range arrays {
			in.tokens += int64(a)
		}
		in.items = int64(len(arrays))
		return nil
	}
	var ids []int64
	if err := json.Unmarshal(b, &ids); err != nil {
		return typeError(b, typeInput)
	}
	in.tokens, in.items = int64(len(ids)), 1
	return nil
}

// sizedArray is an array of token ids, kept as its length.
type sizedArray int

// UnmarshalJSON implements json.Unmarshaler.
func (a *sizedArray) UnmarshalJSON(b []byte) error {
	var ids []int64
	if err := json.Unmarshal(b, &ids); err != nil {
		return err
	}
	*a = sizedArray(len(ids))
	return nil
}

type completionsRequest struct {
	Model  jstr      `json:"model"`
	Prompt textInput `json:"prompt"`
	Suffix jstr      `json:"suffix"`
	limits
}

func (e *Estimator) completions(body []byte) (Estimate, error) {
	const ep = EndpointCompletions
	var req completionsRequest
	if err := decode(ep, body, &req); err != nil {
		return Estimate{}, err
	}
	m, err := e.resolve(string(req.Model))
	if err != nil {
		return Estimate{}, err
	}
	t := &tally{m: m}
	for _, s := range req.Prompt.texts {
		t.text(string(s))
	}
	t.fixed += req.Prompt.tokens
	if !req.Prompt.present {
		t.fixed++ // the API's default prompt is <|endoftext|>, one token
	}
	t.text(string(req.Suffix))
	out, err := req.output(ep, DefaultCompletionsMaxTokens, req.Prompt.items)
	if err != nil {
		return Estimate{}, err
	}
	return e.finish(t, string(req.Model), out, &req.limits), nil
}

type embeddingsRequest struct {
	Model jstr      `json:"model"`
	Input textInput `json:"input"`
	limits
}

func (e *Estimator) embeddings(body []byte) (Estimate, error) {
	const ep = EndpointEmbeddings
	var req embeddingsRequest
	if err := decode(ep, body, &req); err != nil {
		return Estimate{}, err
	}
	if !req.Input.present {
		return Estimate{}, malformed(ep, "input", errors.New("required"))
	}
	m, err := e.resolve(string(req.Model))
	if err != nil {
		return Estimate{}, err
	}
	t := &tally{m: m}
	for _, s := range req.Input.texts {
		t.text(string(s))
	}
	t.fixed += req.Input.tokens
	return e.finish(t, string(req.Model), 0, &limits{}), nil
}

type responsesRequest struct {
	Model        jstr           `json:"model"`
	Instructions jstr           `json:"instructions"`
	Input        responsesInput `json:"input"`
	Tools        []toolDef      `json:"tools"`
	Text         *struct {
		Format *responseFormat `json:"format"`
	} `json:"text"`
	limits
}

// responsesInput is the Responses API input: a string or an array of items.
type responsesInput struct {
	text  jstr
	items []responseItem
}

// UnmarshalJSON implements json.Unmarshaler.
func (in *responsesInput) UnmarshalJSON(b []byte) error {
	switch firstByte(b) {
	case '"':
		return in.text.UnmarshalJSON(b)
	case '[':
		return json.Unmarshal(b, &in.items)
	case 'n':
		return nil
	}
	return typeError(b, typeContent)
}

// responseItem is one input item of the Responses API: a message, a function
// call, a function call output, or another item priced by size.
type responseItem struct {
	Type      string  `json:"type"`
	Role      jstr    `json:"role"`
	Content   content `json:"content"`
	Name      jstr    `json:"name"`
	Arguments jstr    `json:"arguments"`
	CallID    jstr    `json:"call_id"`
	Output    content `json:"output"`
	rawLen    int
}

// UnmarshalJSON implements json.Unmarshaler.
func (it *responseItem) UnmarshalJSON(b []byte) error {
	type plain responseItem
	if err := json.Unmarshal(b, (*plain)(it)); err != nil {
		return err
	}
	it.rawLen = len(b)
	return nil
}

func (e *Estimator) responses(body []byte) (Estimate, error) {
	const ep = EndpointResponses
	var req responsesRequest
	if err := decode(ep, body, &req); err != nil {
		return Estimate{}, err
	}
	m, err := e.resolve(string(req.Model))
	if err != nil {
		return Estimate{}, err
	}
	t := &tally{m: m}
	if req.Instructions != "" {
		// Priced as a system message of the chat format.
		t.fixed += tokensPerMessage
		t.text("system")
		t.text(string(req.Instructions))
	}
	if req.Input.text != "" {
		t.fixed += tokensPerMessage
		t.text("user")
		t.text(string(req.Input.text))
	}
	for i := range req.Input.items {
		it := &req.Input.items[i]
		switch it.Type {
		case "", "message":
			t.fixed += tokensPerMessage
			t.text(string(it.Role))
			e.content(t, &it.Content)
		case "function_call":
			t.text(string(it.CallID))
			t.text(string(it.Name))
			t.text(string(it.Arguments))
		case "function_call_output":
			t.text(string(it.CallID))
			e.content(t, &it.Output)
		case "item_reference":
			// Refers to a stored item whose size is unknown here; the actual
			// usage settles it.
		default:
			t.fixed += bytesTokens(it.rawLen)
		}
	}
	t.fixed += replyPriming
	if err := tools(t, req.Tools, nil); err != nil {
		return Estimate{}, malformed(ep, "tools", err)
	}
	if req.Text != nil && req.Text.Format != nil && len(req.Text.Format.Schema) > 0 {
		t.text(compactJSON(req.Text.Format.Schema))
	}
	out, err := req.output(ep, m.maxOutput, 1)
	if err != nil {
		return Estimate{}, err
	}
	return e.finish(t, string(req.Model), out, &req.limits), nil
}
