package gateway_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
)

// azureObjectCalls returns the requests the simulated resource got on
// the routes of one response, each as its path and query ("path?query").
func azureObjectCalls(s *batchStack) []string {
	var out []string
	for _, r := range s.sim.Seen() {
		if strings.Contains(r.Path, "/responses/") {
			out = append(out, r.Path+"?"+r.Query)
		}
	}
	return out
}

// TestAzureSDKStoredResponses: through the SDK's Azure option,
// unmodified, a tenant creates a stored response on /openai/responses,
// retrieves it, lists its input items and deletes it; the resource gets
// each on Azure's path with the client's api-version (and the listing's
// checked limit) and the gateway's api-key. The same response is read
// on the v1 path by the plain SDK. Another tenant gets, for every route
// of that response, the 404 in Azure's shape an unknown id gets, and
// none of its calls reaches the resource; once deleted, the owner's
// retrieval is that 404 too.
func TestAzureSDKStoredResponses(t *testing.T) {
	s, _ := azureStack(t, azurePolicy)
	ctx := ctxT(t, 10*time.Second)
	client := azureClient(s, keyA)
	created, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "prod-chat", MaxOutputTokens: openai.Int(50),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Name three tides.")},
	})
	if err != nil || created.Status != responses.ResponseStatusCompleted {
		t.Fatalf("create: %v, %+v", err, created)
	}
	id := created.ID
	got, err := client.Responses.Get(ctx, id, responses.ResponseGetParams{})
	if err != nil || got.ID != id || got.OutputText() != created.OutputText() || got.Usage.TotalTokens != created.Usage.TotalTokens {
		t.Fatalf("retrieve: %v, %+v; want the created response", err, got)
	}
	items, err := client.Responses.InputItems.List(ctx, id, responses.InputItemListParams{Limit: openai.Int(10)})
	if err != nil || len(items.Data) != 1 {
		t.Fatalf("input items: %v, %+v; want the one input message", err, items)
	}
	v1 := openai.NewClient(option.WithBaseURL(s.URL+"/openai/v1/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
	if got, err := v1.Responses.Get(ctx, id, responses.ResponseGetParams{}); err != nil || got.ID != id {
		t.Fatalf("retrieve on the v1 path: %v, %+v", err, got)
	}

	// Another tenant, on every route, and an id nobody has.
	other := azureClient(s, batchKeyB)
	before := len(azureObjectCalls(s))
	var theirs, unknown *openai.Error
	if _, err := other.Responses.Get(ctx, id, responses.ResponseGetParams{}); !errors.As(err, &theirs) || theirs.StatusCode != http.StatusNotFound {
		t.Fatalf("another tenant's retrieval: %v; want 404", err)
	}
	if _, err := other.Responses.Get(ctx, "resp-nobody", responses.ResponseGetParams{}); !errors.As(err, &unknown) || unknown.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown id's retrieval: %v; want 404", err)
	}
	if theirs.Code != "not_found" || theirs.Code != unknown.Code || strings.ReplaceAll(theirs.Message, id, "X") != strings.ReplaceAll(unknown.Message, "resp-nobody", "X") {
		t.Errorf("another tenant's response: %q %q; an unknown one: %q %q; want the same not_found", theirs.Code, theirs.Message, unknown.Code, unknown.Message)
	}
	if raw := theirs.RawJSON(); strings.Contains(raw, `"type"`) {
		t.Errorf("another tenant's 404 %s; want Azure's shape, {code, message}", raw)
	}
	for name, f := range map[string]func() error{
		"delete": func() error { return other.Responses.Delete(ctx, id) },
		"cancel": func() error { _, err := other.Responses.Cancel(ctx, id); return err },
		"input items": func() error {
			_, err := other.Responses.InputItems.List(ctx, id, responses.InputItemListParams{})
			return err
		},
		"v1 retrieve": func() error {
			v1b := openai.NewClient(option.WithBaseURL(s.URL+"/openai/v1/"), option.WithAPIKey(batchKeyB), option.WithMaxRetries(0))
			_, err := v1b.Responses.Get(ctx, id, responses.ResponseGetParams{})
			return err
		},
	} {
		if err := f(); !errors.As(err, &theirs) || theirs.StatusCode != http.StatusNotFound || theirs.Code != "not_found" {
			t.Errorf("another tenant's %s: %v; want 404 not_found", name, err)
		}
	}
	if n := len(azureObjectCalls(s)); n != before {
		t.Errorf("%d calls of another tenant reached the resource; want none", n-before)
	}

	if err := client.Responses.Delete(ctx, id); err != nil {
		t.Fatalf("delete: %v", err)
	}
	var gone *openai.Error
	if _, err := client.Responses.Get(ctx, id, responses.ResponseGetParams{}); !errors.As(err, &gone) || gone.StatusCode != http.StatusNotFound {
		t.Errorf("retrieval after the deletion: %v; want 404", err)
	}
	want := []string{
		"/openai/responses/" + id + "?api-version=" + azureVersion,
		"/openai/responses/" + id + "/input_items?api-version=" + azureVersion + "&limit=10",
		"/openai/v1/responses/" + id + "?",
		"/openai/responses/" + id + "?api-version=" + azureVersion, // the deletion
	}
	if got := azureObjectCalls(s); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the resource got %q; want %q", got, want)
	}
	checkAzureUpstream(t, s.sim.Seen())
}

// Hostile calls on Azure's routes of one response: a malformed or
// repeated api-version, an id that could reach another upstream path, a
// listing's unknown parameter. Each is refused in Azure's shape before
// the resource sees anything.
func TestAzureStoredResponsesHostile(t *testing.T) {
	s, _ := azureStack(t, azurePolicy)
	_, mine := s.respond(t, keyA, map[string]any{"model": "gpt-4o-mini", "input": "Hi."})
	before := s.sim.Requests()
	for _, tc := range []struct {
		name, method, path string
		status             int
		code               string
	}{
		{"query in api-version", http.MethodGet, "/openai/responses/" + mine.ID + "?api-version=2024-10-21%26x%3D1", 400, "InvalidApiVersionParameter"},
		{"two api-versions", http.MethodDelete, "/openai/responses/" + mine.ID + "?api-version=2024-10-21&api-version=preview", 400, "InvalidApiVersionParameter"},
		{"encoded slash", http.MethodGet, "/openai/responses/a%2F..%2Fb?api-version=" + azureVersion, 404, "not_found"},
		{"long id", http.MethodGet, "/openai/v1/responses/" + strings.Repeat("r", 129), 404, "not_found"},
		{"unknown listing parameter", http.MethodGet, "/openai/responses/" + mine.ID + "/input_items?api-version=" + azureVersion + "&x=%2F", 400, "invalid_value"},
		{"cancel of an unknown id", http.MethodPost, "/openai/v1/responses/resp-nobody/cancel", 404, "not_found"},
	} {
		req, _ := http.NewRequest(tc.method, s.URL+tc.path, nil)
		req.Header.Set("Api-Key", keyA)
		resp, b := roundTrip(t, req)
		if code, _ := azureError(t, b); resp.StatusCode != tc.status || code != tc.code {
			t.Errorf("%s: %d %s; want %d %s in Azure's shape", tc.name, resp.StatusCode, b, tc.status, tc.code)
		}
	}
	if n := s.sim.Requests() - before; n != 0 {
		t.Errorf("%d refused calls reached the resource", n)
	}
}

// TestAzureBackgroundResponses: background responses created through
// the SDK's Azure option (/openai/responses), on a deployment route and
// on the v1 path are each answered queued and keep their reservation
// while they run; the gateway's watch polls the Azure resource for each
// (/openai/responses/{id} with the creation's api-version, or the v1
// path), with its own api-key, and settles each at the usage of the
// completed response once the resource completes it, an hour on.
func TestAzureBackgroundResponses(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	s, records := azureStack(t, `
policies:
  - {name: day-tokens, key: [tenant], unit: tokens, algorithm: quota, period: day, limit: 200k}
`, func(gc *gatewaySetup) {
		gc.opts = append(gc.opts, gateway.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	})
	ctx := ctxT(t, 20*time.Second)
	left := func() int64 { return s.remainingOf(t, "a", "POST /openai/responses", "day-tokens") }
	full := left()
	client := azureClient(s, keyA)
	params := responses.ResponseNewParams{
		Model: "prod-chat", MaxOutputTokens: openai.Int(60), Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Think for a while about tides.")},
	}
	bg, err := client.Responses.New(ctx, params)
	if err != nil || bg.Status != responses.ResponseStatusQueued {
		t.Fatalf("background create: %v, %+v; want queued", err, bg)
	}
	reserved := full - left()
	if reserved <= 60 {
		t.Fatalf("the background response reserved %d tokens; want its input and 60 output", reserved)
	}
	const preview = "2025-04-01-preview"
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/openai/deployments/prod-chat/responses?api-version="+preview,
		strings.NewReader(`{"input":"Think for a while about tides.","max_output_tokens":60,"background":true}`))
	req.Header.Set("Api-Key", keyA)
	req.Header.Set("Content-Type", "application/json")
	resp, b := roundTrip(t, req)
	var onDeployment respObject
	if err := json.Unmarshal(b, &onDeployment); err != nil || resp.StatusCode != 200 || onDeployment.Status != "queued" {
		t.Fatalf("background create on a deployment: %d %s", resp.StatusCode, b)
	}
	v1 := openai.NewClient(option.WithBaseURL(s.URL+"/openai/v1/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
	onV1, err := v1.Responses.New(ctx, params)
	if err != nil || onV1.Status != responses.ResponseStatusQueued {
		t.Fatalf("background create on the v1 path: %v, %+v", err, onV1)
	}
	if got := left(); got != full-3*reserved {
		t.Fatalf("three running: %d tokens left; want %d (three reservations of %d)", got, full-3*reserved, reserved)
	}
	if got := sumCounter(t, reader, "llmproxy.responses.background.open", "")[""]; got != 3 {
		t.Fatalf("llmproxy.responses.background.open = %d; want 3", got)
	}

	// Nobody polls them: the gateway does, every minute, and an hour on
	// the resource has completed them.
	for range 59 {
		s.clk.Advance(time.Minute)
	}
	waitFor(t, "the background responses settled by the gateway's polls", func() bool {
		if sumCounter(t, reader, "llmproxy.responses.background.ended", "outcome")["completed"] == 3 {
			return true
		}
		s.clk.Advance(time.Minute)
		return false
	})
	done, err := client.Responses.Get(ctx, bg.ID, responses.ResponseGetParams{})
	if err != nil || done.Status != responses.ResponseStatusCompleted || done.Usage.TotalTokens == 0 {
		t.Fatalf("retrieval once completed: %v, %+v", err, done)
	}
	if got := left(); got != full-3*done.Usage.TotalTokens {
		t.Errorf("after completion: %d tokens left; want %d, each settled at the usage of %d tokens", got, full-3*done.Usage.TotalTokens, done.Usage.TotalTokens)
	}
	polled := map[string]bool{}
	for _, p := range azureObjectCalls(s) {
		polled[p] = true
	}
	for _, p := range []string{
		"/openai/responses/" + bg.ID + "?api-version=" + azureVersion,
		"/openai/responses/" + onDeployment.ID + "?api-version=" + preview,
		"/openai/v1/responses/" + onV1.ID + "?",
	} {
		if !polled[p] {
			t.Errorf("the resource was never polled at %s; got %v", p, polled)
		}
	}
	for p := range polled {
		if !strings.HasPrefix(p, "/openai/") {
			t.Errorf("a poll went to the OpenAI upstream: %s", p)
		}
	}
	checkAzureUpstream(t, s.sim.Seen())

	recs := records("POST /openai/responses")
	if len(recs) != 1 {
		t.Fatalf("%d records of POST /openai/responses; want 1", len(recs))
	}
	r := recs[0]
	if r.Model != "gpt-4o-mini" || r.Actual.Tokens != done.Usage.TotalTokens || r.Tokens != reserved {
		t.Errorf("record %+v; want gpt-4o-mini reserved %d, settled at %d", r, reserved, done.Usage.TotalTokens)
	}
	t.Logf("estimate vs actual: reserved %d tokens (output 60), used %d (input %d, output %d): %.2f×",
		r.Tokens, r.Actual.Tokens, done.Usage.InputTokens, done.Usage.OutputTokens, float64(r.Tokens)/float64(r.Actual.Tokens))
	if n := len(records("POST /openai/deployments/{deployment}/responses")) + len(records("POST /openai/v1/responses")); n != 2 {
		t.Errorf("%d records of the deployment and v1 creations; want 2", n)
	}
}
