package weights_test

import (
	"io"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/weights"
)

// TestReadResponseInfo: the id, status and built-in tool calls of a
// response object, or of an event's response member; a member of
// another type reads as absent and spoils nothing else.
func TestReadResponseInfo(t *testing.T) {
	long := strings.Repeat("r", weights.MaxResponseIDBytes+1)
	for _, tt := range []struct {
		body string
		want weights.ResponseInfo
	}{
		{`{"id":"resp_1","status":"completed","output":[{"type":"web_search_call"},{"type":"message"},{"type":"file_search_call"},{"type":"web_search_call"}]}`,
			weights.ResponseInfo{ID: "resp_1", Status: "completed", WebSearchCalls: 2, FileSearchCalls: 1}},
		{`{"type":"response.completed","response":{"id":"resp_2","status":"incomplete","output":[]}}`, weights.ResponseInfo{ID: "resp_2", Status: "incomplete"}},
		{`{"id":7,"status":"queued","output":{"type":"web_search_call"}}`, weights.ResponseInfo{Status: "queued"}},
		{`{"id":"` + long + `","status":["x"],"output":[1,"web_search_call",{"type":3},{"type":"file_search_call"}]}`, weights.ResponseInfo{FileSearchCalls: 1}},
		{`{"id":"resp_\u0033"}`, weights.ResponseInfo{ID: "resp_3"}},
		{`not json`, weights.ResponseInfo{}},
		{`{"id":"resp_4"`, weights.ResponseInfo{}},
	} {
		if got := weights.ReadResponseInfo([]byte(tt.body)); got != tt.want {
			t.Errorf("ReadResponseInfo(%.60s) = %+v; want %+v", tt.body, got, tt.want)
		}
	}
}

// TestStreamResponseInfo: a Responses API stream's result names the
// response (from response.created) and, from response.completed, its
// final status and built-in tool calls, with its usage.
func TestStreamResponseInfo(t *testing.T) {
	stream := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_9\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hello\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_9\",\"status\":\"completed\"," +
		"\"output\":[{\"type\":\"web_search_call\"},{\"type\":\"message\"}],\"usage\":{\"input_tokens\":30,\"input_tokens_details\":{\"cached_tokens\":10}," +
		"\"output_tokens\":9,\"output_tokens_details\":{\"reasoning_tokens\":4},\"total_tokens\":39}}}\n\n"
	sr := weights.NewStreamReader(strings.NewReader(stream), weights.StreamConfig{InputTokens: 30, OutputTokens: 100})
	if _, err := io.Copy(io.Discard, sr); err != nil {
		t.Fatal(err)
	}
	res := sr.Result()
	if want := (weights.ResponseInfo{ID: "resp_9", Status: "completed", WebSearchCalls: 1}); res.Response != want {
		t.Errorf("Response = %+v; want %+v", res.Response, want)
	}
	if u := res.Usage; !res.Completed || u.InputTokens != 30 || u.CachedInputTokens != 10 || u.OutputTokens != 9 || u.ReasoningTokens != 4 {
		t.Errorf("result %+v; want completed with 30 in (10 cached), 9 out (4 reasoning)", res)
	}
}
