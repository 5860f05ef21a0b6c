package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/sluicehq/sluice/internal/eventstream"
	"github.com/sluicehq/sluice/internal/jsonscan"
)

// DefaultMaxEventBytes bounds the memory a [StreamReader] holds for one
// server-sent event: 4 MiB, enough for a Responses API "response.completed"
// event repeating a long answer. A larger event passes through unparsed:
// its text is not counted, so the stream is then charged at least its
// output reservation (see [StreamResult].Unread).
const DefaultMaxEventBytes = 4 << 20

// StreamConfig configures a [StreamReader].
type StreamConfig struct {
	// Counter counts the streamed text when the stream ends without a usage
	// report. Nil counts one token per four characters.
	Counter Counter
	// InputTokens is reported as the prompt size when no usage arrives:
	// the request's [Estimate].InputTokens. With OutputTokens it bounds a
	// plausible report, see [StreamResult].Fallback.
	InputTokens int64
	// MaxInputTokens is [Estimate].MaxInputTokens: a sampled estimate's
	// bound on a plausible prompt count, when above the one InputTokens
	// sets.
	MaxInputTokens int64
	// OutputTokens is the request's output reservation,
	// [Estimate].OutputTokens: it bounds a plausible report, and is
	// charged (or the streamed text's count, when larger) when the
	// reported completion count cannot be used, or when an event passed
	// unread and no report followed it (see [StreamResult].Unread).
	OutputTokens int64
	// StripUsage removes the usage-only chunk that
	// stream_options.include_usage adds (a chunk with an empty "choices"
	// and a "usage" object) from the bytes passed to the client. Set it
	// when [InjectIncludeUsage] added the option, so the client sees the
	// stream it asked for. Every other byte is passed through unchanged;
	// the "usage": null field the option adds to the other chunks stays, as
	// clients ignore it.
	StripUsage bool
	// MaxEventBytes bounds the memory held for one event. Zero means
	// DefaultMaxEventBytes. A larger event is passed on unread (see
	// [StreamResult].Unread).
	MaxEventBytes int
	// EventStream says the body is an AWS event stream (Amazon Bedrock's
	// ConverseStream, application/vnd.amazon.eventstream) rather than
	// server-sent events: its messages are checked (checksums, at most
	// MaxEventBytes each) and read for their text (contentBlockDelta),
	// their end (messageStop) and their usage (metadata); a message over
	// the bound, or one that does not check, ends the reading (the
	// stream is then not Completed, and the rest of it is Unread).
	// StripUsage does not apply.
	EventStream bool
}

// StreamResult is what a [StreamReader] learnt from a stream.
type StreamResult struct {
	// Usage is the usage to charge: the last usage the upstream reported,
	// checked as [Estimate.CheckUsage] does against the StreamConfig's
	// InputTokens and OutputTokens and against the streamed text (a
	// completion count below the streamed text's tokens divided by
	// [UsageFactor] is implausible too). When the upstream reported none,
	// it is InputTokens and the streamed text's count. When an event
	// passed unread (see Unread) and no report came after the last such
	// event, it is InputTokens and OutputTokens (or the streamed text's
	// count, when larger), whatever was reported before: the unread
	// event's text is not in the count, and it may have carried a later
	// report. Usage.Estimated is true when a figure is not the upstream's.
	Usage Usage
	// Fallback says why Usage is not the upstream's report:
	// FallbackMissing when there was none (or none after the last unread
	// event), else the reason the report could not be used as is
	// (FallbackNone when it was).
	Fallback UsageFallback
	// Reported reports whether the upstream sent a usage object with a
	// prompt or completion count, usable or not.
	Reported bool
	// Completed reports whether the stream ended normally: a "[DONE]"
	// event, a terminal Responses API event (response.completed,
	// response.incomplete, response.failed), or Anthropic's message_stop.
	Completed bool
	// ErrorMessage is the message of an error event, if the upstream sent
	// one.
	ErrorMessage string
	// Response is what the Responses API events' response objects said
	// (response.created, response.completed...): the response's id, its
	// last status and the built-in tool calls of its final output.
	Response ResponseInfo
	// Events is the number of events seen.
	Events int
	// Unread is the number of events passed on without being read: a
	// server-sent event over MaxEventBytes, or, in an event stream, the
	// message over the bound (or failing its checksum) that ended the
	// reading, with everything after it. Their text is not in the
	// streamed count and a usage they carried is lost, so unless a usage
	// report came after the last of them, Usage charges the output
	// reservation (or the streamed text's count, when larger): never
	// the text counted before them alone. A report that came after is
	// checked, and its output raised to the reservation when below it
	// (FallbackImplausibleOutput): nothing bounds it from below then.
	Unread int
	// Stripped is the number of usage-only events removed from the output.
	Stripped int
}

// StreamReader wraps a server-sent-events response body of the Chat
// Completions, Completions or Responses API, or of Anthropic's Messages
// API (whose message_start event reports the prompt and its cache
// figures, and whose message_delta events the output so far: each report
// updates the figures it carries). Read returns the upstream bytes
// unchanged (except for the usage-only chunk when StripUsage is set) while
// the reader picks up the usage report and counts the streamed text for the
// case where no report arrives (a cut stream, an upstream that ignores
// stream_options). An event over MaxEventBytes is passed on unread and
// the stream charged at least its reservation unless a report follows
// (see [StreamResult].Unread). Events may be split across reads at any
// byte; the result does not depend on where.
//
// Read must be called from one goroutine at a time; Result and
// StreamedTokens may be called concurrently with it, to charge a long stream
// as it goes.
type StreamReader struct {
	// What a chunk read whole touches comes first, within a few cache
	// lines: a slow stream's state is out of the cache at every chunk.
	r     io.Reader
	strip bool

	// Parser state, owned by the reading goroutine.
	pendingCR bool
	lineOver  bool
	dataOver  bool
	hasData   bool
	rawSpill  bool // the current event outgrew maxEv and is passed on
	finished  bool
	maxEv     int
	outPos    int
	out       []byte // bytes ready for the client in strip mode
	line      []byte
	raw       []byte // bytes of the current event, held back in strip mode
	eventType string
	tmpl      chunkTemplate
	pending   []byte               // streamed text not yet counted
	frames    *eventstream.Decoder // an event stream's, else nil
	framesErr bool                 // the frames' error was counted as unread

	mu      sync.Mutex
	events  int   // res.Events
	pendLen int   // len(pending), for StreamedTokens
	counted int64 // tokens of the streamed text counted so far
	unread  int   // res.Unread
	// unreadLast says an event was passed unread since the last usage
	// report: the report may not be the upstream's last.
	unreadLast bool

	srcErr  error
	counter Counter
	data    []byte
	res     StreamResult
	report  UsageReport // the last usage reported, when res.Reported
	input   int64
	inMax   int64 // StreamConfig.MaxInputTokens
	output  int64
}

// NewStreamReader returns a StreamReader reading the SSE body r.
func NewStreamReader(r io.Reader, cfg StreamConfig) *StreamReader {
	s := &StreamReader{r: r, counter: cfg.Counter, strip: cfg.StripUsage, maxEv: cfg.MaxEventBytes, input: cfg.InputTokens, inMax: cfg.MaxInputTokens, output: cfg.OutputTokens}
	if s.counter == nil {
		s.counter = ratioCounter{charsPerToken: 4}
	}
	if s.maxEv <= 0 {
		s.maxEv = DefaultMaxEventBytes
	}
	if cfg.EventStream {
		s.strip, s.frames = false, eventstream.NewDecoder(s.maxEv)
	}
	return s
}

// NewStreamReader returns a StreamReader for the response to a request
// priced as est, counting fallback output with the model's tokenizer and
// checking the reported usage against est; the response to a Converse
// request ([EndpointConverse]) is read as an event stream.
// stripUsage is the injected result of [InjectIncludeUsage].
func (e *Estimator) NewStreamReader(r io.Reader, est Estimate, stripUsage bool) *StreamReader {
	c, err := e.Counter(est.Model)
	if err != nil {
		c = nil
	}
	return NewStreamReader(r, StreamConfig{Counter: c, InputTokens: est.InputTokens, MaxInputTokens: est.MaxInputTokens, OutputTokens: est.OutputTokens, StripUsage: stripUsage,
		EventStream: est.Endpoint == EndpointConverse})
}

// Read implements io.Reader.
func (s *StreamReader) Read(p []byte) (int, error) {
	if !s.strip {
		n, err := s.r.Read(p)
		s.feed(p[:n])
		if err != nil {
			s.finish()
		}
		return n, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for s.outPos == len(s.out) {
		s.out, s.outPos = s.out[:0], 0
		if s.srcErr != nil {
			s.finish()
			if s.outPos == len(s.out) {
				return 0, s.srcErr
			}
			break
		}
		// The source is read into p. The events read whole are passed on
		// where they are, in p[:w]; feed keeps the bytes of the others (in
		// raw or out) before the copy below overwrites them: the reader
		// holds no buffer of its own while it waits for the next event.
		n, err := s.r.Read(p)
		w := s.feed(p[:n])
		if err != nil {
			s.srcErr = err
		}
		if w > 0 {
			s.outPos = copy(p[w:], s.out)
			return w + s.outPos, nil
		}
		if err == nil && n == 0 && s.outPos == len(s.out) {
			return 0, nil
		}
	}
	n := copy(p, s.out[s.outPos:])
	s.outPos += n
	return n, nil
}

// Result returns what the reader has learnt so far; after Read has returned
// an error (io.EOF included), the final result.
func (s *StreamReader) Result() StreamResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.res
	r.Events, r.Unread = s.events, s.unread
	streamed := s.counted + int64(s.pendLen+3)/4
	switch {
	case r.Reported && !s.unreadLast:
		r.Usage, r.Fallback = Estimate{InputTokens: s.input, MaxInputTokens: s.inMax, OutputTokens: s.output}.check(s.report, streamed)
		if s.unread > 0 && r.Usage.OutputTokens < s.output {
			// The unread events' text is not in streamed, so the check
			// could not bound the report from below: a report of less
			// than the reservation after them is implausible.
			r.Usage.OutputTokens, r.Usage.Estimated, r.Fallback = s.output, true, FallbackImplausibleOutput
		}
	case s.unread > 0:
		// The text of the unread events is not in streamed, and the
		// last report may be in them: charged as reserved.
		r.Usage, r.Fallback = Usage{InputTokens: max(s.input, 0), OutputTokens: max(s.output, streamed), Estimated: true}, FallbackMissing
	default:
		r.Usage, r.Fallback = Usage{InputTokens: max(s.input, 0), OutputTokens: streamed, Estimated: true}, FallbackMissing
	}
	return r
}

// AtEventEnd reports whether the bytes Read has returned so far end where
// an event ends, so that an event of the caller's own (the error event of
// a stream cut short) can follow without breaking one in two. A stream
// that cannot be parsed (a corrupt event-stream message) counts as at an
// end: no later byte would make it one. Call it from the goroutine that
// reads.
func (s *StreamReader) AtEventEnd() bool {
	switch {
	case s.frames != nil:
		return s.frames.Pending() == 0 || s.frames.Err() != nil
	case s.strip:
		// An event still being read is held back, unless it outgrew
		// the bound and is passed on as it comes.
		return !s.rawSpill && s.outPos == len(s.out)
	}
	return s.between()
}

// Usage returns Result().Usage: the checked reported usage, or the
// fallback count.
func (s *StreamReader) Usage() Usage { return s.Result().Usage }

// StreamedTokens returns the tokens of the text streamed so far, counted
// with the tokenizer in batches of a few kilobytes (the text of the last
// batch is estimated at four bytes per token until counted). It is the
// figure to charge a long stream as it goes, before any usage report.
func (s *StreamReader) StreamedTokens() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counted + int64(s.pendLen+3)/4
}

// feed parses a chunk of the stream. An event that b holds whole, of the
// shape nearly every event has (a data line, after an event line or not,
// then a blank line, with LF line ends, within MaxEventBytes), is read
// where it is, in one pass and without a copy (see whole); the others go
// line by line through the reader's buffers. In strip mode, feed returns
// w: the bytes of b[:w] (moved there from later in b) are output, ahead
// of what it added to out.
func (s *StreamReader) feed(b []byte) (w int) {
	if s.frames != nil {
		s.feedFrames(b)
		return 0
	}
	for i := 0; i < len(b); {
		if s.between() {
			if m, keep, ok := s.whole(b[i:]); ok {
				switch {
				case !s.strip || !keep:
				case len(s.out) == 0:
					w += copy(b[w:], b[i:i+m])
				default:
					s.out = append(s.out, b[i:i+m]...)
				}
				i += m
				continue
			}
		}
		i += s.feedLines(b[i:])
	}
	return w
}

// between reports whether the reader is between events: no line, field
// or byte of an event held.
func (s *StreamReader) between() bool {
	return !s.pendingCR && len(s.line) == 0 && !s.lineOver && !s.hasData && !s.dataOver &&
		s.eventType == "" && len(s.raw) == 0 && !s.rawSpill
}

// whole reads the event at the start of b when it is whole and of the
// common shape (see feed), as the line-by-line path would: it returns
// its length, whether its bytes go to the client, and ok; not ok (nothing
// read) for any other event.
func (s *StreamReader) whole(b []byte) (n int, keep, ok bool) {
	// An event beyond the bound takes the other path, which bounds it.
	b = b[:min(len(b), s.maxEv)]
	line, rest, found := bytes.Cut(b, []byte("\n"))
	var typ []byte
	hasType := false
	if found && bytes.HasPrefix(line, []byte("event:")) {
		typ, hasType = fieldValue(line[len("event:"):]), true
		line, rest, found = bytes.Cut(rest, []byte("\n"))
	}
	if !found || !bytes.HasPrefix(line, []byte("data:")) || len(rest) == 0 || rest[0] != '\n' {
		return 0, false, false
	}
	n = len(b) - len(rest) + 1
	if bytes.IndexByte(b[:n], '\r') >= 0 {
		return 0, false, false // CR ends a line too
	}
	eventType := ""
	if hasType {
		eventType = string(typ)
	}
	s.mu.Lock()
	s.events++
	s.mu.Unlock()
	if s.handle(eventType, fieldValue(line[len("data:"):])) && s.strip {
		s.mu.Lock()
		s.res.Stripped++
		s.mu.Unlock()
		return n, false, true
	}
	return n, true, true
}

// fieldValue is a field's value: what follows the colon, less one space.
func fieldValue(v []byte) []byte {
	if len(v) > 0 && v[0] == ' ' {
		return v[1:]
	}
	return v
}

// feedLines parses b line by line, through the reader's buffers, until an
// event ends or b does; it returns the bytes it read.
func (s *StreamReader) feedLines(b []byte) int {
	total := len(b)
	if s.pendingCR && len(b) > 0 {
		s.pendingCR = false
		if b[0] == '\n' {
			s.keep(b[:1])
			b = b[1:]
		}
		if s.endLine() {
			return total - len(b)
		}
	}
	for len(b) > 0 {
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			s.addLine(b)
			s.keep(b)
			return total
		}
		s.addLine(b[:i])
		s.keep(b[:i+1])
		if b[i] == '\r' {
			if i+1 == len(b) {
				s.pendingCR = true // the line ends once we know whether LF follows
				return total
			}
			if b[i+1] == '\n' {
				s.keep(b[i+1 : i+2])
				i++
			}
		}
		b = b[i+1:]
		if s.endLine() {
			return total - len(b)
		}
	}
	return total
}

// keep records bytes of the current event for output in strip mode.
func (s *StreamReader) keep(b []byte) {
	if !s.strip || len(b) == 0 {
		return
	}
	if s.rawSpill {
		s.out = append(s.out, b...)
		return
	}
	if len(s.raw)+len(b) > s.maxEv {
		s.out = append(s.out, s.raw...)
		s.out = append(s.out, b...)
		s.raw = s.raw[:0]
		s.rawSpill = true
		return
	}
	s.raw = append(s.raw, b...)
}

func (s *StreamReader) addLine(b []byte) {
	if s.lineOver {
		return
	}
	if len(s.line)+len(b) > s.maxEv {
		// Keep the start, which names the field, whatever the chunking.
		s.line = append(s.line, b[:s.maxEv-len(s.line)]...)
		s.lineOver = true
		return
	}
	s.line = append(s.line, b...)
}

// endLine interprets a complete line; it reports whether the line ended
// an event.
func (s *StreamReader) endLine() bool {
	line, over := s.line, s.lineOver
	s.line, s.lineOver = s.line[:0], false
	if len(line) == 0 && !over {
		s.dispatch()
		return true
	}
	if len(line) > 0 && line[0] == ':' {
		return false // comment
	}
	field, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], fieldValue(line[i+1:])
	}
	switch string(field) {
	case "data":
		if over || len(s.data)+len(value)+1 > s.maxEv {
			s.dataOver = true
		}
		if !s.dataOver {
			if s.hasData {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
		}
		s.hasData = true
	case "event":
		if !over {
			s.eventType = string(value)
		}
	}
	return false
}

// dispatch handles a complete event and releases (or drops) its bytes.
func (s *StreamReader) dispatch() {
	drop := false
	if s.hasData {
		s.mu.Lock()
		s.events++
		if s.dataOver {
			s.unread++
			s.unreadLast = true
		}
		s.mu.Unlock()
		if !s.dataOver {
			drop = s.handle(s.eventType, s.data)
		}
	}
	if s.strip {
		if drop && !s.rawSpill {
			s.mu.Lock()
			s.res.Stripped++
			s.mu.Unlock()
		} else if !s.rawSpill {
			s.out = append(s.out, s.raw...)
		}
		s.raw, s.rawSpill = s.raw[:0], false
	}
	s.data, s.dataOver, s.hasData, s.eventType = s.data[:0], false, false, ""
}

// streamEvent is the union of the chunk shapes of the streaming APIs.
type streamEvent struct {
	Object  string `json:"object"`
	Type    string `json:"type"`
	Choices []struct {
		Delta struct {
			Content          jstr `json:"content"`
			Refusal          jstr `json:"refusal"`
			ReasoningContent jstr `json:"reasoning_content"`
			ToolCalls        []struct {
				Function functionCall `json:"function"`
			} `json:"tool_calls"`
			FunctionCall *functionCall `json:"function_call"`
		} `json:"delta"`
		Text jstr `json:"text"`
	} `json:"choices"`
	Usage *rawUsage       `json:"usage"`
	Delta json.RawMessage `json:"delta"`
	// ContentBlock is the block an Anthropic content_block_start opens.
	ContentBlock json.RawMessage `json:"content_block"`
	// Message is an error event's message (a string), or the message an
	// Anthropic message_start event opens (an object with its usage).
	Message  json.RawMessage `json:"message"`
	Error    json.RawMessage `json:"error"`
	Response *struct {
		responseFields
		Usage *rawUsage       `json:"usage"`
		Error json.RawMessage `json:"error"`
	} `json:"response"`
	// Candidates and UsageMetadata are a Gemini API chunk's: the parts
	// of each candidate so far, the finish reason of its last chunk, and
	// the usage so far.
	Candidates    []geminiCandidate `json:"candidates"`
	UsageMetadata *geminiUsage      `json:"usageMetadata"`
	// PromptFeedback's blockReason ends a Gemini stream whose prompt
	// was blocked: no candidate follows.
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
}

// handle interprets one event's data and reports whether the event is a
// usage-only chunk to strip.
func (s *StreamReader) handle(eventType string, data []byte) (drop bool) {
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		s.mu.Lock()
		s.res.Completed = true
		s.mu.Unlock()
		return false
	}
	if firstByte(data) != '{' {
		return false
	}
	if v := s.readChunk(data); v != chunkOther || !json.Valid(data) {
		return false // a chunk of text without usage, or not JSON
	}
	return s.handleEvent(eventType, data)
}

// handleEvent interprets one event's valid JSON data with encoding/json,
// for every event readChunk leaves.
func (s *StreamReader) handleEvent(eventType string, data []byte) (drop bool) {
	var ev streamEvent
	if json.Unmarshal(data, &ev) != nil {
		return false
	}
	for _, c := range ev.Choices {
		s.text(string(c.Delta.Content))
		s.text(string(c.Delta.Refusal))
		s.text(string(c.Delta.ReasoningContent))
		for _, tc := range c.Delta.ToolCalls {
			s.text(string(tc.Function.Name))
			s.text(string(tc.Function.Arguments))
		}
		if fc := c.Delta.FunctionCall; fc != nil {
			s.text(string(fc.Name))
			s.text(string(fc.Arguments))
		}
		s.text(string(c.Text))
	}
	var message struct {
		Usage *rawUsage `json:"usage"`
	}
	var errMsg jstr
	switch firstByte(ev.Message) {
	case '{':
		_ = json.Unmarshal(ev.Message, &message)
	case '"':
		_ = errMsg.UnmarshalJSON(ev.Message)
	}
	switch ev.Type {
	case "response.output_text.delta", "response.refusal.delta", "response.function_call_arguments.delta",
		"response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		var d jstr
		if d.UnmarshalJSON(ev.Delta) == nil {
			s.text(string(d))
		}
	case "content_block_start", "content_block_delta": // Anthropic: a block's name and text, tool input, thinking
		var d struct {
			Name        jstr `json:"name"`
			Text        jstr `json:"text"`
			PartialJSON jstr `json:"partial_json"`
			Thinking    jstr `json:"thinking"`
		}
		raw := ev.Delta
		if ev.Type == "content_block_start" {
			raw = ev.ContentBlock
		}
		if json.Unmarshal(raw, &d) == nil {
			s.text(string(d.Name))
			s.text(string(d.Text))
			s.text(string(d.PartialJSON))
			s.text(string(d.Thinking))
		}
	}
	finished := ev.PromptFeedback != nil && ev.PromptFeedback.BlockReason != ""
	for _, c := range ev.Candidates {
		for _, p := range c.Content.Parts {
			s.text(string(p.Text))
			if fc := p.FunctionCall; fc != nil {
				s.text(string(fc.Name))
				s.text(string(fc.Args))
			}
		}
		finished = finished || c.FinishReason != ""
	}
	raw := ev.Usage
	switch {
	case ev.UsageMetadata != nil:
		raw = &rawUsage{rep: ev.UsageMetadata.rep}
	case raw != nil:
	case ev.Response != nil:
		raw = ev.Response.Usage
	case ev.Type == "message_start":
		raw = message.Usage
	}
	rep := raw.report()
	msg := errorMessage(ev.Error)
	if msg == "" && (ev.Type == "error" || eventType == "error") {
		msg = string(errMsg)
	}
	if msg == "" && ev.Response != nil {
		msg = errorMessage(ev.Response.Error)
	}
	s.mu.Lock()
	s.record(rep, msg)
	if ev.Response != nil {
		s.res.Response = s.res.Response.merge(ev.Response.info())
	}
	switch ev.Type {
	case "response.completed", "response.incomplete", "response.failed", "message_stop":
		s.res.Completed = true
	}
	if finished {
		s.res.Completed = true
	}
	s.mu.Unlock()
	return s.strip && rep.Found() && ev.Type == "" && len(ev.Choices) == 0
}

// record merges a usage report and notes an error message; s.mu is held.
func (s *StreamReader) record(rep UsageReport, msg string) {
	if rep.Found() {
		if !s.res.Reported {
			s.report = noReport
		}
		s.report, s.res.Reported = s.report.merge(rep), true
		s.unreadLast = false
	}
	if msg != "" && s.res.ErrorMessage == "" {
		s.res.ErrorMessage = msg
	}
}

// errorMessage extracts the message of an "error" value: an object with a
// "message" field, or a string.
func errorMessage(raw json.RawMessage) string {
	switch firstByte(raw) {
	case '{':
		var e struct {
			Message jstr `json:"message"`
		}
		if json.Unmarshal(raw, &e) == nil {
			if e.Message == "" {
				return "upstream error"
			}
			return string(e.Message)
		}
	case '"':
		var m jstr
		if m.UnmarshalJSON(raw) == nil && m != "" {
			return string(m)
		}
	}
	return ""
}

// fallbackBatch is how much streamed text is collected before counting.
const fallbackBatch = 4 << 10

// text collects streamed text for the fallback count.
func (s *StreamReader) text(t string) { streamText(s, t) }

// streamText collects streamed text, a string or bytes, for the fallback
// count.
func streamText[T ~string | ~[]byte](s *StreamReader, t T) {
	if len(t) == 0 {
		return
	}
	s.pending = append(s.pending, t...)
	if len(s.pending) >= fallbackBatch {
		// Count up to the last place where the tokenizer splits anyway, and
		// keep the rest for the next batch.
		ps := string(s.pending)
		cut := safeCut(ps, len(ps)-1)
		n := countText(s.counter, ps[:cut])
		rest := copy(s.pending, s.pending[cut:])
		s.pending = s.pending[:rest]
		s.mu.Lock()
		s.counted += int64(n)
		s.pendLen = rest
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	s.pendLen = len(s.pending)
	s.mu.Unlock()
}

// finish ends the stream: a last line without terminator and a last event
// without blank line are still interpreted, and the remaining text counted.
func (s *StreamReader) finish() {
	if s.finished {
		return
	}
	s.finished = true
	if s.pendingCR {
		s.pendingCR = false
		s.endLine()
	}
	if len(s.line) > 0 || s.lineOver {
		s.endLine()
	}
	if s.hasData || len(s.raw) > 0 {
		s.dispatch()
	}
	n := countText(s.counter, string(s.pending))
	s.pending = s.pending[:0]
	s.mu.Lock()
	s.counted += int64(n)
	s.pendLen = 0
	s.mu.Unlock()
}

// InjectIncludeUsage makes a streaming Chat Completions or Completions
// request ask for the final usage chunk by setting
// stream_options.include_usage to true, so the stream's real cost is known.
// It returns the body unchanged and injected false when ep is another
// endpoint, the request does not stream, or it already asks for usage.
// When injected is true, read the response with StreamConfig.StripUsage set
// so the client does not see the chunk it did not ask for. The rest of the
// body is kept byte for byte. An error matches [ErrMalformed].
func InjectIncludeUsage(ep Endpoint, body []byte) (out []byte, injected bool, err error) {
	if ep != EndpointChatCompletions && ep != EndpointCompletions {
		return body, false, nil
	}
	var sc jsonscan.Scanner
	sc.ResetBytes(body)
	if sc.Peek() != '{' {
		return body, false, malformed(ep, "", errWantObject)
	}
	open := sc.Pos()
	top, _ := lastMembers(&sc, "stream", "stream_options")
	if sc.End(); sc.Err() != nil {
		return body, false, malformed(ep, "", errWantObject)
	}
	stream, opts := top[0], top[1]
	if stream == nil || string(body[stream.start:stream.end]) != "true" {
		return body, false, nil
	}
	const option = `"include_usage":true`
	if opts == nil {
		ins := `"stream_options":{` + option + `},`
		return splice(body, open+1, open+1, ins), true, nil
	}
	switch body[opts.start] {
	case 'n':
		return splice(body, opts.start, opts.end, "{"+option+"}"), true, nil
	case '{':
	default:
		return body, false, malformed(ep, "stream_options", errWantObject)
	}
	sc.Seek(opts.start)
	found, inner := lastMembers(&sc, "include_usage")
	inc := found[0]
	if inc == nil {
		open := opts.start + 1
		sep := ","
		if inner == 0 {
			sep = ""
		}
		return splice(body, open, open, option+sep), true, nil
	}
	if string(body[inc.start:inc.end]) == "true" {
		return body, false, nil
	}
	return splice(body, inc.start, inc.end, "true"), true, nil
}

var errWantObject = errors.New("want a JSON object")

// splice returns a copy of b with b[from:to] replaced by s.
func splice(b []byte, from, to int, s string) []byte {
	out := make([]byte, 0, len(b)-(to-from)+len(s))
	out = append(out, b[:from]...)
	out = append(out, s...)
	if to <= len(b) {
		out = append(out, b[to:]...)
	}
	return out
}

// member is the value's span of one member of a JSON object.
type member struct{ start, end int }

// lastMembers reads the object at the scanner (a '{'), checking it, and
// returns the last member under each of at most two keys (nil when
// absent; keys are decoded) and the number of members: it holds no more,
// however many the object has.
func lastMembers(sc *jsonscan.Scanner, keys ...string) (found [2]*member, n int) {
	var spans [2]member
	sc.Open()
	for sc.More(&n, '}') {
		key, dirty := sc.Key()
		if dirty {
			key, _ = jsonscan.Unquote(key)
		}
		sc.SkipSpace()
		start := sc.Pos()
		sc.Skip()
		for i, k := range keys {
			if k == key {
				spans[i], found[i] = member{start: start, end: sc.Pos()}, &spans[i]
			}
		}
	}
	return found, n
}
