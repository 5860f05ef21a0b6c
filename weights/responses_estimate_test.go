package weights_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/weights"
)

// TestResponsesInputAsChat: an image and a file in a Responses API input
// cost what they cost in a Chat Completions message (images by the
// same rules, files by their size), so that one prompt moved from one
// API to the other reserves the same.
func TestResponsesInputAsChat(t *testing.T) {
	e, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		t.Fatal(err)
	}
	in := func(ep weights.Endpoint, body string) int64 {
		t.Helper()
		est, err := e.EstimateEndpoint(ep, []byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return est.InputTokens
	}
	// The cost of a part: a message with it less the message without it.
	resp := func(part string) int64 {
		const f = `{"model":"gpt-4o","input":[{"role":"user","content":[{"type":"input_text","text":"Look."}%s]}]}`
		return in(weights.EndpointResponses, strings.Replace(f, "%s", part, 1)) - in(weights.EndpointResponses, strings.Replace(f, "%s", "", 1))
	}
	chat := func(part string) int64 {
		const f = `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"Look."}%s]}]}`
		return in(weights.EndpointChatCompletions, strings.Replace(f, "%s", part, 1)) - in(weights.EndpointChatCompletions, strings.Replace(f, "%s", "", 1))
	}
	for _, detail := range []string{"low", "high", "auto"} {
		r := resp(`,{"type":"input_image","image_url":"https://example.com/a.png","detail":"` + detail + `"}`)
		c := chat(`,{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"` + detail + `"}}`)
		if r != c || r <= 0 {
			t.Errorf("an image at detail %s: %d tokens in a Responses input, %d in a chat message; want the same", detail, r, c)
		}
	}
	data := "data:application/pdf;base64," + strings.Repeat("QUJD", 4000)
	r := resp(`,{"type":"input_file","filename":"a.pdf","file_data":"` + data + `"}`)
	c := chat(`,{"type":"file","file":{"filename":"a.pdf","file_data":"` + data + `"}}`)
	if r < len64(data)/8 || r < c-8 || r > c+8 {
		t.Errorf("a file of %d bytes: %d tokens in a Responses input, %d in a chat message; want both by its size, within the wrapper's bytes", len(data), r, c)
	}
}

func len64(s string) int64 { return int64(len(s)) }
