package upstream_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// TestBatchAPI: the simulated Batch API stores an upload, runs a batch
// of it for BatchDelay on its clock, and ends it as its metadata says,
// with the usage of the requests done.
func TestBatchAPI(t *testing.T) {
	clk := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	srv := httptest.NewServer(upstream.New(upstream.Config{OutputTokens: 5, BatchDelay: time.Hour}, upstream.WithClock(clk)))
	defer srv.Close()
	call := func(method, path, ct string, body io.Reader) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, body)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	// Two requests: 3+3+ceil(8/4)=8 and 3+3+ceil(16/4)=10 prompt tokens;
	// 5 output tokens each, the second capped at 2.
	io.WriteString(fw, `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"12345678"}]}}
{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":2,"messages":[{"role":"user","content":"1234567890123456"}]}}
`)
	mw.Close()
	code, f := call(http.MethodPost, "/v1/files", mw.FormDataContentType(), &body)
	if code != 200 || f["purpose"] != "batch" {
		t.Fatalf("upload: %d %v", code, f)
	}
	create := func(md string) string {
		t.Helper()
		code, b := call(http.MethodPost, "/v1/batches", "application/json", bytes.NewReader([]byte(`{"input_file_id":"`+f["id"].(string)+`","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":`+md+`}`)))
		if code != 200 || b["status"] != "validating" {
			t.Fatalf("create: %d %v", code, b)
		}
		return b["id"].(string)
	}
	status := func(id string, cancel bool) map[string]any {
		t.Helper()
		method, path := http.MethodGet, "/v1/batches/"+id
		if cancel {
			method, path = http.MethodPost, path+"/cancel"
		}
		code, b := call(method, path, "", nil)
		if code != 200 {
			t.Fatalf("%s %s: %d %v", method, path, code, b)
		}
		return b
	}
	done := create(`{}`)
	failed := create(`{"sim_outcome":"failed"}`)
	cancelled := create(`{"sim_completed":"1"}`)
	for _, id := range []string{done, failed} {
		if b := status(id, false); b["status"] != "in_progress" || b["usage"] != nil {
			t.Errorf("%s at once: %v; want in_progress without usage", id, b)
		}
	}
	if b := status(cancelled, true); b["status"] != "cancelling" {
		t.Errorf("cancel: %v; want cancelling", b)
	}
	clk.Advance(time.Hour)
	usage := func(b map[string]any) [3]float64 {
		u, _ := b["usage"].(map[string]any)
		d, _ := u["input_tokens_details"].(map[string]any)
		if u == nil || d == nil {
			return [3]float64{-1, -1, -1}
		}
		return [3]float64{u["input_tokens"].(float64), u["output_tokens"].(float64), u["total_tokens"].(float64)}
	}
	if b := status(done, false); b["status"] != "completed" || usage(b) != [3]float64{18, 7, 25} || b["output_file_id"] == nil {
		t.Errorf("completed: %v; want usage 18 in, 7 out and an output file", b)
	}
	if b := status(failed, false); b["status"] != "failed" || b["usage"] != nil || b["errors"] == nil {
		t.Errorf("failed: %v; want errors and no usage", b)
	}
	if b := status(cancelled, false); b["status"] != "cancelled" || usage(b) != [3]float64{8, 5, 13} {
		t.Errorf("cancelled with one done: %v; want the first request's usage, 8 in, 5 out", b)
	}
	if code, _ := call(http.MethodGet, "/v1/batches/batch_nope", "", nil); code != 404 {
		t.Errorf("unknown batch: %d; want 404", code)
	}
}
