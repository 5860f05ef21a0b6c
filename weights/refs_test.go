package weights_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/weights"
)

// TestRefs: every id of an object stored upstream that a body names (a
// file of a chat file part, of a Responses input_file or input_image,
// of a Messages source or container upload; a Responses item reference;
// a file_search tool's vector stores) is reported with the path of its
// field, decoded, once, wherever it stands in its object; a body naming
// none reports none, and one naming more than MaxRefs is refused.
func TestRefs(t *testing.T) {
	e, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		t.Fatal(err)
	}
	type ref = weights.Ref
	file := func(field, id string) ref { return ref{Kind: weights.RefFile, Field: field, ID: id} }
	const (
		chatPart  = "messages.content.file.file_id"
		respPart  = "input.content.file_id"
		claudeSrc = "messages.content.source.file_id"
	)
	for _, tc := range []struct {
		name string
		ep   weights.Endpoint
		body string
		want []ref
	}{
		{"chat, no refs", weights.EndpointChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,QUJD"}}]}]}`, nil},
		{"chat file part", weights.EndpointChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-A"}},{"file":{"file_id":"file-\u0042"},"type":"file"}]}]}`,
			[]ref{file(chatPart, "file-A"), file(chatPart, "file-B")}},
		{"chat file_id in a part of another type", weights.EndpointChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"x","file_id":"file-A"}]}]}`,
			[]ref{file("messages.content.file_id", "file-A")}},
		{"responses input_file and input_image, type last, repeated", weights.EndpointResponses, `{"model":"gpt-4o","input":[{"content":[{"file_id":"file-A","type":"input_file"},{"type":"input_image","file_id":"file-I"},{"type":"input_file","file_id":"file-A"}],"role":"user"}]}`,
			[]ref{file(respPart, "file-A"), file(respPart, "file-I")}},
		{"responses function output file", weights.EndpointResponses, `{"model":"gpt-4o","input":[{"output":[{"type":"input_file","file_id":"file-O"}],"call_id":"c","type":"function_call_output"}]}`,
			[]ref{file("input.output.file_id", "file-O")}},
		{"responses computer screenshot, type last", weights.EndpointResponses, `{"model":"computer-use-preview","input":[{"call_id":"c","output":{"file_id":"file-S","type":"computer_screenshot"},"type":"computer_call_output"},{"type":"computer_call_output","call_id":"d","output":{"type":"computer_screenshot","image_url":"data:image/png;base64,AAAA"}}]}`,
			[]ref{file("input.output.file_id", "file-S")}},
		{"responses item references", weights.EndpointResponses, `{"model":"gpt-4o","input":[{"type":"item_reference","id":"msg_1"},{"id":"msg_2"},{"type":"message","id":"msg_3","role":"assistant","content":"ok"}]}`,
			[]ref{{Kind: weights.RefItem, Field: "input.id", ID: "msg_1"}, {Kind: weights.RefItem, Field: "input.id", ID: "msg_2"}}},
		{"responses vector stores", weights.EndpointResponses, `{"model":"gpt-4o","input":"Hi","tools":[{"type":"file_search","vector_store_ids":["vs_1","vs_2",null]}]}`,
			[]ref{{Kind: weights.RefVectorStore, Field: "tools.vector_store_ids", ID: "vs_1"}, {Kind: weights.RefVectorStore, Field: "tools.vector_store_ids", ID: "vs_2"}}},
		{"messages document and container upload", weights.EndpointMessages, `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_1"}},{"type":"image","source":{"file_id":"file_2","type":"file"}},{"type":"container_upload","file_id":"file_3"}]}]}`,
			[]ref{file(claudeSrc, "file_1"), file(claudeSrc, "file_2"), file("messages.content.file_id", "file_3")}},
		{"chat audio of an earlier response", weights.EndpointChatCompletions, `{"model":"gpt-4o-audio-preview","messages":[{"role":"user","content":"Hi"},{"role":"assistant","audio":{"id":"audio_1"}},{"audio":null,"role":"assistant"}]}`,
			[]ref{{Kind: weights.RefAudio, Field: "messages.audio.id", ID: "audio_1"}}},
		{"responses reasoning and image generation items by id", weights.EndpointResponses, `{"model":"gpt-5","input":[{"type":"reasoning","id":"rs_1","summary":[]},{"id":"rs_2","type":"reasoning","encrypted_content":"AAAA"},{"type":"reasoning","id":"rs_3","encrypted_content":null},{"type":"image_generation_call","id":"ig_1"},{"type":"image_generation_call","id":"ig_2","result":"QUJD"},{"type":"function_call","id":"fc_1","call_id":"c","name":"f","arguments":"{}"}]}`,
			[]ref{{Kind: weights.RefItem, Field: "input.id", ID: "rs_1"}, {Kind: weights.RefItem, Field: "input.id", ID: "rs_3"}, {Kind: weights.RefItem, Field: "input.id", ID: "ig_1"}}},
		{"responses prompt template and its variables", weights.EndpointResponses, `{"model":"gpt-4o","prompt":{"variables":{"doc":{"type":"input_file","file_id":"file-V"},"name":"Ann","pic":{"type":"input_image","image_url":"https://x/y.png"}},"id":"pmpt_1","version":"2"}}`,
			[]ref{file("prompt.variables.file_id", "file-V"), {Kind: weights.RefPrompt, Field: "prompt.id", ID: "pmpt_1"}}},
		{"responses code interpreter and image generation tools", weights.EndpointResponses, `{"model":"gpt-4o","input":"Hi","tools":[{"type":"code_interpreter","container":"cntr_1"},{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-C1","file-C2"]}},{"type":"image_generation","input_image_mask":{"file_id":"file-M"}},{"type":"image_generation","input_image_mask":{"image_url":"data:image/png;base64,AAAA"}}]}`,
			[]ref{{Kind: weights.RefContainer, Field: "tools.container", ID: "cntr_1"}, file("tools.container.file_ids", "file-C1"), file("tools.container.file_ids", "file-C2"), file("tools.input_image_mask.file_id", "file-M")}},
		{"messages container by id", weights.EndpointMessages, `{"model":"claude-sonnet-4-5","max_tokens":10,"container":"container_1","messages":[{"role":"user","content":"Hi"}]}`,
			[]ref{{Kind: weights.RefContainer, Field: "container", ID: "container_1"}}},
		{"messages container with skills", weights.EndpointMessages, `{"model":"claude-sonnet-4-5","max_tokens":10,"container":{"skills":[{"type":"anthropic","skill_id":"pptx","version":"latest"},{"skill_id":"skill_01","type":"custom"},{"skill_id":"skill_02"}],"id":"container_2"},"messages":[{"role":"user","content":"Hi"}]}`,
			[]ref{{Kind: weights.RefSkill, Field: "container.skills.skill_id", ID: "skill_01"}, {Kind: weights.RefSkill, Field: "container.skills.skill_id", ID: "skill_02"}, {Kind: weights.RefContainer, Field: "container.id", ID: "container_2"}}},
		{"messages new container", weights.EndpointMessages, `{"model":"claude-sonnet-4-5","max_tokens":10,"container":{"skills":[{"type":"anthropic","skill_id":"xlsx"}]},"messages":[{"role":"user","content":"Hi"}]}`, nil},
		{"null ids name nothing", weights.EndpointResponses, `{"model":"gpt-4o","input":[{"role":"user","content":[{"type":"input_file","file_id":null}]}]}`, nil},
	} {
		est, err := e.EstimateEndpoint(tc.ep, []byte(tc.body))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(est.Refs, tc.want) {
			t.Errorf("%s: Refs = %+v; want %+v", tc.name, est.Refs, tc.want)
		}
	}

	// A case variant of a reference's key is refused, as of any field read.
	for _, body := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"file","file":{"File_Id":"file-A"}}]}]}`,
		`{"model":"gpt-4o","input":"Hi","tools":[{"type":"file_search","Vector_Store_IDs":["vs_1"]}]}`,
		`{"model":"gpt-4o","input":[{"type":"item_reference","ID":"msg_1"}]}`,
		`{"model":"gpt-4o","messages":[{"role":"assistant","Audio":{"id":"audio_1"}}]}`,
		`{"model":"gpt-4o","messages":[{"role":"assistant","audio":{"Id":"audio_1"}}]}`,
		`{"model":"gpt-4o","input":"Hi","Prompt":{"id":"pmpt_1"}}`,
		`{"model":"gpt-4o","input":"Hi","prompt":{"ID":"pmpt_1"}}`,
		`{"model":"gpt-4o","input":[{"type":"reasoning","id":"rs_1","Encrypted_Content":"AAAA"}]}`,
		`{"model":"gpt-4o","input":"Hi","tools":[{"type":"code_interpreter","Container":"cntr_1"}]}`,
		`{"model":"gpt-4o","input":"Hi","tools":[{"type":"code_interpreter","container":{"File_IDs":["file-1"]}}]}`,
		`{"model":"gpt-4o","input":"Hi","tools":[{"type":"image_generation","input_image_mask":{"File_Id":"file-1"}}]}`,
		`{"model":"claude-sonnet-4-5","max_tokens":10,"Container":"c","messages":[{"role":"user","content":"Hi"}]}`,
		`{"model":"claude-sonnet-4-5","max_tokens":10,"container":{"skills":[{"Skill_Id":"skill_01"}]},"messages":[{"role":"user","content":"Hi"}]}`,
	} {
		ep := weights.EndpointResponses
		switch {
		case strings.Contains(body, "claude"):
			ep = weights.EndpointMessages
		case strings.Contains(body, "messages"):
			ep = weights.EndpointChatCompletions
		}
		if _, err := e.EstimateEndpoint(ep, []byte(body)); !errors.Is(err, weights.ErrMalformed) {
			t.Errorf("%s: err = %v; want ErrMalformed", body, err)
		}
	}

	// Many references, and more than MaxRefs.
	parts := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"type":"input_file","file_id":"file-%d"}`, i)
		}
		return `{"model":"gpt-4o","input":[{"role":"user","content":[` + b.String() + `]}]}`
	}
	if est, err := e.EstimateEndpoint(weights.EndpointResponses, []byte(parts(weights.MaxRefs))); err != nil || len(est.Refs) != weights.MaxRefs {
		t.Errorf("%d refs: %d, %v; want all", weights.MaxRefs, len(est.Refs), err)
	}
	var mal *weights.MalformedError
	if _, err := e.EstimateEndpoint(weights.EndpointResponses, []byte(parts(weights.MaxRefs+1))); !errors.As(err, &mal) || mal.Field != respPart {
		t.Errorf("%d refs: %v; want malformed at %s", weights.MaxRefs+1, err, respPart)
	}
}

// TestPromptVariablesPriced: the variables of a Responses prompt
// template are priced as the text and parts they are, not skipped with
// the template.
func TestPromptVariablesPriced(t *testing.T) {
	e, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("The sea is calm tonight. ", 400)
	without, err := e.EstimateEndpoint(weights.EndpointResponses, []byte(`{"model":"gpt-4o","prompt":{"id":"pmpt_1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{`"` + text + `"`, `{"type":"input_text","text":"` + text + `"}`} {
		with, err := e.EstimateEndpoint(weights.EndpointResponses, []byte(`{"model":"gpt-4o","prompt":{"id":"pmpt_1","variables":{"a":`+v+`}}}`))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := with.InputTokens-without.InputTokens, int64(len(text)/5); got < want {
			t.Errorf("a variable of %d bytes (%.20s...) adds %d tokens; want at least %d", len(text), v, got, want)
		}
	}
}
