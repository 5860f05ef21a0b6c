package gateway_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/azure"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

const (
	azureVersion     = "2024-10-21"
	azureUpstreamKey = "sk-azure-upstream"
)

// azureDeployments are the deployments of the simulated resource; the
// policy file names all but prod-chat-v2, which TestAzureReload adds.
var azureDeployments = map[string]string{"prod-chat": "gpt-4o-mini", "prod-chat-v2": "gpt-4o-mini", "big": "gpt-4o", "embed": "text-embedding-3-small"}

const azureDeploymentsYAML = `
deployments:
  prod-chat: {model: gpt-4o-mini}
  big: {model: gpt-4o}
  embed: {model: text-embedding-3-small}
`

// azureStack is the gateway serving Azure OpenAI in front of the
// simulated resource (azureDeployments), with the gateway's key and
// request log, whose records of an operation records returns once the
// test is done with the gateway (the first call closes it); tune, when
// given, sets up the gateway further.
func azureStack(t *testing.T, policy string, tune ...func(*gatewaySetup)) (*batchStack, func(op string) []requestlog.Record) {
	t.Helper()
	s, rl, path := responsesStack(t, policy+azureDeploymentsYAML, func(gc *gatewaySetup, sc *upstream.Config) {
		gc.Azure.Key, gc.ForwardHeaders = azureUpstreamKey, []string{"X-Sim-*"}
		sc.Deployments, sc.OutputTokens = azureDeployments, 7
		for _, f := range tune {
			f(gc)
		}
	})
	var all []requestlog.Record
	var once sync.Once
	return s, func(op string) []requestlog.Record {
		once.Do(func() { all = logged(t, rl, path, "", s.srv) })
		var of []requestlog.Record
		for _, r := range all {
			if r.Operation == op {
				of = append(of, r)
			}
		}
		return of
	}
}

// azureClient is the official SDK's Azure option pointed at the gateway
// with key as the tenant's api-key; opts come after.
func azureClient(s *batchStack, key string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		azure.WithEndpoint(s.URL, azureVersion), azure.WithAPIKey(key), azure.WithUnsafeAllowHTTP(), option.WithMaxRetries(0),
	}, opts...)...)
}

// checkAzureUpstream fails unless every request the simulated resource
// got carried the gateway's api-key only.
func checkAzureUpstream(t *testing.T, seen []upstream.Seen) {
	t.Helper()
	for i, r := range seen {
		if r.APIKey != azureUpstreamKey || r.Auth != "" {
			t.Errorf("upstream request %d (%s): api-key %q, authorization %q; want the gateway's key only", i, r.Path, r.APIKey, r.Auth)
		}
	}
}

const azurePolicy = `
policies:
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 100k, per: 1m}
  - {name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 100M}
`

// The SDK's Azure option (azure.WithEndpoint, azure.WithAPIKey) through
// the gateway: a chat completion, plain and streamed (asking for its
// usage), on a deployment
// that runs gpt-4o-mini, whose name no price knows, is priced and
// settled as gpt-4o-mini (a cost policy is installed, so a deployment
// priced by its own name would be refused), at exactly the usage the
// resource reported; the reservation covers it, its prompt part within
// 25% of the reported prompt (the figure is logged).
// The resource gets the deployment's path with the request's
// api-version and the gateway's api-key, never the tenant's.
func TestAzureSDKChat(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			s, records := azureStack(t, azurePolicy)
			client := azureClient(s, keyA)
			ctx := ctxT(t, 10*time.Second)
			params := openai.ChatCompletionNewParams{
				Model:               "prod-chat",
				MaxCompletionTokens: openai.Int(100),
				Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Why is the sky blue? Answer in one sentence.")},
			}
			var usage openai.CompletionUsage
			var model, text string
			if stream {
				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				st := client.Chat.Completions.NewStreaming(ctx, params)
				var acc openai.ChatCompletionAccumulator
				for st.Next() {
					acc.AddChunk(st.Current())
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				usage, model = acc.Usage, acc.Model
				if len(acc.Choices) > 0 {
					text = acc.Choices[0].Message.Content
				}
			} else {
				c, err := client.Chat.Completions.New(ctx, params)
				if err != nil {
					t.Fatal(err)
				}
				usage, model, text = c.Usage, c.Model, c.Choices[0].Message.Content
			}
			if text == "" || model != "gpt-4o-mini" || usage.CompletionTokens != 7 || usage.PromptTokens == 0 {
				t.Fatalf("answer %q from %q, usage %+v; want 7 tokens from gpt-4o-mini", text, model, usage)
			}
			seen := s.sim.Seen()
			if len(seen) != 1 || seen[0].Path != "/openai/deployments/prod-chat/chat/completions" || seen[0].Query != "api-version="+azureVersion || seen[0].IncludeUsage != stream {
				t.Errorf("upstream saw %+v; want the deployment's path with api-version=%s", seen, azureVersion)
			}
			checkAzureUpstream(t, seen)

			recs := records("POST /openai/deployments/{deployment}/chat/completions")
			if len(recs) != 1 {
				t.Fatalf("%d records; want 1", len(recs))
			}
			r := recs[0]
			// gpt-4o-mini: $0.15 in, $0.60 out per million tokens;
			// micro-dollars rounded up once.
			cost := (usage.PromptTokens*150_000 + usage.CompletionTokens*600_000 + 999_999) / 1_000_000
			if r.Model != "gpt-4o-mini" || r.Actual.Tokens != usage.TotalTokens || r.Actual.Cost != cost || r.Tokens < r.Actual.Tokens {
				t.Errorf("record %+v; want gpt-4o-mini settled at %d tokens, %d µ$, reserved at least that", r, usage.TotalTokens, cost)
			}
			if in := r.Tokens - 100; 4*in < 3*usage.PromptTokens || 4*in > 5*usage.PromptTokens {
				t.Errorf("prompt reserved %d tokens; want within 25%% of the %d the resource reported", in, usage.PromptTokens)
			}
			t.Logf("estimate vs actual: reserved %d tokens (prompt %d + output 100), used %d (prompt %d): prompt estimate %.2f× the reported prompt",
				r.Tokens, r.Tokens-100, r.Actual.Tokens, usage.PromptTokens, float64(r.Tokens-100)/float64(usage.PromptTokens))
		})
	}
}

// The other routes through the SDK's Azure option: embeddings on a
// deployment, the Responses API at /openai/responses with the deployment
// in the body's model; and the v1 routes with the official SDK's plain
// options (a base URL of /openai/v1/, the key as a Bearer token). Each
// reaches the resource on its own path, with the gateway's key.
func TestAzureSDKRoutes(t *testing.T) {
	s, records := azureStack(t, azurePolicy)
	ctx := ctxT(t, 10*time.Second)
	client := azureClient(s, keyA)
	emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("tides")}})
	if err != nil || len(emb.Data) != 1 {
		t.Fatalf("embeddings: %v, %+v", err, emb)
	}
	rsp, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "prod-chat", MaxOutputTokens: openai.Int(50),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Write a haiku about tides.")},
	})
	if err != nil || rsp.Usage.TotalTokens == 0 {
		t.Fatalf("responses: %v, %+v", err, rsp)
	}
	v1 := openai.NewClient(option.WithBaseURL(s.URL+"/openai/v1/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
	c, err := v1.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "big", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")},
	})
	if err != nil || c.Model != "gpt-4o" {
		t.Fatalf("v1 chat: %v, %+v", err, c)
	}
	want := []string{"/openai/deployments/embed/embeddings?api-version=" + azureVersion, "/openai/responses?api-version=" + azureVersion, "/openai/v1/chat/completions?"}
	seen := s.sim.Seen()
	var got []string
	for _, r := range seen {
		got = append(got, r.Path+"?"+r.Query)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("upstream paths %q; want %q", got, want)
	}
	checkAzureUpstream(t, seen)
	// A stream of a version that refuses stream_options is not asked
	// for its usage upstream; one of a later version is.
	for _, v := range []string{"2024-06-01", "2025-04-01-preview"} {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/openai/deployments/prod-chat/chat/completions?api-version="+v,
			strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"Hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+keyA)
		if resp, b := roundTrip(t, req); resp.StatusCode != 200 || !strings.Contains(string(b), "[DONE]") {
			t.Fatalf("stream of %s: %d %s", v, resp.StatusCode, b)
		}
	}
	seen = s.sim.Seen()
	if len(seen) != 5 || seen[3].IncludeUsage || !seen[4].IncludeUsage {
		t.Errorf("upstream saw %+v; want include_usage asked of 2025-04-01-preview only", seen[3:])
	}
	if recs := records("POST /openai/deployments/{deployment}/chat/completions"); len(recs) != 2 || recs[0].Actual.Tokens <= 0 || recs[1].Actual.Tokens <= 0 {
		t.Errorf("stream records %+v; want both settled, one counted, one from its usage", recs)
	}
	for op, model := range map[string]string{
		"POST /openai/deployments/{deployment}/embeddings": "text-embedding-3-small",
		"POST /openai/responses":                           "gpt-4o-mini",
	} {
		if recs := records(op); len(recs) != 1 || recs[0].Model != model || recs[0].Actual.Tokens == 0 {
			t.Errorf("%s: records %+v; want one of %s, settled", op, recs, model)
		}
	}
}

// A rejection reaches the SDK as an *openai.Error 429 in Azure's shape
// (code "429", the gateway's reason in innererror) with retry-after and
// retry-after-ms; the SDK retries it after the advised delay and gets
// through once the bucket has refilled (the test's transport moves the
// gateway's clock by the delay the answer advised). An unknown
// deployment is a 404 DeploymentNotFound the SDK does not retry and the
// resource never sees; a wrong key a 401; the resource's own 429 keeps
// its retry hint and loses its message.
func TestAzureSDKRefusals(t *testing.T) {
	s, _ := azureStack(t, `
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 10, per: 1s, burst: 1}
`)
	var attempts, refused atomic.Int32
	// Each attempt of the SDK's (over loopback HTTP its Azure option
	// uses a transport of its own: a middleware sees every attempt).
	counting := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		attempts.Add(1)
		resp, err := next(r)
		if err == nil && resp.StatusCode == http.StatusTooManyRequests {
			refused.Add(1)
			ms, _ := strconv.Atoi(resp.Header.Get("Retry-After-Ms"))
			s.clk.Advance(time.Duration(ms) * time.Millisecond)
		}
		return resp, err
	})
	ctx := ctxT(t, 10*time.Second)
	params := openai.ChatCompletionNewParams{Model: "prod-chat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")}}
	raw := azureClient(s, keyA)
	if _, err := raw.Chat.Completions.New(ctx, params); err != nil {
		t.Fatal(err)
	}
	var resp *http.Response
	_, err := raw.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "429" || !strings.Contains(apiErr.RawJSON(), `"innererror":{"code":"rate_limit_exceeded"}`) {
		t.Fatalf("over the rate: %v; want an *openai.Error 429, code \"429\", innererror rate_limit_exceeded", err)
	}
	if h := apiErr.Response.Header; h.Get("Retry-After") != "1" || h.Get("Retry-After-Ms") == "" || h.Get("X-Ratelimit-Remaining-Requests") != "0" {
		t.Errorf("429 headers %v; want retry-after 1, retry-after-ms, x-ratelimit-remaining-requests 0", h)
	}

	retrying := azureClient(s, keyA, counting, option.WithMaxRetries(2))
	if _, err := retrying.Chat.Completions.New(ctx, params); err != nil {
		t.Fatalf("with retries: %v; want through on the retry", err)
	}
	if attempts.Load() != 2 || refused.Load() != 1 {
		t.Errorf("%d attempts, %d refused; want 2, the first refused", attempts.Load(), refused.Load())
	}

	attempts.Store(0)
	_, err = retrying.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "no-such-deployment", Messages: params.Messages})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "DeploymentNotFound" || attempts.Load() != 1 {
		t.Errorf("unknown deployment: %v (code %q) after %d attempts; want one 404 DeploymentNotFound", err, apiErr.Code, attempts.Load())
	}
	wrong := azureClient(s, "sk-not-a-key")
	_, err = wrong.Chat.Completions.New(ctx, params)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "401" {
		t.Errorf("wrong key: %v; want a 401, code \"401\"", err)
	}
	// The resource's own 429: its retry hint passed on, its message (its
	// pricing tier) and its limits (tokens, which no policy here counts)
	// not.
	s.clk.Advance(time.Second)
	_, err = raw.Chat.Completions.New(ctx, params, option.WithHeader("X-Sim-Fault", "429"), option.WithHeader("X-Sim-Retry-After", "7"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "429" || strings.Contains(apiErr.Message, "pricing tier") ||
		apiErr.Response.Header.Get("Retry-After") != "7" || apiErr.Response.Header.Get("X-Ratelimit-Remaining-Tokens") != "" {
		t.Errorf("the resource's 429: %v, code %q, %q, headers %v; want Azure's shape, retry-after 7, the gateway's message and limits", err, apiErr.Code, apiErr.Message, apiErr.Response.Header)
	}
	for _, r := range s.sim.Seen() {
		if strings.Contains(r.Path, "no-such-deployment") {
			t.Errorf("the unknown deployment reached the resource: %s", r.Path)
		}
	}
}

// azureError reads an error body of Azure's shape.
func azureError(t *testing.T, b []byte) (code, msg string) {
	t.Helper()
	var v struct {
		Error *struct{ Code, Message string }
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Error == nil || v.Error.Code == "" || v.Error.Message == "" {
		t.Fatalf("body %s is not an Azure error (%v)", b, err)
	}
	return v.Error.Code, v.Error.Message
}

// Hostile requests on the Azure routes: a deployment path that could
// reach another upstream path (an encoded slash, dot segments, a long
// name), a missing, repeated or malformed api-version (one that would
// add a query parameter upstream), a body naming no deployment, a body
// naming a cheaper model than its deployment's, a background member
// that is not a boolean, a tenant key in api-key. The refused are answered in Azure's shape
// before the resource sees anything; the cheaper model is priced as the
// deployment's; the tenant's key never reaches the resource.
func TestAzureHostile(t *testing.T) {
	s, records := azureStack(t, azurePolicy)
	chat := `{"messages":[{"role":"user","content":"Hi"}]}`
	dep := "/openai/deployments/"
	for _, tc := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"encoded slash", dep + "prod-chat%2F..%2F..%2Fv1/chat/completions?api-version=" + azureVersion, chat, 404, "DeploymentNotFound"},
		{"dot segment", dep + "../chat/completions?api-version=" + azureVersion, chat, 404, "DeploymentNotFound"},
		{"long name", dep + strings.Repeat("d", 65) + "/chat/completions?api-version=" + azureVersion, chat, 404, "DeploymentNotFound"},
		{"unknown deployment", dep + "other/chat/completions?api-version=" + azureVersion, chat, 404, "DeploymentNotFound"},
		{"no api-version", dep + "prod-chat/chat/completions", chat, 400, "MissingApiVersionParameter"},
		{"two api-versions", dep + "prod-chat/chat/completions?api-version=2024-10-21&api-version=2024-06-01", chat, 400, "InvalidApiVersionParameter"},
		{"query in api-version", dep + "prod-chat/chat/completions?api-version=2024-10-21%26key%3Dx", chat, 400, "InvalidApiVersionParameter"},
		{"long api-version", dep + "prod-chat/chat/completions?api-version=" + strings.Repeat("9", gateway.MaxAPIVersion+1), chat, 400, "InvalidApiVersionParameter"},
		{"v1 unknown deployment", "/openai/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`, 404, "DeploymentNotFound"},
		{"v1 no model", "/openai/v1/chat/completions", chat, 404, "DeploymentNotFound"},
		{"background not a boolean", "/openai/v1/responses", `{"model":"prod-chat","input":"Hi","background":"yes"}`, 400, "invalid_value"},
		{"unknown route", "/openai/deployments/prod-chat/images/generations?api-version=" + azureVersion, `{}`, 404, "unknown_url"},
	} {
		req, _ := http.NewRequest(http.MethodPost, s.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Api-Key", keyA)
		resp, b := roundTrip(t, req)
		if code, _ := azureError(t, b); resp.StatusCode != tc.status || code != tc.code {
			t.Errorf("%s: %d %s; want %d %s in Azure's shape", tc.name, resp.StatusCode, b, tc.status, tc.code)
		}
	}
	if seen := s.sim.Seen(); len(seen) != 0 {
		t.Errorf("the resource got %+v; want nothing", seen)
	}

	// A cheaper model named in the body of a gpt-4o deployment's request.
	req, _ := http.NewRequest(http.MethodPost, s.URL+dep+"BIG/chat/completions?api-version="+azureVersion,
		strings.NewReader(`{"model":"gpt-4.1-nano","messages":[{"role":"user","content":"Hi"}]}`))
	req.Header.Set("Api-Key", keyA)
	if resp, b := roundTrip(t, req); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	seen := s.sim.Seen()
	if len(seen) != 1 || seen[0].Path != dep+"big/chat/completions" {
		t.Errorf("upstream saw %+v; want the deployment as the file spells it", seen)
	}
	checkAzureUpstream(t, seen)
	if recs := records("POST /openai/deployments/{deployment}/chat/completions"); len(recs) != 1 || recs[0].Model != "gpt-4o" {
		t.Errorf("records %+v; want one priced as gpt-4o, the deployment's model", recs)
	}
}

// A reload installs the next file's deployments with its policies, as one
// state: the deployment it drops is refused, the one it adds served.
func TestAzureReload(t *testing.T) {
	s, _ := azureStack(t, azurePolicy)
	post := func(deployment string) int {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/openai/deployments/"+deployment+"/chat/completions?api-version="+azureVersion,
			strings.NewReader(`{"messages":[{"role":"user","content":"Hi"}]}`))
		req.Header.Set("Api-Key", keyA)
		resp, _ := roundTrip(t, req)
		return resp.StatusCode
	}
	if got := post("prod-chat"); got != 200 {
		t.Fatalf("before the reload: %d", got)
	}
	f, err := config.Parse("next.yaml", []byte(azurePolicy+"deployments:\n  prod-chat-v2: {model: gpt-4o-mini}\ntenants:\n  a: {api_keys: ["+apikey.Sum(keyA).String()+"]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.gw.Apply(f); err != nil {
		t.Fatal(err)
	}
	if a, b := post("prod-chat"), post("prod-chat-v2"); a != 404 || b != 200 {
		t.Errorf("after the reload: the dropped deployment %d, the added %d; want 404 and 200", a, b)
	}
}

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

	// A response id is its upstream's: the owner's record of a response
	// made on Azure does not open the same id on the OpenAI upstream, nor
	// the reverse (here one simulator serves both, so the id would be
	// found there).
	kept, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "prod-chat", MaxOutputTokens: openai.Int(20),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Name one tide.")},
	})
	if err != nil {
		t.Fatal(err)
	}
	plain := openai.NewClient(option.WithBaseURL(s.URL+"/v1/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
	var elsewhere *openai.Error
	if _, err := plain.Responses.Get(ctx, kept.ID, responses.ResponseGetParams{}); !errors.As(err, &elsewhere) || elsewhere.StatusCode != http.StatusNotFound {
		t.Errorf("an Azure response retrieved on the OpenAI route: %v; want 404", err)
	}
	onOpenAI, err := plain.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4o-mini", MaxOutputTokens: openai.Int(20),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Name one tide.")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Responses.Get(ctx, onOpenAI.ID, responses.ResponseGetParams{}); !errors.As(err, &elsewhere) || elsewhere.StatusCode != http.StatusNotFound {
		t.Errorf("an OpenAI response retrieved on the Azure route: %v; want 404", err)
	}
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
	s.pollUntilEnded(t, reader, "llmproxy.responses.background.ended", 3)
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
