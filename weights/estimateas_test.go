package weights

import (
	"errors"
	"reflect"
	"testing"
)

// TestEstimateAs prices a request as the model its deployment runs: the
// body's model (a deployment's name, or a cheaper model a caller names
// to pay less) is only handed to the mapping, the mapped model names the
// tokenizer, the output reservation and the estimate's Model; the
// mapping's error comes back as is, and Gemini's endpoint is refused.
func TestEstimateAs(t *testing.T) {
	e := newTestEstimator(t)
	body := `{"model":"gpt-3.5-turbo","messages":[{"role":"user","content":"Grüße aus Köln, und wie geht es dir heute? 今日は良い天気ですね。"}]}`
	var named []string
	as := func(n string) (string, error) { named = append(named, n); return "gpt-4o", nil }
	got, err := e.EstimateAs(EndpointChatCompletions, []byte(body), as)
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.EstimateEndpoint(EndpointChatCompletions, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Grüße aus Köln, und wie geht es dir heute? 今日は良い天気ですね。"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || len(named) != 1 || named[0] != "gpt-3.5-turbo" {
		t.Errorf("EstimateAs = %+v (as given %q); want %+v, the gpt-4o estimate", got, named, want)
	}
	named = nil
	if got, err := e.EstimateAs(EndpointEmbeddings, []byte(`{"input":"hi"}`), as); err != nil || got.Model != "gpt-4o" || len(named) != 1 || named[0] != "" {
		t.Errorf("no model in the body: %+v, %v (as given %q); want gpt-4o, as given \"\"", got, err, named)
	}
	errNo := errors.New("no such deployment")
	if _, err := e.EstimateAs(EndpointChatCompletions, []byte(body), func(string) (string, error) { return "", errNo }); err != errNo {
		t.Errorf("a mapping error: %v; want it as is", err)
	}
	if _, err := e.EstimateAs(EndpointGenerateContent, []byte(`{"contents":[]}`), as); !errors.Is(err, ErrUnsupportedEndpoint) {
		t.Errorf("generateContent: %v; want ErrUnsupportedEndpoint", err)
	}
}
