package upstream

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A stream asking for usage ends with a usage-only chunk and [DONE]; the
// Responses API ends with response.completed; unknown models get 404.
func TestShapes(t *testing.T) {
	srv := httptest.NewServer(New(Config{OutputTokens: 3}))
	defer srv.Close()
	post := func(path, body string) (int, string) {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		path, body string
		status     int
		want       []string
	}{
		{"/v1/chat/completions", `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
			200, []string{`"choices":[],`, `"completion_tokens":3`, "data: [DONE]"}},
		{"/v1/completions", `{"model":"gpt-3.5-turbo-instruct","prompt":"hi","max_tokens":2}`,
			200, []string{`"text":" The quick"`, `"finish_reason":"length"`}},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":["a","b"],"encoding_format":"base64"}`,
			200, []string{`"index":1`, `"prompt_tokens":2`}},
		{"/v1/responses", `{"model":"gpt-4o","input":"hi","stream":true}`,
			200, []string{"event: response.created", "event: response.output_text.delta", "event: response.completed", `"output_tokens":3`}},
		{"/v1/chat/completions", `{"model":"nope","messages":[]}`, 404, []string{`"code":"model_not_found"`}},
		{"/v1/chat/completions", `{"model":`, 400, []string{`"code":"invalid_json"`}},
	} {
		status, body := post(tc.path, tc.body)
		if status != tc.status {
			t.Errorf("%s %s: status %d; want %d", tc.path, tc.body, status, tc.status)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s %s: body lacks %s:\n%s", tc.path, tc.body, w, body)
			}
		}
	}
}

// A cut stream breaks the connection without ending the response.
func TestCut(t *testing.T) {
	srv := httptest.NewServer(New(Config{OutputTokens: 10}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Sim-Fault", "cut")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
	if sc.Err() == nil || events == 0 || events >= 10 {
		t.Errorf("cut stream: %d events, error %v; want a few events then an error", events, sc.Err())
	}
}
