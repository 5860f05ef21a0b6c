package upstream

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
)

// TestResponsesRoutes: the simulator stores its responses: a chain's
// input grows with it (the chain read from the cache), reasoning tokens
// and built-in tool calls are reported, a background response runs
// BackgroundDelay and can be cancelled (only it), a response is
// retrieved, listed and deleted, and the fault headers apply to these
// routes too.
func TestResponsesRoutes(t *testing.T) {
	clk := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	srv := httptest.NewServer(New(Config{OutputTokens: 4, BackgroundDelay: time.Minute}, WithClock(clk)))
	defer srv.Close()
	call := func(method, path, body string, hdr ...string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v map[string]any
		json.Unmarshal(b, &v)
		return resp.StatusCode, v
	}
	usage := func(v map[string]any, k string) float64 {
		u, _ := v["usage"].(map[string]any)
		f, _ := u[k].(float64)
		return f
	}
	code, first := call(http.MethodPost, "/v1/responses", `{"model":"gpt-4o","input":"abcdefgh","tools":[{"type":"web_search"},{"type":"file_search"}]}`, "X-Sim-Reasoning-Tokens", "5")
	if code != 200 || usage(first, "input_tokens") != 2 || usage(first, "output_tokens") != 9 {
		t.Fatalf("first: %d %v; want 2 in, 4 + 5 reasoning out", code, first)
	}
	out, _ := first["output"].([]any)
	if len(out) != 3 || out[0].(map[string]any)["type"] != "web_search_call" || out[1].(map[string]any)["type"] != "file_search_call" {
		t.Errorf("output %v; want a web_search_call, a file_search_call and the message", out)
	}
	id := first["id"].(string)
	_, second := call(http.MethodPost, "/v1/responses", `{"model":"gpt-4o","input":"abcd","previous_response_id":"`+id+`"}`)
	details, _ := second["usage"].(map[string]any)["input_tokens_details"].(map[string]any)
	if usage(second, "input_tokens") != 1+11 || details["cached_tokens"] != 11.0 {
		t.Errorf("chained usage %v; want 1 + the chain's 11 input tokens, 11 cached", second["usage"])
	}
	if code, v := call(http.MethodPost, "/v1/responses", `{"model":"gpt-4o","input":"x","previous_response_id":"resp-nobody"}`); code != 404 {
		t.Errorf("an unknown previous response: %d %v; want 404", code, v)
	}
	if code, v := call(http.MethodGet, "/v1/responses/"+id, ""); code != 200 || v["status"] != "completed" {
		t.Errorf("retrieval: %d %v", code, v)
	}
	if code, v := call(http.MethodGet, "/v1/responses/"+id+"/input_items", ""); code != 200 || len(v["data"].([]any)) != 1 {
		t.Errorf("input items: %d %v", code, v)
	}
	if code, _ := call(http.MethodPost, "/v1/responses/"+id+"/cancel", ""); code != 400 {
		t.Errorf("cancel of a response not in the background: %d; want 400", code)
	}
	if code, _ := call(http.MethodGet, "/v1/responses/"+id, "", "X-Sim-Fault", "500"); code != 500 {
		t.Errorf("retrieval with X-Sim-Fault 500: %d", code)
	}
	if code, v := call(http.MethodDelete, "/v1/responses/"+id, ""); code != 200 || v["deleted"] != true {
		t.Errorf("delete: %d %v", code, v)
	}
	if code, _ := call(http.MethodGet, "/v1/responses/"+id, ""); code != 404 {
		t.Errorf("retrieval after deletion: %d; want 404", code)
	}
	// Background: queued, in progress, completed a minute on; another
	// cancelled before.
	_, bg := call(http.MethodPost, "/v1/responses", `{"model":"gpt-4o","input":"abcd","background":true}`)
	_, bg2 := call(http.MethodPost, "/v1/responses", `{"model":"gpt-4o","input":"abcd","background":true}`)
	if bg["status"] != "queued" || bg["usage"] != nil {
		t.Fatalf("background create: %v", bg)
	}
	if _, v := call(http.MethodGet, "/v1/responses/"+bg["id"].(string), ""); v["status"] != "in_progress" {
		t.Errorf("background at once: %v; want in_progress", v["status"])
	}
	if _, v := call(http.MethodPost, "/v1/responses/"+bg2["id"].(string)+"/cancel", ""); v["status"] != "cancelled" || v["usage"] != nil {
		t.Errorf("background cancelled: %v; want cancelled without usage", v)
	}
	clk.Advance(time.Minute)
	if _, v := call(http.MethodGet, "/v1/responses/"+bg["id"].(string), ""); v["status"] != "completed" || usage(v, "total_tokens") != 5 {
		t.Errorf("background a minute on: %v; want completed with its usage", v)
	}
	if _, v := call(http.MethodGet, "/v1/responses/"+bg2["id"].(string), ""); v["status"] != "cancelled" {
		t.Errorf("the cancelled one a minute on: %v; want cancelled", v["status"])
	}
}

// TestResponsesCancelModes: with CancelKeepsOutput a background response
// cancelled half-way keeps about half its text, usage still null; with
// CancelBestEffort one answered cancelled runs on and completes.
func TestResponsesCancelModes(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // the status a retrieval shows once BackgroundDelay has passed
	}{
		{"keeps output", Config{OutputTokens: 20, BackgroundDelay: time.Hour, CancelKeepsOutput: true}, "cancelled"},
		{"best effort", Config{OutputTokens: 20, BackgroundDelay: time.Hour, CancelBestEffort: true}, "completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
			srv := httptest.NewServer(New(tc.cfg, WithClock(clk)))
			defer srv.Close()
			call := func(method, path, body string) map[string]any {
				t.Helper()
				req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var v map[string]any
				json.NewDecoder(resp.Body).Decode(&v)
				return v
			}
			bg := call(http.MethodPost, "/v1/responses", `{"model":"gpt-4o","input":"abcd","background":true}`)
			id, _ := bg["id"].(string)
			clk.Advance(30 * time.Minute)
			v := call(http.MethodPost, "/v1/responses/"+id+"/cancel", "")
			out, _ := v["output"].([]any)
			if v["status"] != "cancelled" || v["usage"] != nil || (len(out) > 0) != tc.cfg.CancelKeepsOutput {
				t.Errorf("cancel: %v; want cancelled, usage null, output kept only with CancelKeepsOutput", v)
			}
			if tc.cfg.CancelKeepsOutput {
				text := out[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"].(string)
				if n := len(strings.Fields(text)); n < 5 || n > 15 {
					t.Errorf("kept text %q: %d words; want about half of 20", text, n)
				}
			}
			clk.Advance(time.Hour)
			if v := call(http.MethodGet, "/v1/responses/"+id, ""); v["status"] != tc.want {
				t.Errorf("an hour on: %v; want %s", v["status"], tc.want)
			}
		})
	}
}
