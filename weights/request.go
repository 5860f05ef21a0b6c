package weights

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/sluicehq/sluice/internal/jsonscan"
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

// maxMembers is the most members an object the estimate reads may have
// (the request itself, a message, a content part, a tool, a schema's
// properties...); objects it does not read (metadata, nested schemas) are
// not limited.
const maxMembers = 1024

// tallyMode is what a walk over the body does with the text it finds.
type tallyMode int

const (
	// sizeText measures the text and keeps a copy of it while it is no
	// larger than the sampling threshold: the first walk.
	sizeText tallyMode = iota
	// countPieces counts every piece exactly: a second walk when sampling
	// is off (the model, hence the tokenizer, may come last), or a third
	// when a sample found nothing to measure.
	countPieces
	// samplePieces feeds every piece to a sampler: the second walk above
	// the sampling threshold, once the text's size is known.
	samplePieces
)

// tally receives the text of one request piece by piece, and its fixed
// token costs. Pieces are views of the body or of scratch buffers, valid
// only during the call: the tally keeps nothing but, below the sampling
// threshold, a copy of the text in arena.
type tally struct {
	mode      tallyMode
	mute      bool // a walk that only checks: nothing is priced
	threshold int  // the sampling threshold; negative: never sample
	fixed     int64
	images    int
	// imageHeaders counts the data: URL images whose size was looked for.
	imageHeaders int
	functions    int64 // function definitions, priced once the model is known
	bytes        int   // text bytes seen
	keep         bool  // the text is copied to arena
	arena        []byte
	ends         []int32 // where each piece of arena ends
	counter      Counter
	n            int64 // tokens counted (countPieces)
	smp          sampler
}

// text takes the next piece of text.
func (t *tally) text(p string) {
	if p == "" || t.mute {
		return
	}
	switch t.mode {
	case sizeText:
		t.bytes += len(p)
		if t.keep && t.bytes > t.threshold {
			t.keep = false
		}
		if t.keep {
			t.arena = append(t.arena, p...)
			if len(t.ends) == cap(t.ends) {
				// Doubling: append grows a large slice by a quarter, and
				// a request of many short pieces (roles, ids) would
				// reallocate its ends five times over.
				t.ends = slices.Grow(t.ends, max(len(t.ends), 64))
			}
			t.ends = append(t.ends, int32(len(t.arena)))
		}
	case countPieces:
		t.n = satAdd(t.n, int64(countText(t.counter, p)))
	case samplePieces:
		t.smp.piece(p)
	}
}

// add adds a fixed cost (n >= 0). Fixed costs are taken on the first walk
// only.
func (t *tally) add(n int64) {
	if !t.mute && t.mode == sizeText {
		t.fixed = satAdd(t.fixed, n)
	}
}

// limit is an integer field of the request: set when present and not null.
type limit struct {
	v   int64
	set bool
}

// limits are the output-limit fields shared by the request shapes.
type limits struct {
	maxTokens, maxCompletionTokens, maxOutputTokens, n, bestOf limit
	stream, includeUsage                                       bool
}

// output computes the output reservation: the first limit set, else def,
// times the number of choices (the larger of n and best_of) and prompts,
// at most MaxTokens; defaulted is the number of choices times prompts
// when no limit is set (def was taken), else 0.
func (l *limits) output(ep Endpoint, def, prompts int64) (out, defaulted int64, err error) {
	out, found := def, false
	for _, f := range [...]struct {
		name string
		v    limit
	}{{"max_completion_tokens", l.maxCompletionTokens}, {"max_tokens", l.maxTokens}, {"max_output_tokens", l.maxOutputTokens}} {
		if !f.v.set {
			continue
		}
		if f.v.v < 0 {
			return 0, 0, malformed(ep, f.name, errors.New("must be >= 0"))
		}
		if !found {
			out, found = f.v.v, true
		}
	}
	choices := int64(1)
	for _, f := range [...]struct {
		name string
		v    limit
	}{{"n", l.n}, {"best_of", l.bestOf}} {
		if !f.v.set {
			continue
		}
		if f.v.v < 1 {
			return 0, 0, malformed(ep, f.name, errors.New("must be >= 1"))
		}
		choices = max(choices, f.v.v)
	}
	n := satMul(choices, max(prompts, 1))
	if !found {
		defaulted = n
	}
	return capTokens(satMul(capTokens(out), n)), defaulted, nil
}

// jstring is a JSON string as written in the body: its contents, and
// whether they must be decoded (escapes, invalid UTF-8). The zero value is
// an absent or null string.
type jstring struct {
	raw   string
	dirty bool
}

// span is the text of a value, as offsets in the body; empty when absent.
type span struct{ start, end int }

// fieldSet is the members an object of the request is read for.
type fieldSet struct {
	names []string
	// fold refuses keys that differ from a name only in case (an
	// upstream that matches keys case-insensitively, as Go's
	// encoding/json does, would read them as that field).
	fold bool
}

func (fs *fieldSet) index(k string) int {
	for i, n := range fs.names {
		if n == k {
			return i
		}
	}
	return -1
}

// variant returns the name k is a case variant of.
func (fs *fieldSet) variant(k string) (string, bool) {
	if !fs.fold {
		return "", false
	}
	for _, n := range fs.names {
		// Unicode folding maps some characters of two or three bytes to
		// ASCII letters (ſ to s, the Kelvin sign to k).
		if len(k) >= len(n) && len(k) <= 3*len(n) && strings.EqualFold(k, n) {
			return n, true
		}
	}
	return "", false
}

func fields(fold bool, names ...string) *fieldSet { return &fieldSet{names: names, fold: fold} }

var limitFields = []string{"model", "max_tokens", "max_completion_tokens", "max_output_tokens", "n", "best_of", "stream", "stream_options"}

// The members each object is read for.
var (
	requestFields = [...]*fieldSet{
		EndpointChatCompletions: fields(true, slices.Concat(limitFields, []string{"messages", "tools", "functions", "response_format"})...),
		EndpointCompletions:     fields(true, slices.Concat(limitFields, []string{"prompt", "suffix"})...),
		EndpointEmbeddings:      fields(true, slices.Concat(limitFields, []string{"input"})...),
		EndpointResponses:       fields(true, slices.Concat(limitFields, []string{"instructions", "input", "tools", "text", "prompt"})...),
		// Anthropic's Messages API has none of OpenAI's other limits.
		EndpointMessages: fields(true, "model", "max_tokens", "stream", "system", "messages", "tools", "container"),
	}
	streamOptionFields   = fields(true, "include_usage")
	messageFields        = fields(true, "role", "name", "content", "tool_call_id", "tool_calls", "function_call", "refusal", "audio")
	audioFields          = fields(true, "id")
	toolCallFields       = fields(true, "id", "function")
	functionCallFields   = fields(true, "name", "arguments")
	partFields           = fields(true, "type", "text", "refusal", "image_url", "detail", "file_id", "file")
	filePartFields       = fields(true, "file_id")
	imageURLFields       = fields(true, "url", "detail")
	toolFields           = fields(true, "type", "function", "name", "description", "parameters", "vector_store_ids", "container", "input_image_mask")
	toolContainerFields  = fields(true, "file_ids")
	functionDefFields    = fields(true, "name", "description", "parameters")
	responseFormatFields = fields(true, "type", "json_schema", "schema")
	textFields           = fields(true, "format")
	itemFields           = fields(true, "type", "role", "content", "name", "arguments", "call_id", "output", "id", "encrypted_content", "result")
	promptFields         = fields(true, "id", "variables")
	// JSON Schema keywords are case-sensitive everywhere: a case variant is
	// another keyword.
	schemaFields = fields(false, "type", "description", "enum", "properties")
	anyFields    = fields(false)
)

var (
	errDuplicate = errors.New("duplicate key")
	errSchema    = errors.New("function parameters: want a JSON schema object")
)

const wantInput = "a string, an array of strings, an array of token ids or an array of token arrays"

// object is the state of an object being read.
type object struct {
	fields *fieldSet
	path   string
	seen   uint64 // names read, by index
	n      int
	id     int32
	mark   int
}

// walker prices one request body in one pass over it: it checks the JSON
// as it goes and hands the text to a tally without building the request.
// Above the sampling threshold a second walk hands the text to a sampler.
type walker struct {
	sc   jsonscan.Scanner
	t    tally
	keys keySet
	e    *Estimator
	ep   Endpoint
	err  error  // the first problem other than a syntax error
	buf  []byte // text built from several parts
	dec  []byte // one decoded string
	kdec []byte // one decoded key

	blocks int // content blocks being read, nested (Messages API)

	// pathModel is the model a generateContent request names in its
	// path (see Estimator.EstimateModel).
	pathModel string

	// refs are the objects stored upstream the body names (see Ref),
	// found by the first walk.
	refs []Ref

	// What the walk found at the top level.
	model    jstring
	messages int
	lim      limits
	prompt   struct {
		present       bool
		items, tokens int64
	}
}

var walkers = sync.Pool{New: func() any { return new(walker) }}

// view returns b as a string without copying; it is valid until b changes.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// price walks body and returns its estimate.
func (e *Estimator) price(ep Endpoint, body []byte) (Estimate, error) {
	return e.priceModel(ep, "", nil, body)
}

// priceModel is price for a request whose model is named by its path
// (pathModel; empty for the APIs that name it in the body), or, with as,
// is the model as returns for the body's (see Estimator.EstimateAs).
func (e *Estimator) priceModel(ep Endpoint, pathModel string, as func(string) (string, error), body []byte) (Estimate, error) {
	w := walkers.Get().(*walker)
	defer w.release()
	*w = walker{
		t:    tally{threshold: e.sampleThreshold, keep: e.sampleThreshold >= 0, arena: w.t.arena[:0], ends: w.t.ends[:0]},
		keys: w.keys,
		e:    e,
		ep:   ep,
		buf:  w.buf[:0], dec: w.dec[:0], kdec: w.kdec[:0],
		pathModel: pathModel,
	}
	// The body is read in place: nothing that outlives this call refers
	// to it (see cloning).
	w.sc.ResetBytes(body)
	if w.t.keep && cap(w.t.arena) == 0 {
		w.t.arena = make([]byte, 0, min(e.sampleThreshold, len(body)))
	}
	w.walk()
	if w.sc.Err() != nil {
		return Estimate{}, malformed(ep, "", w.sc.Err())
	}
	if w.err != nil {
		return Estimate{}, w.err
	}
	switch {
	case (ep == EndpointChatCompletions || ep == EndpointMessages || ep == EndpointConverse) && w.messages == 0:
		return Estimate{}, malformed(ep, "messages", errors.New("must be a non-empty array"))
	case ep == EndpointGenerateContent && w.messages == 0:
		return Estimate{}, malformed(ep, "contents", errors.New("must be a non-empty array"))
	case ep == EndpointMessages && !w.lim.maxTokens.set:
		// Required by the API, and the reservation Anthropic's own output
		// limit takes.
		return Estimate{}, malformed(ep, "max_tokens", errors.New("required"))
	case ep == EndpointEmbeddings && !w.prompt.present:
		return Estimate{}, malformed(ep, "input", errors.New("required"))
	}
	name := strings.Clone(w.decode(w.model))
	if as != nil {
		var err error
		if name, err = as(name); err != nil {
			return Estimate{}, err
		}
	}
	m, err := e.resolve(name)
	if err != nil {
		return Estimate{}, err
	}
	est := Estimate{Model: name, Encoding: m.encoding, Images: w.t.images, Refs: w.refs}
	switch ep {
	case EndpointEmbeddings:
	case EndpointCompletions:
		// The API's own default: no other is charged for it.
		est.OutputTokens, _, err = w.lim.output(ep, DefaultCompletionsMaxTokens, w.prompt.items)
	default:
		est.OutputTokens, est.DefaultOutput, err = w.lim.output(ep, m.maxOutput, 1)
	}
	if err != nil {
		return Estimate{}, err
	}
	if ep != EndpointEmbeddings {
		est.Stream, est.IncludeUsage = w.lim.stream, w.lim.includeUsage
	}
	est.InputTokens, est.Sampled = w.inputTokens(m)
	if est.Sampled {
		est.MaxInputTokens = max(capTokens(satAdd(m.maxTokens(w.t.bytes), w.inputFixed(m))), est.InputTokens)
	}
	return est, nil
}

// inputTokens counts the text found by the first walk and adds the fixed
// costs.
func (w *walker) inputTokens(m model) (int64, bool) {
	t := &w.t
	fixed := w.inputFixed(m)
	c := cloning(m.counter)
	var n int64
	sampled := t.threshold >= 0 && t.bytes > t.threshold
	switch {
	case sampled:
		t.mode, t.smp = samplePieces, newSampler(c, t.bytes, w.e.sampleBytes)
		w.rewalk()
		var ok bool
		if n, ok = t.smp.estimate(); ok {
			break
		}
		fallthrough
	case t.threshold < 0:
		t.mode, t.counter, t.n = countPieces, c, 0
		w.rewalk()
		n = t.n
	default:
		prev := int32(0)
		for _, end := range t.ends {
			n = satAdd(n, int64(countText(c, view(t.arena[prev:end]))))
			prev = end
		}
	}
	return capTokens(satAdd(scaleCount(n, m.scale), fixed)), sampled
}

// maxTokens bounds the tokens of text of n bytes: n, as a token covers at
// least one byte in any tokenizer, or more when the model's rule counts
// more (a scale above 1, fewer than one character per token).
func (m model) maxTokens(n int) int64 {
	bound := max(int64(n), scaleCount(int64(n), m.scale))
	if r, ok := m.counter.(ratioCounter); ok && r.charsPerToken < 1 {
		bound = max(bound, int64(math.Ceil(min(float64(n)/r.charsPerToken, MaxTokens))))
	}
	return bound
}

// inputFixed returns the prompt's fixed costs: all but its text.
func (w *walker) inputFixed(m model) int64 {
	fixed := satAdd(w.t.fixed, w.prompt.tokens)
	if w.ep == EndpointCompletions && !w.prompt.present {
		fixed = satAdd(fixed, 1) // the API's default prompt is <|endoftext|>, one token
	}
	if w.t.functions > 0 {
		fixed = satAdd(fixed, satAdd(toolsEnd, satMul(w.t.functions, m.toolInit)))
	}
	return fixed
}

// rewalk walks the body again, handing its text to the tally's new mode.
func (w *walker) rewalk() {
	w.sc.Reset(w.sc.Src())
	w.walk()
}

// release returns w to the pool without what it refers to.
func (w *walker) release() {
	w.keys.reset()
	const keepAtMost = 1 << 20
	for _, b := range []*[]byte{&w.t.arena, &w.buf, &w.dec, &w.kdec} {
		if cap(*b) > keepAtMost {
			*b = nil
		}
	}
	if cap(w.t.ends) > keepAtMost/4 {
		w.t.ends = nil
	}
	*w = walker{t: tally{arena: w.t.arena[:0], ends: w.t.ends[:0]}, keys: w.keys, buf: w.buf[:0], dec: w.dec[:0], kdec: w.kdec[:0]}
	walkers.Put(w)
}

// cloning returns c, or for a counter this package does not know (which
// might keep the strings it is given) a counter that hands it copies.
func cloning(c Counter) Counter {
	switch c.(type) {
	case bpeCounter, ratioCounter:
		return c
	}
	return cloningCounter{c}
}

type cloningCounter struct{ c Counter }

func (c cloningCounter) Count(s string) int { return c.c.Count(strings.Clone(s)) }

// fail records the first problem of the request.
func (w *walker) fail(path string, err error) {
	if w.err == nil {
		w.err = malformed(w.ep, path, err)
	}
}

func (w *walker) wrongType(path, want string, c byte) {
	w.fail(path, fmt.Errorf("want %s, got %s", want, jsonscan.Kind(c)))
}

// join returns the path of member name of the object at path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// clip returns a copy of a key from the body, cut to a length fit for an
// error message.
func clip(s string) string {
	const n = 64
	if len(s) > n {
		return strings.Clone(s[:n]) + "..."
	}
	return strings.Clone(s)
}

// decode returns the value of v, valid until the next decode.
func (w *walker) decode(v jstring) string {
	if !v.dirty {
		return v.raw
	}
	if n := len(v.raw); cap(w.dec) < n {
		// A \u escape of six bytes decodes to at most three.
		if n = max(n-3*strings.Count(v.raw, `\u`), 0); cap(w.dec) < n {
			w.dec = make([]byte, 0, n)
		}
	}
	w.dec, _ = jsonscan.AppendUnquote(w.dec[:0], v.raw)
	return view(w.dec)
}

// decodedLen returns the length of the decoded value of raw, decoding it
// a few kilobytes at a time.
func (w *walker) decodedLen(raw string) int {
	n := 0
	for len(raw) > 0 {
		var k int
		w.dec, k, _ = jsonscan.UnquoteChunk(w.dec[:0], raw, 4<<10)
		n += len(w.dec)
		raw = raw[k:]
	}
	return n
}

// textOf prices a string as text. When only the size of the text matters
// (the first walk, once the text is above the sampling threshold), a
// string with escapes is measured without being decoded whole.
func (w *walker) textOf(v jstring) {
	t := &w.t
	if v.dirty && t.mode == sizeText && !t.mute && (!t.keep || len(v.raw) > 64<<10) {
		n := w.decodedLen(v.raw)
		if !t.keep || t.bytes+n > t.threshold {
			t.bytes += n
			t.keep = false
			return
		}
	}
	t.text(w.decode(v))
}

func appendDecoded(dst []byte, v jstring) []byte {
	if !v.dirty {
		return append(dst, v.raw...)
	}
	dst, _ = jsonscan.AppendUnquote(slices.Grow(dst, len(v.raw)), v.raw)
	return dst
}

// begin starts reading the object at the scanner.
func (w *walker) begin(o *object, fs *fieldSet, path string) {
	*o = object{fields: fs, path: path}
	o.id, o.mark = w.keys.open()
	w.sc.Open()
}

// member reads the key of the object's next member and checks it: a
// repeated key, a case variant of a field, or one member too many is a
// problem. known is the field's name, or empty for another key. ok is
// false at the end of the object.
func (w *walker) member(o *object) (key jstring, known string, ok bool) {
	if !w.sc.More(&o.n, '}') {
		w.keys.release(o.mark)
		return jstring{}, "", false
	}
	raw, dirty := w.sc.Key()
	key = jstring{raw, dirty}
	if w.sc.Err() != nil {
		return key, "", true
	}
	k := raw
	if dirty {
		w.kdec, _ = jsonscan.AppendUnquote(w.kdec[:0], raw)
		k = view(w.kdec)
	}
	if i := o.fields.index(k); i >= 0 {
		if o.seen&(1<<i) != 0 {
			w.fail(join(o.path, o.fields.names[i]), errDuplicate)
		}
		o.seen |= 1 << i
		return key, o.fields.names[i], true
	}
	if name, found := o.fields.variant(k); found {
		w.fail(join(o.path, name), fmt.Errorf("key %q differs from %q only in case", clip(k), name))
	}
	switch {
	case o.n > maxMembers:
		w.fail(o.path, fmt.Errorf("more than %d members", maxMembers))
	case w.keys.insert(o.id, k, raw, dirty):
		w.fail(join(o.path, clip(k)), errDuplicate)
	}
	return key, "", true
}

// next reads up to the value of the object's next member that is one of
// its fields and returns the field's name; other members are checked and
// skipped. It returns false at the end of the object.
func (w *walker) next(o *object) (string, bool) {
	for {
		_, name, ok := w.member(o)
		if !ok || name != "" {
			return name, ok
		}
		w.sc.Skip()
	}
}

// str reads a string or null.
func (w *walker) str(path, name string) jstring {
	switch c := w.sc.Peek(); c {
	case '"':
		raw, dirty := w.sc.Str()
		return jstring{raw, dirty}
	case 'n':
		w.sc.Literal()
	default:
		w.wrongType(join(path, name), "a string", c)
		w.sc.Skip()
	}
	return jstring{}
}

// text reads a string or null and prices it as text.
func (w *walker) text(path, name string) { w.textOf(w.str(path, name)) }

// int reads an integer or null.
func (w *walker) int(path, name string) limit {
	switch c := w.sc.Peek(); {
	case c == 'n':
		w.sc.Literal()
	case c == '-' || c >= '0' && c <= '9':
		lit := w.sc.Number()
		if v, ok := jsonscan.Integral(lit); ok {
			return limit{v: v, set: true}
		}
		if len(lit) > 32 {
			lit = lit[:32] + "..."
		}
		w.fail(join(path, name), fmt.Errorf("want an integer, got number %s", lit))
	default:
		w.wrongType(join(path, name), "an integer", c)
		w.sc.Skip()
	}
	return limit{}
}

// bool reads a boolean or null.
func (w *walker) bool(path, name string) bool {
	switch c := w.sc.Peek(); c {
	case 't', 'f':
		w.sc.Literal()
		return c == 't'
	case 'n':
		w.sc.Literal()
	default:
		w.wrongType(join(path, name), "a boolean", c)
		w.sc.Skip()
	}
	return false
}

// container reports whether the next value is an object or array (open is
// '{' or '['), leaving it to the caller; it reads a null, and any other
// value as a problem.
func (w *walker) container(open byte, path, want string) bool {
	switch c := w.sc.Peek(); c {
	case open:
		return true
	case 'n':
		w.sc.Literal()
	default:
		w.wrongType(path, want, c)
		w.sc.Skip()
	}
	return false
}

// pricedObject reads up to the '{' of the object at the scanner, and
// returns where its value starts; a null (or a value of another type, a
// problem) is priced by size and reported as no object.
func (w *walker) pricedObject(path string) (start int, ok bool) {
	w.sc.SkipSpace()
	start = w.sc.Pos()
	if !w.container('{', path, "an object") {
		w.t.add(bytesTokens(w.sc.Pos() - start))
		return start, false
	}
	return start, true
}

// at runs f with the scanner at offset i of the body (a value the walk
// has already checked), then returns to where it was.
func (w *walker) at(i int, f func()) {
	saved := w.sc.Pos()
	w.sc.Seek(i)
	f()
	w.sc.Seek(saved)
}

// walk reads the request object.
func (w *walker) walk() {
	switch w.ep {
	case EndpointGenerateContent:
		w.geminiWalk()
		return
	case EndpointConverse:
		w.converseWalk()
		return
	}
	w.model, w.messages, w.lim = jstring{}, 0, limits{}
	w.prompt.present, w.prompt.items, w.prompt.tokens = false, 0, 0
	sc := &w.sc
	if sc.Peek() != '{' {
		w.fail("", errors.New("want a JSON object"))
		return
	}
	var o object
	w.begin(&o, requestFields[w.ep], "")
	for {
		name, ok := w.next(&o)
		if !ok {
			break
		}
		switch name {
		case "model":
			w.model = w.str("", name)
		case "max_tokens":
			w.lim.maxTokens = w.int("", name)
		case "max_completion_tokens":
			w.lim.maxCompletionTokens = w.int("", name)
		case "max_output_tokens":
			w.lim.maxOutputTokens = w.int("", name)
		case "n":
			w.lim.n = w.int("", name)
		case "best_of":
			w.lim.bestOf = w.int("", name)
		case "stream":
			w.lim.stream = w.bool("", name)
		case "stream_options":
			w.streamOptions()
		case "messages":
			if w.ep == EndpointMessages {
				w.claudeMessages()
			} else {
				w.chatMessages()
			}
		case "tools":
			if w.ep == EndpointMessages {
				w.claudeTools()
			} else {
				w.tools()
			}
		case "system":
			w.system()
		case "functions":
			w.functions()
		case "response_format":
			w.responseFormat("response_format", "json_schema")
		case "prompt":
			if w.ep == EndpointResponses {
				w.promptTemplate()
			} else {
				w.textInput(name)
			}
		case "container":
			w.claudeContainer()
		case "suffix":
			w.text("", name)
		case "instructions":
			// Priced as a system message of the chat format.
			if v := w.str("", name); v.raw != "" {
				w.t.add(tokensPerMessage)
				w.t.text("system")
				w.textOf(v)
			}
		case "input":
			if w.ep == EndpointEmbeddings {
				w.textInput(name)
			} else {
				w.responsesInput()
			}
		case "text":
			if w.container('{', "text", "an object") {
				var to object
				w.begin(&to, textFields, "text")
				for {
					if _, ok := w.next(&to); !ok {
						break
					}
					w.responseFormat("text.format", "schema")
				}
			}
		}
	}
	if w.ep == EndpointChatCompletions || w.ep == EndpointResponses || w.ep == EndpointMessages {
		w.t.add(replyPriming)
	}
	sc.End()
}

func (w *walker) streamOptions() {
	if !w.container('{', "stream_options", "an object") {
		return
	}
	var o object
	w.begin(&o, streamOptionFields, "stream_options")
	for {
		name, ok := w.next(&o)
		if !ok {
			return
		}
		w.lim.includeUsage = w.bool("stream_options", name)
	}
}

func (w *walker) chatMessages() {
	if !w.container('[', "messages", "an array") {
		return
	}
	w.sc.Open()
	for n := 0; w.sc.More(&n, ']'); {
		w.messages++
		w.t.add(tokensPerMessage)
		if !w.container('{', "messages", "an object") {
			continue // a null message is an empty one
		}
		var o object
		w.begin(&o, messageFields, "messages")
		for {
			name, ok := w.next(&o)
			if !ok {
				break
			}
			switch name {
			case "name":
				if v := w.str("messages", name); v.raw != "" {
					w.t.add(tokensPerName)
					w.textOf(v)
				}
			case "content":
				w.content("messages.content")
			case "tool_calls":
				w.toolCalls()
			case "function_call":
				w.functionCall("messages.function_call")
			case "audio":
				w.idRef(RefAudio, "messages.audio", audioFields)
			default: // role, tool_call_id, refusal
				w.text("messages", name)
			}
		}
	}
}

func (w *walker) toolCalls() {
	const path = "messages.tool_calls"
	if !w.container('[', path, "an array") {
		return
	}
	w.sc.Open()
	for n := 0; w.sc.More(&n, ']'); {
		if !w.container('{', path, "an object") {
			continue
		}
		var o object
		w.begin(&o, toolCallFields, path)
		for {
			name, ok := w.next(&o)
			if !ok {
				break
			}
			if name == "id" {
				w.text(path, name)
			} else {
				w.functionCall(path + ".function")
			}
		}
	}
}

func (w *walker) functionCall(path string) {
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, functionCallFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			return
		}
		w.text(path, name)
	}
}

// content prices a message content: a string, an array of parts (content
// blocks in Anthropic's Messages API), or null.
func (w *walker) content(path string) {
	switch c := w.sc.Peek(); c {
	case '"':
		raw, dirty := w.sc.Str()
		w.textOf(jstring{raw, dirty})
	case 'n':
		w.sc.Literal()
	case '[':
		w.sc.Open()
		for n := 0; w.sc.More(&n, ']'); {
			if w.ep == EndpointMessages {
				w.block(path)
			} else {
				w.part(path)
			}
		}
	default:
		want := "a string or an array of content parts"
		if w.ep == EndpointMessages {
			want = "a string or an array of content blocks"
		}
		w.wrongType(path, want, c)
		w.sc.Skip()
	}
}

// part prices one part of an array content, in the shapes of the Chat
// Completions API ("text", "image_url", "refusal") and of the Responses API
// ("input_text", "output_text", "input_image", "refusal"); other parts
// (audio, files, part types added after this package was written) are
// priced by size, see bytesTokens.
func (w *walker) part(path string) {
	start, ok := w.pricedObject(path)
	if !ok {
		return
	}
	var typ, text, refusal, url, urlDetail, detail jstring
	var o object
	w.begin(&o, partFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			break
		}
		switch name {
		case "type":
			typ = w.str(path, name)
		case "text":
			text = w.str(path, name)
		case "refusal":
			refusal = w.str(path, name)
		case "detail":
			detail = w.str(path, name)
		case "image_url":
			url, urlDetail = w.imageURL(path + ".image_url")
		case "file_id":
			w.ref(RefFile, path+".file_id", w.str(path, name))
		case "file":
			w.filePart(path + ".file")
		}
	}
	switch w.decode(typ) {
	case "text", "input_text", "output_text":
		w.textOf(text)
	case "refusal":
		w.textOf(refusal)
	case "image_url", "input_image":
		if urlDetail.raw == "" {
			urlDetail = detail
		}
		w.image(url, urlDetail)
	default:
		w.t.add(bytesTokens(w.sc.Pos() - start))
	}
}

// filePart reads an object whose member file_id is a reference: the
// file of a Chat Completions file part, whose inline data is priced with
// the part, by size, or an image_generation tool's input_image_mask.
func (w *walker) filePart(path string) {
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, filePartFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			return
		}
		w.ref(RefFile, path+".file_id", w.str(path, name))
	}
}

// imageURL reads an image_url value: an object {"url", "detail"} in the
// Chat Completions API, a plain string in the Responses API.
func (w *walker) imageURL(path string) (url, detail jstring) {
	if c := w.sc.Peek(); c == '"' || c == 'n' {
		return w.str(path, ""), jstring{}
	}
	if !w.container('{', path, "a string or an object") {
		return
	}
	var o object
	w.begin(&o, imageURLFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			return url, detail
		}
		if name == "url" {
			url = w.str(path, name)
		} else {
			detail = w.str(path, name)
		}
	}
}

func (w *walker) image(url, detail jstring) {
	if w.t.mute || w.t.mode != sizeText {
		return
	}
	d := ""
	if w.decode(detail) == "low" {
		d = "low"
	}
	u := ""
	if w.e.images.FlatTokens <= 0 && d != "low" && w.t.imageHeaders < maxImageHeaders {
		if u = w.decode(url); strings.HasPrefix(u, "data:") {
			w.t.imageHeaders++
		}
	}
	w.t.add(w.e.images.tokens(u, d))
	w.t.images++
}

// textInput reads a completions prompt or an embeddings input: a string,
// an array of strings, an array of token ids, or an array of token arrays.
func (w *walker) textInput(name string) {
	in := &w.prompt
	switch c := w.sc.Peek(); c {
	case 'n':
		w.sc.Literal()
		return
	case '"':
		w.text("", name)
		in.present, in.items = true, 1
		return
	case '[':
	default:
		w.wrongType(name, wantInput, c)
		w.sc.Skip()
		return
	}
	in.present = true
	w.sc.Open()
	var first byte // the first element's type decides the array's
	for n := 0; w.sc.More(&n, ']'); {
		c := w.sc.Peek()
		if n == 1 {
			first = c
		}
		in.items++
		switch {
		case c == 'n':
			w.sc.Literal()
			if first != '"' && first != '[' {
				in.tokens++
			}
		case first == '"' && c == '"':
			w.text("", name)
		case first == '[' && c == '[':
			w.sc.Open()
			for m := 0; w.sc.More(&m, ']'); {
				in.tokens++
				w.tokenID(name)
			}
		case first != '"' && first != '[':
			in.tokens++
			w.tokenID(name)
		default:
			w.wrongType(name, wantInput, '[')
			w.sc.Skip()
		}
	}
	if first != '"' && first != '[' && in.items > 0 {
		in.items = 1 // one prompt of token ids
	}
}

func (w *walker) tokenID(name string) {
	switch c := w.sc.Peek(); {
	case c == 'n':
		w.sc.Literal()
	case c == '-' || c >= '0' && c <= '9':
		if _, ok := jsonscan.Integral(w.sc.Number()); !ok {
			w.wrongType(name, wantInput, '[')
		}
	default:
		w.wrongType(name, wantInput, '[')
		w.sc.Skip()
	}
}

// responsesInput prices the Responses API input: a string or an array of
// items.
func (w *walker) responsesInput() {
	switch c := w.sc.Peek(); c {
	case 'n':
		w.sc.Literal()
	case '"':
		if v := w.str("", "input"); v.raw != "" {
			w.t.add(tokensPerMessage)
			w.t.text("user")
			w.textOf(v)
		}
	case '[':
		w.sc.Open()
		for n := 0; w.sc.More(&n, ']'); {
			w.item()
		}
	default:
		w.wrongType("input", "a string or an array of input items", c)
		w.sc.Skip()
	}
}

// item prices one input item of the Responses API: a message, a function
// call, a function call output, or another item priced by size. Its type
// may come after its content, so the content is checked where it stands
// and priced once the type is known.
func (w *walker) item() {
	const path = "input"
	w.sc.SkipSpace()
	start := w.sc.Pos()
	if !w.container('{', path, "an object") {
		w.t.add(tokensPerMessage) // a null item is an empty message
		return
	}
	var typ, role, name, args, callID, id jstring
	var content, output span
	typed := false  // the type was read: a content is priced where it stands
	inline := false // a reasoning item's encrypted_content or an image_generation_call's result is sent
	var o object
	w.begin(&o, itemFields, path)
	for {
		f, ok := w.next(&o)
		if !ok {
			break
		}
		switch f {
		case "type":
			typ, typed = w.str(path, f), true
		case "role":
			role = w.str(path, f)
		case "name":
			name = w.str(path, f)
		case "arguments":
			args = w.str(path, f)
		case "call_id":
			callID = w.str(path, f)
		case "id":
			id = w.str(path, f)
		case "encrypted_content", "result":
			inline = w.present() || inline
		case "content":
			content = w.deferred(typed && isMessage(w.decode(typ)), func() { w.content("input.content") })
		case "output":
			output = w.deferred(typed && w.decode(typ) == "function_call_output", w.itemOutput)
		}
	}
	switch t := w.decode(typ); {
	case t == "item_reference" || t == "":
		// A reference to an item of a stored response; an item with
		// no type and an id may be read as one too.
		w.ref(RefItem, "input.id", id)
	case (t == "reasoning" || t == "image_generation_call") && !inline:
		// Without what it holds, the API reads the stored item by id.
		w.ref(RefItem, "input.id", id)
	}
	switch t := w.decode(typ); {
	case isMessage(t):
		w.t.add(tokensPerMessage)
		w.textOf(role)
		w.priceSpan(content, func() { w.content("input.content") })
	case t == "function_call":
		w.textOf(callID)
		w.textOf(name)
		w.textOf(args)
	case t == "function_call_output":
		w.textOf(callID)
		w.priceSpan(output, w.itemOutput)
	case t == "item_reference":
		// Refers to a stored item whose size is unknown here; the actual
		// usage settles it.
	default:
		w.t.add(bytesTokens(w.sc.Pos() - start))
	}
}

// present reads any value and reports whether it is not null.
func (w *walker) present() bool {
	if w.sc.Peek() == 'n' {
		w.sc.Literal()
		return false
	}
	w.sc.Skip()
	return true
}

// idRef reads an object (or null) at path whose only member read, id,
// names an object stored upstream of kind.
func (w *walker) idRef(kind RefKind, path string, fs *fieldSet) {
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
		w.ref(kind, path+".id", w.str(path, name))
	}
}

// promptTemplate reads a Responses API prompt: the id of a template
// stored in the account, a reference, and its variables, each a string
// priced as text or a content part (input_text, input_image,
// input_file) priced and checked as one. The template itself is not
// priced: its size is unknown here, and the actual usage settles it.
func (w *walker) promptTemplate() {
	const path = "prompt"
	if !w.container('{', path, "an object") {
		return
	}
	var o object
	w.begin(&o, promptFields, path)
	for {
		name, ok := w.next(&o)
		if !ok {
			return
		}
		if name == "id" {
			w.ref(RefPrompt, "prompt.id", w.str(path, name))
			continue
		}
		const vars = "prompt.variables"
		if !w.container('{', vars, "an object") {
			continue
		}
		var vo object
		w.begin(&vo, anyFields, vars)
		for {
			if _, _, ok := w.member(&vo); !ok {
				break
			}
			switch c := w.sc.Peek(); c {
			case '"', 'n':
				w.text(vars, "")
			case '{':
				w.part(vars)
			default:
				w.wrongType(vars, "a string or a content part", c)
				w.sc.Skip()
			}
		}
	}
}

// itemOutput reads the output of a tool call's output item: a string or
// an array of content parts (function_call_output), or one part (a
// computer_call_output's screenshot, whose file_id is a reference).
func (w *walker) itemOutput() {
	if w.sc.Peek() == '{' {
		w.part("input.output")
		return
	}
	w.content("input.output")
}

func isMessage(typ string) bool { return typ == "" || typ == "message" }

// deferred reads a value with read, which prices it: at once when priced
// is set (what the value is, hence its price, is known), returning an
// empty span; otherwise it only checks it and returns its span, to price
// with priceSpan once known.
func (w *walker) deferred(priced bool, read func()) span {
	if priced {
		read()
		return span{}
	}
	w.sc.SkipSpace()
	start := w.sc.Pos()
	mute := w.t.mute
	w.t.mute = true
	read()
	w.t.mute = mute
	return span{start, w.sc.Pos()}
}

// priceSpan prices with read a value deferred returned the span of, if it
// was not priced. A walk that only checks has checked it already.
func (w *walker) priceSpan(s span, read func()) {
	if s.end > s.start && !w.t.mute {
		w.at(s.start, read)
	}
}
