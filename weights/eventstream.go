package weights

import (
	"encoding/json"

	"github.com/sluicehq/sluice/internal/eventstream"
)

// converseEvent is the union of the payloads of a ConverseStream's
// events that the reader uses: a block's start (a tool's name), its
// deltas (text, a tool's input, reasoning), and the metadata event's
// usage. An exception's payload has a message.
type converseEvent struct {
	Start *struct {
		ToolUse *struct {
			Name jstr `json:"name"`
		} `json:"toolUse"`
	} `json:"start"`
	Delta *struct {
		Text    jstr `json:"text"`
		ToolUse *struct {
			Input jstr `json:"input"`
		} `json:"toolUse"`
		ReasoningContent *struct {
			Text jstr `json:"text"`
		} `json:"reasoningContent"`
	} `json:"delta"`
	Usage   *rawUsage `json:"usage"`
	Message jstr      `json:"message"`
}

// feedFrames reads the messages of an event stream (see
// StreamConfig.EventStream) as their bytes arrive. A message over the
// bound or failing its checksum ends the reading: it and the rest of the
// stream count as one unread event.
func (s *StreamReader) feedFrames(b []byte) {
	s.frames.Feed(b)
	for {
		m, ok := s.frames.Next()
		if !ok {
			if s.frames.Err() != nil && !s.framesErr {
				s.framesErr = true
				s.mu.Lock()
				s.unread++
				s.unreadLast = true
				s.mu.Unlock()
			}
			return
		}
		s.mu.Lock()
		s.events++
		s.mu.Unlock()
		s.handleFrame(m)
	}
}

// handleFrame interprets one message of a ConverseStream: an event's
// text and usage, and its end (messageStop, or the metadata event that
// follows it); an exception (its :exception-type, or :error-code for
// an error message) and its message. The stream's usage is the metadata
// event's, which Bedrock sends last.
func (s *StreamReader) handleFrame(m *eventstream.Message) {
	var ev converseEvent
	var msg string
	completed := false
	switch m.Get(":message-type") {
	case "event":
		if firstByte(m.Payload) != '{' || json.Unmarshal(m.Payload, &ev) != nil {
			return
		}
		if st := ev.Start; st != nil && st.ToolUse != nil {
			s.text(string(st.ToolUse.Name))
		}
		if d := ev.Delta; d != nil {
			s.text(string(d.Text))
			if d.ToolUse != nil {
				s.text(string(d.ToolUse.Input))
			}
			if d.ReasoningContent != nil {
				s.text(string(d.ReasoningContent.Text))
			}
		}
		switch m.Get(":event-type") {
		case "messageStop", "metadata":
			completed = true
		}
	case "exception":
		if json.Unmarshal(m.Payload, &ev) != nil || ev.Message == "" {
			ev.Message = jstr(m.Get(":exception-type"))
		}
		msg = string(ev.Message)
	case "error":
		msg = m.Get(":error-message")
		if msg == "" {
			msg = m.Get(":error-code")
		}
	}
	s.mu.Lock()
	s.record(ev.Usage.report(), msg)
	if completed && msg == "" {
		s.res.Completed = true
	}
	s.mu.Unlock()
}
