package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

// postJSON sends body to path with key and returns the status and the
// answer.
func (s *batchStack) postJSON(t *testing.T, key, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.URL+path, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, b := s.do(t, req, key)
	return resp.StatusCode, string(b)
}

// The bodies naming objects stored upstream: a file in a chat file part,
// a Responses input_file and input_image, a Responses item reference and
// a file_search tool's vector store.
func chatFile(id string) string {
	return `{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":[{"type":"text","text":"Summarise."},{"type":"file","file":{"file_id":"` + id + `"}}]}]}`
}

func respFile(id string) string {
	return `{"model":"gpt-4o-mini","max_output_tokens":20,"input":[{"role":"user","content":[{"type":"input_text","text":"Summarise."},{"type":"input_file","file_id":"` + id + `"}]}]}`
}

func respImage(id string) string {
	return `{"model":"gpt-4o-mini","max_output_tokens":20,"input":[{"role":"user","content":[{"type":"input_image","file_id":"` + id + `"}]}]}`
}

func respScreenshot(id string) string {
	return `{"model":"gpt-4o-mini","max_output_tokens":20,"input":[{"type":"computer_call_output","call_id":"c1","output":{"type":"computer_screenshot","file_id":"` + id + `"}}]}`
}

const (
	respItemRef     = `{"model":"gpt-4o-mini","max_output_tokens":20,"input":[{"type":"item_reference","id":"msg_someone"}]}`
	respVectorStore = `{"model":"gpt-4o-mini","max_output_tokens":20,"input":"Find it.","tools":[{"type":"file_search","vector_store_ids":["vs_someone"]}]}`
	respPlain       = `{"model":"gpt-4o-mini","max_output_tokens":20,"input":[{"role":"user","content":[{"type":"input_text","text":"Summarise."}]}]}`
)

// bigBatchFile is a batch input file of about n bytes.
func bigBatchFile(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(chatLine(fmt.Sprintf("r%d", i), strings.Repeat("Tell me about the sea. ", 20), 10) + "\n")
	}
	return b.String()
}

// TestBodyRefsOwnedByTenant: a body naming a file by id (a chat file
// part, a Responses input_file or input_image, a batch line) is served
// only for a file its tenant uploaded through the gateway: another
// tenant's file id and an id the gateway does not know are the same 400
// naming the field, never the id, and never reach the upstream; so are a
// Responses item reference and a file_search tool's vector stores. The
// tenant's own file is admitted, reserved one token per 4 bytes of its
// size on top of its reference. AllowUnknownFiles, AllowVectorStores and
// ResponsesAPI.AllowUnknownChains pass the others on.
func TestBodyRefsOwnedByTenant(t *testing.T) {
	s, rl, path := responsesStack(t, responsesPolicy, nil)
	file := bigBatchFile(40_000)
	mine := s.uploaded(t, keyA, file)

	before := s.sim.Requests()
	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"chat, another tenant's file", "/v1/chat/completions", chatFile(mine), "messages.content.file.file_id"},
		{"chat, an unknown file", "/v1/chat/completions", chatFile("file-nobody"), "messages.content.file.file_id"},
		{"responses, another tenant's file", "/v1/responses", respFile(mine), "input.content.file_id"},
		{"responses, an unknown file", "/v1/responses", respFile("file-nobody"), "input.content.file_id"},
		{"responses, another tenant's image", "/v1/responses", respImage(mine), "input.content.file_id"},
		{"responses, another tenant's screenshot", "/v1/responses", respScreenshot(mine), "input.output.file_id"},
		{"responses, an item reference", "/v1/responses", respItemRef, "input.id"},
		{"responses, a vector store", "/v1/responses", respVectorStore, "tools.vector_store_ids"},
		{"responses, a hostile id", "/v1/responses", respFile(`<\"x\u0000\n`), "input.content.file_id"},
	} {
		code, body := s.postJSON(t, batchKeyB, tc.path, tc.body)
		if _, c, _ := openAIError(t, []byte(body)); code != 400 || c != "invalid_value" || !strings.Contains(body, `"param":"`+tc.field+`"`) {
			t.Errorf("%s: %d %s; want 400 invalid_value naming %s", tc.name, code, body, tc.field)
		}
		if strings.Contains(body, mine) || strings.Contains(body, "nobody") || strings.Contains(body, "someone") || strings.Contains(body, "<") {
			t.Errorf("%s: the answer echoes the id: %s", tc.name, body)
		}
	}
	// Anthropic's files are never the gateway's: refused, in Anthropic's shape.
	if code, body := s.postJSON(t, batchKeyB, "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_someone"}}]}]}`); code != 400 || !strings.Contains(body, "messages.content.source.file_id") || strings.Contains(body, "someone") {
		t.Errorf("messages, a file: %d %s; want 400 naming the field, not the id", code, body)
	}
	if n := s.sim.Requests() - before; n != 0 {
		t.Errorf("%d refused requests reached the upstream", n)
	}
	// The same in a batch line: the upload is cut, never stored.
	files := s.sim.Files()
	if resp, b := s.upload(t, batchKeyB, `{"custom_id":"r1","method":"POST","url":"/v1/chat/completions","body":`+chatFile(mine)+"}\n"); resp.StatusCode != 400 || strings.Contains(string(b), mine) {
		t.Errorf("a batch line naming another tenant's file: %d %s; want 400 without the id", resp.StatusCode, b)
	}
	if n := s.sim.Files() - files; n != 0 {
		t.Errorf("the upstream stored %d refused batch files", n)
	}

	// The owner's own file, in a chat and a Responses body.
	if code, body := s.postJSON(t, keyA, "/v1/chat/completions", chatFile(mine)); code != 200 {
		t.Errorf("chat, the owner's file: %d %s; want 200", code, body)
	}
	if code, body := s.postJSON(t, keyA, "/v1/responses", respPlain); code != 200 {
		t.Fatalf("responses, no file: %d %s", code, body)
	}
	if code, body := s.postJSON(t, keyA, "/v1/responses", respFile(mine)); code != 200 {
		t.Fatalf("responses, the owner's file: %d %s; want 200", code, body)
	}
	var recs []requestlog.Record
	for _, r := range logged(t, rl, path, "POST /v1/responses", s.srv) {
		if !r.BeginOnly { // the refused bodies
			recs = append(recs, r)
		}
	}
	if len(recs) != 2 {
		t.Fatalf("%d records; want 2", len(recs))
	}
	// The file's reserve is its size over 4, plus its reference's JSON
	// (the part's ~45 bytes, priced by size).
	fileTokens := int64(len(file)+3) / 4
	if got := recs[1].Tokens - recs[0].Tokens; got < fileTokens || got > fileTokens+32 {
		t.Errorf("naming a file of %d bytes reserved %d tokens more than naming none; want %d (its size / 4) and its reference", len(file), got, fileTokens)
	}

	open := batchGateway(t, responsesPolicy, func(gc *gatewaySetup, _ *upstream.Config) {
		gc.AllowUnknownFiles, gc.AllowVectorStores = true, true
		gc.Responses = gateway.ResponsesAPI{AllowUnknownChains: true}
	})
	theirs := open.uploaded(t, keyA, batchFile)
	for _, tc := range []struct{ name, path, body string }{
		{"chat, another tenant's file", "/v1/chat/completions", chatFile(theirs)},
		{"responses, an unknown file", "/v1/responses", respFile("file-nobody")},
		{"responses, an item reference", "/v1/responses", respItemRef},
		{"responses, a vector store", "/v1/responses", respVectorStore},
	} {
		if code, body := open.postJSON(t, batchKeyB, tc.path, tc.body); code != 200 {
			t.Errorf("allowed: %s: %d %s; want 200", tc.name, code, body)
		}
	}
}

// TestBodyRefsStoredObjects: the other objects stored upstream a body
// can name by id are refused the same way (400 invalid_value naming the
// field, never the id, never reaching the upstream): the audio of an
// earlier chat completion and a reasoning item by id (unless
// ResponsesAPI.AllowUnknownChains), a stored prompt template and a
// custom skill (unless AllowStoredPrompts), a container (unless
// AllowContainers), and another tenant's file in a prompt's variables,
// a code_interpreter container's file_ids or an image_generation tool's
// mask. The tenant's own files there are served.
func TestBodyRefsStoredObjects(t *testing.T) {
	s, _, _ := responsesStack(t, responsesPolicy, nil)
	mine := s.uploaded(t, keyA, batchFile)
	chatAudio := `{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":"Hi"},{"role":"assistant","audio":{"id":"audio_someone"}},{"role":"user","content":"Again."}]}`
	reasoning := `{"model":"gpt-4o-mini","max_output_tokens":20,"input":[{"type":"reasoning","id":"rs_someone","summary":[]},{"role":"user","content":"Go on."}]}`
	prompt := `{"model":"gpt-4o-mini","max_output_tokens":20,"prompt":{"id":"pmpt_someone","version":"1"}}`
	promptFile := func(id string) string {
		return `{"model":"gpt-4o-mini","max_output_tokens":20,"input":"Hi","prompt":{"variables":{"doc":{"type":"input_file","file_id":"` + id + `"}}}}`
	}
	codeContainer := `{"model":"gpt-4o-mini","max_output_tokens":20,"input":"Run it.","tools":[{"type":"code_interpreter","container":"cntr_someone"}]}`
	codeFiles := func(id string) string {
		return `{"model":"gpt-4o-mini","max_output_tokens":20,"input":"Run it.","tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["` + id + `"]}}]}`
	}
	mask := func(id string) string {
		return `{"model":"gpt-4o-mini","max_output_tokens":20,"input":"Draw.","tools":[{"type":"image_generation","input_image_mask":{"file_id":"` + id + `"}}]}`
	}
	claudeContainer := `{"model":"claude-sonnet-4-5","max_tokens":10,"container":"container_someone","messages":[{"role":"user","content":"Hi"}]}`
	claudeSkill := `{"model":"claude-sonnet-4-5","max_tokens":10,"container":{"skills":[{"type":"custom","skill_id":"skill_someone","version":"latest"}]},"messages":[{"role":"user","content":"Hi"}]}`

	before := s.sim.Requests()
	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"chat, earlier audio", "/v1/chat/completions", chatAudio, "messages.audio.id"},
		{"responses, a reasoning item by id", "/v1/responses", reasoning, "input.id"},
		{"responses, a stored prompt", "/v1/responses", prompt, "prompt.id"},
		{"responses, another tenant's file in a prompt variable", "/v1/responses", promptFile(mine), "prompt.variables.file_id"},
		{"responses, a container", "/v1/responses", codeContainer, "tools.container"},
		{"responses, another tenant's file in a container", "/v1/responses", codeFiles(mine), "tools.container.file_ids"},
		{"responses, another tenant's mask", "/v1/responses", mask(mine), "tools.input_image_mask.file_id"},
		{"messages, a container", "/v1/messages", claudeContainer, "container"},
		{"messages, a custom skill", "/v1/messages", claudeSkill, "container.skills.skill_id"},
	} {
		code, body := s.postJSON(t, batchKeyB, tc.path, tc.body)
		if code != 400 || !strings.Contains(body, tc.field) {
			t.Errorf("%s: %d %s; want 400 naming %s", tc.name, code, body, tc.field)
		}
		if !strings.HasPrefix(tc.path, "/v1/messages") {
			if _, c, _ := openAIError(t, []byte(body)); c != "invalid_value" {
				t.Errorf("%s: code %q; want invalid_value", tc.name, c)
			}
		}
		if strings.Contains(body, mine) || strings.Contains(body, "someone") {
			t.Errorf("%s: the answer echoes the id: %s", tc.name, body)
		}
	}
	if n := s.sim.Requests() - before; n != 0 {
		t.Errorf("%d refused requests reached the upstream", n)
	}
	// The same in a batch line: refused before the upstream stores it.
	files := s.sim.Files()
	if resp, b := s.upload(t, batchKeyB, `{"custom_id":"r1","method":"POST","url":"/v1/responses","body":`+codeFiles(mine)+"}\n"); resp.StatusCode != 400 || strings.Contains(string(b), mine) {
		t.Errorf("a batch line naming another tenant's file in a container: %d %s; want 400 without the id", resp.StatusCode, b)
	}
	if n := s.sim.Files() - files; n != 0 {
		t.Errorf("the upstream stored %d refused batch files", n)
	}

	// The owner's own files there are served.
	for _, body := range []string{promptFile(mine), codeFiles(mine), mask(mine)} {
		if code, answer := s.postJSON(t, keyA, "/v1/responses", body); code != 200 {
			t.Errorf("the owner's file: %s: %d %s; want 200", body, code, answer)
		}
	}

	open := batchGateway(t, responsesPolicy, func(gc *gatewaySetup, _ *upstream.Config) {
		gc.AllowStoredPrompts, gc.AllowContainers = true, true
		gc.Responses = gateway.ResponsesAPI{AllowUnknownChains: true}
	})
	for _, tc := range []struct{ name, path, body string }{
		{"chat, earlier audio", "/v1/chat/completions", chatAudio},
		{"responses, a reasoning item by id", "/v1/responses", reasoning},
		{"responses, a stored prompt", "/v1/responses", prompt},
		{"responses, a container", "/v1/responses", codeContainer},
	} {
		if code, body := open.postJSON(t, batchKeyB, tc.path, tc.body); code != 200 {
			t.Errorf("allowed: %s: %d %s; want 200", tc.name, code, body)
		}
	}
}

// TestBodyRefsOutputFileSize: a batch's output file, named in a body by
// its owner, reserves only its reference until the gateway learns its
// size; once the tenant has read the file's content through the gateway
// (the bytes that passed), or another result's object (its bytes), the
// file reserves one token per 4 bytes of it, as an uploaded file does.
func TestBodyRefsOutputFileSize(t *testing.T) {
	s, rl, path := responsesStack(t, responsesPolicy, nil)
	get := func(p string) string {
		req, _ := http.NewRequest(http.MethodGet, s.URL+p, nil)
		resp, b := s.do(t, req, keyA)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", p, resp.StatusCode, b)
		}
		return string(b)
	}
	output := func() string {
		id := s.created(t, keyA, s.uploaded(t, keyA, batchFile), nil)
		s.batch(t, keyA, id, false)
		s.clk.Advance(time.Hour)
		var o struct {
			Status     string
			OutputFile string `json:"output_file_id"`
		}
		if b := get("/v1/batches/" + id); json.Unmarshal([]byte(b), &o) != nil || o.Status != "completed" || o.OutputFile == "" {
			t.Fatalf("batch: %s; want completed with an output file", b)
		}
		return o.OutputFile
	}
	post := func(body string) {
		if code, answer := s.postJSON(t, keyA, "/v1/responses", body); code != 200 {
			t.Fatalf("responses: %d %s; want 200", code, answer)
		}
	}
	byContent, byObject := output(), output()
	post(respPlain)
	post(respFile(byContent)) // size unknown: its reference only
	size := int64(len(get("/v1/files/" + byContent + "/content")))
	post(respFile(byContent))
	var obj struct{ Bytes int64 }
	if err := json.Unmarshal([]byte(get("/v1/files/"+byObject)), &obj); err != nil || obj.Bytes <= 0 {
		t.Fatalf("file object: %+v, %v", obj, err)
	}
	post(respFile(byObject))

	recs := logged(t, rl, path, "POST /v1/responses", s.srv)
	if len(recs) != 4 {
		t.Fatalf("%d records; want 4", len(recs))
	}
	const refSlack = 32 // the input_file part's JSON, priced by size
	for _, tc := range []struct {
		name string
		rec  int
		want int64
	}{
		{"an output file of unknown size", 1, 0},
		{"an output file whose content was read", 2, (size + 3) / 4},
		{"an output file whose object was read", 3, (obj.Bytes + 3) / 4},
	} {
		if got := recs[tc.rec].Tokens - recs[0].Tokens; got < tc.want || got > tc.want+refSlack {
			t.Errorf("%s: reserved %d tokens more than naming none; want %d (its size / 4) and its reference", tc.name, got, tc.want)
		}
	}
}
