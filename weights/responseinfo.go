package weights

import (
	"encoding/json"
	"math"
)

// MaxResponseIDBytes bounds the id a [ResponseInfo] keeps: a longer id is
// not one a provider issues, and is dropped.
const MaxResponseIDBytes = 128

// ResponseInfo is what a Responses API response object says besides its
// usage: its id, its status and the built-in tool calls of its output,
// which providers bill per call on top of the tokens. Every figure is
// read from untrusted input: a field of another type reads as absent.
type ResponseInfo struct {
	// ID is the response's id ("resp_..."), at most MaxResponseIDBytes
	// bytes; empty when absent or longer.
	ID string
	// Status is the response's status: queued, in_progress, completed,
	// incomplete, failed or cancelled (empty when absent, at most 32
	// bytes).
	Status string
	// WebSearchCalls and FileSearchCalls count the output items of type
	// web_search_call and file_search_call.
	WebSearchCalls, FileSearchCalls int64
}

// responseFields are the members of a response object a ResponseInfo
// reads, each kept raw so that a value of another type spoils only
// itself.
type responseFields struct {
	ID     json.RawMessage `json:"id"`
	Status json.RawMessage `json:"status"`
	Output json.RawMessage `json:"output"`
}

// info returns what f says, tolerating every type.
func (f *responseFields) info() ResponseInfo {
	var r ResponseInfo
	var s jstr
	if s.UnmarshalJSON(f.ID) == nil && len(s) <= MaxResponseIDBytes {
		r.ID = string(s)
	}
	s = ""
	if s.UnmarshalJSON(f.Status) == nil && len(s) <= 32 {
		r.Status = string(s)
	}
	var items []json.RawMessage
	if firstByte(f.Output) == '[' && json.Unmarshal(f.Output, &items) == nil {
		for _, it := range items {
			var item struct {
				Type json.RawMessage `json:"type"`
			}
			var t jstr
			if firstByte(it) != '{' || json.Unmarshal(it, &item) != nil || t.UnmarshalJSON(item.Type) != nil {
				continue
			}
			switch t {
			case "web_search_call":
				r.WebSearchCalls = min(r.WebSearchCalls+1, math.MaxInt64)
			case "file_search_call":
				r.FileSearchCalls = min(r.FileSearchCalls+1, math.MaxInt64)
			}
		}
	}
	return r
}

// merge updates r with what a later object of the same stream says: its
// id when r has none, its status and tool calls when it names any.
func (r ResponseInfo) merge(n ResponseInfo) ResponseInfo {
	if r.ID == "" {
		r.ID = n.ID
	}
	if n.Status != "" {
		r.Status = n.Status
	}
	if n.WebSearchCalls > 0 || n.FileSearchCalls > 0 {
		r.WebSearchCalls, r.FileSearchCalls = n.WebSearchCalls, n.FileSearchCalls
	}
	return r
}

// ReadResponseInfo reads the response object of a Responses API body: the
// body itself (POST /v1/responses, GET /v1/responses/{id}) or, for an
// event, its "response" member. A body that is not a JSON object reads as
// the zero ResponseInfo.
func ReadResponseInfo(body []byte) ResponseInfo {
	var v struct {
		responseFields
		Response json.RawMessage `json:"response"`
	}
	if firstByte(body) != '{' || json.Unmarshal(body, &v) != nil {
		return ResponseInfo{}
	}
	if firstByte(v.Response) == '{' {
		var inner responseFields
		if json.Unmarshal(v.Response, &inner) == nil {
			return inner.info()
		}
	}
	return v.responseFields.info()
}
