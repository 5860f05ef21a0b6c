package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/weights"
)

const (
	bedrockModel  = "anthropic.claude-3-5-sonnet-20240620-v1:0"
	bedrockRegion = "eu-west-3"
)

// bedrockCreds are the gateway's own AWS credentials in the tests.
var bedrockCreds = aws.Credentials{AccessKeyID: "AKIDGATEWAY", SecretAccessKey: "gateway-secret", SessionToken: "gateway-session"}

// bedrockStack is a gateway serving the Converse API over TLS (the AWS
// SDKs send a bearer token over HTTPS only) in front of the simulator;
// every upstream request's SigV4 signature is computed again from what
// the simulator received.
type bedrockStack struct {
	srv  *httptest.Server
	clk  *admissiontest.Clock
	mu   sync.Mutex
	uris []string // the upstream requests' paths, as sent
	auth []string // their Authorization headers
	bad  []string // what was wrong with their signatures
	hdrs []http.Header
}

// bedrockGateway serves policy for tenants a (keyA) and b (keyB) on a
// fake clock; tune, when given, edits the gateway's and the simulator's
// configurations.
func bedrockGateway(t *testing.T, policy string, tune ...func(*gateway.Config, *upstream.Config)) *bedrockStack {
	t.Helper()
	keys := "tenants:\n  a: {api_keys: [" + apikey.Sum(keyA).String() + "]}\n  b: {api_keys: [" + apikey.Sum(keyB).String() + "]}\n"
	f, err := config.Parse("bedrock.yaml", []byte(policy+keys+"identity: {anonymous: deny}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := &bedrockStack{clk: admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))}
	ctl, err := admission.New(f.Config, admission.WithClock(s.clk))
	if err != nil {
		t.Fatal(err)
	}
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter, MaxBodyBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	simCfg := upstream.Config{OutputTokens: 5}
	cfg := gateway.Config{ForwardHeaders: []string{"X-Sim-*"}}
	for _, f := range tune {
		f(&cfg, &simCfg)
	}
	sim := upstream.New(simCfg)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.mu.Lock()
		s.uris = append(s.uris, r.RequestURI)
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.hdrs = append(s.hdrs, r.Header.Clone())
		if why := checkSignature(r, body); why != "" {
			s.bad = append(s.bad, why)
		}
		s.mu.Unlock()
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	cfg.Upstream = up.URL + "/v1"
	cfg.Bedrock = gateway.Bedrock{Upstream: up.URL, Region: bedrockRegion, Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return bedrockCreds, nil
	})}
	gw, err := gateway.New(ctl, est, f, cfg, gateway.WithClock(s.clk))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	gw.Register(e)
	s.srv = httptest.NewTLSServer(e)
	t.Cleanup(s.srv.Close)
	return s
}

// checkSignature computes the SigV4 signature of r as AWS does, from the
// request as received (its host, its path as sent, the signed headers'
// values, its body, its x-amz-date) and the gateway's credentials, and
// says what is wrong with r's own, or "".
func checkSignature(r *http.Request, body []byte) string {
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "no x-amz-date"
	}
	if r.Header.Get("X-Amz-Security-Token") != bedrockCreds.SessionToken {
		return "no session token"
	}
	u := &url.URL{Scheme: "http", Host: r.Host, Opaque: "//" + r.Host + strings.SplitN(r.RequestURI, "?", 2)[0]}
	check := &http.Request{Method: r.Method, URL: u, Host: r.Host, Header: http.Header{"Content-Type": {r.Header.Get("Content-Type")}}}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), bedrockCreds, check, hex.EncodeToString(sum[:]), "bedrock", bedrockRegion, when); err != nil {
		return err.Error()
	}
	if got, want := r.Header.Get("Authorization"), check.Header.Get("Authorization"); got != want {
		return "authorization " + got + "; want " + want
	}
	return ""
}

// client is the official SDK pointed at the gateway with key as its
// Bedrock API key (AWS_BEARER_TOKEN_BEDROCK, as a user sets it), its
// attempts counted in attempts; it retries as the SDK's standard retryer
// does, without its backoff (the waits then are the gateway's
// x-amz-retry-after only). Each request goes with a copy of its body, of
// the test's own: with the SDK's, a stream answered as fast as the
// gateway answers was now and then closed under its reader by the
// transport's request writer (net/http persistConn.writeLoop, seen in a
// trace; "use of closed network connection", as in
// aws/aws-sdk-go-v2#2737), about one run in forty under -race; with the
// copy, none in 200.
func (s *bedrockStack) client(t *testing.T, key string, attempts *atomic.Int64) *bedrockruntime.Client {
	t.Helper()
	t.Setenv("AWS_BEARER_TOKEN_BEDROCK", key)
	tr := s.srv.Client().Transport
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if attempts != nil {
			attempts.Add(1)
		}
		if r.Body != nil {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return nil, err
			}
			r = r.Clone(r.Context())
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		}
		return tr.RoundTrip(r)
	})}
	return bedrockruntime.New(bedrockruntime.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(s.srv.URL), HTTPClient: hc,
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		}),
	})
}

// post sends a Converse body to the gateway with hdr.
func (s *bedrockStack) post(t *testing.T, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// remainingTokens asks for more tokens than the tpm policy holds (the
// refusal is decided before anything is charged) and returns what its
// answer says remains.
func (s *bedrockStack) remainingTokens(t *testing.T, key string) int64 {
	t.Helper()
	resp, b := s.post(t, "/model/"+bedrockModel+"/converse", `{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":500000}}`,
		"Authorization", "Bearer "+key)
	n, err := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Remaining-Tokens"), 10, 64)
	if resp.StatusCode != http.StatusTooManyRequests || err != nil {
		t.Fatalf("probe: %d, remaining %q (%s); want a 429 with the remaining tokens", resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining-Tokens"), b)
	}
	return n
}

const bedrockPolicies = `
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1000, per: 1m}
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 100k, per: 1m}
`

// conversation is the request of the SDK tests: a system prompt and a
// question with a cache point after them.
func conversation() *bedrockruntime.ConverseInput {
	return &bedrockruntime.ConverseInput{
		ModelId: aws.String(bedrockModel),
		System:  []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: "You are a careful physicist. Answer in one sentence."}},
		Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{
			&types.ContentBlockMemberText{Value: "Why is the sky blue? Explain Rayleigh scattering briefly."},
			&types.ContentBlockMemberCachePoint{Value: types.CachePointBlock{Type: types.CachePointTypeDefault}},
		}}},
		InferenceConfig: &types.InferenceConfiguration{MaxTokens: aws.Int32(100)},
	}
}

// converse calls c's Converse, or its ConverseStream when stream, with
// in, and returns the answer's text and usage (the response's, or the
// stream's metadata event's); a stream must bring at least two text
// deltas and end with end_turn.
func converse(ctx context.Context, t *testing.T, c *bedrockruntime.Client, in *bedrockruntime.ConverseInput, stream bool) (string, *types.TokenUsage) {
	t.Helper()
	var text strings.Builder
	if !stream {
		out, err := c.Converse(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if m, ok := out.Output.(*types.ConverseOutputMemberMessage); ok && len(m.Value.Content) == 1 {
			if tb, ok := m.Value.Content[0].(*types.ContentBlockMemberText); ok {
				text.WriteString(tb.Value)
			}
		}
		return text.String(), out.Usage
	}
	out, err := c.ConverseStream(ctx, &bedrockruntime.ConverseStreamInput{ModelId: in.ModelId, System: in.System, Messages: in.Messages, InferenceConfig: in.InferenceConfig})
	if err != nil {
		t.Fatal(err)
	}
	st := out.GetStream()
	defer st.Close()
	var u *types.TokenUsage
	deltas, stopped := 0, false
	for ev := range st.Events() {
		switch v := ev.(type) {
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			if d, ok := v.Value.Delta.(*types.ContentBlockDeltaMemberText); ok {
				text.WriteString(d.Value)
				deltas++
			}
		case *types.ConverseStreamOutputMemberMessageStop:
			stopped = v.Value.StopReason == types.StopReasonEndTurn
		case *types.ConverseStreamOutputMemberMetadata:
			u = v.Value.Usage
		}
	}
	if err := st.Err(); err != nil || deltas < 2 || !stopped {
		t.Fatalf("stream: %v, %d deltas, stopped %v; want the simulator's deltas and end_turn", err, deltas, stopped)
	}
	return text.String(), u
}

// The SDK's Converse and ConverseStream through the gateway: the call is
// settled at exactly the usage Bedrock reports (inputTokens plus the
// cache's read and written tokens plus outputTokens: the response's
// usage, or the stream's metadata event), as the tokens remaining after
// it show; the upstream gets the path rebuilt from the validated model id
// (':' escaped as the SDK escapes it), signed with the gateway's own
// credentials (the signature checks against the request as received),
// and never the tenant's key. The reservation against the reported usage
// is logged: the estimate-vs-actual figure.
func TestBedrockSDKSettlesUsage(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			s := bedrockGateway(t, bedrockPolicies)
			c := s.client(t, keyA, nil)
			ctx := ctxT(t, 10*time.Second)
			text, u := converse(ctx, t, c, conversation(), stream)
			if text == "" || u == nil || aws.ToInt32(u.OutputTokens) != 5 || aws.ToInt32(u.CacheWriteInputTokens) == 0 || aws.ToInt32(u.InputTokens) == 0 {
				t.Fatalf("answer %q, usage %+v: want 5 tokens of text and a cache write", text, u)
			}
			used := int64(aws.ToInt32(u.InputTokens) + aws.ToInt32(u.CacheWriteInputTokens) + aws.ToInt32(u.CacheReadInputTokens) + aws.ToInt32(u.OutputTokens))
			if got, want := s.remainingTokens(t, keyA), 100_000-used; got != want {
				t.Errorf("tokens remaining after the call = %d; want %d (usage %+v)", got, want, u)
			}

			s.mu.Lock()
			defer s.mu.Unlock()
			op := "converse"
			if stream {
				op = "converse-stream"
			}
			if want := "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/" + op; len(s.uris) != 1 || s.uris[0] != want {
				t.Errorf("upstream requests %q; want one to %s", s.uris, want)
			}
			if len(s.bad) != 0 {
				t.Errorf("upstream signatures: %q", s.bad)
			}
			for k, vs := range s.hdrs[0] {
				if strings.Contains(strings.Join(vs, ","), keyA) {
					t.Errorf("the tenant's key went upstream in %s", k)
				}
			}

			// The estimate-vs-actual figure: the gateway's reservation
			// (prompt estimate plus maxTokens) against the usage
			// reported.
			est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
			if err != nil {
				t.Fatal(err)
			}
			e, err := est.EstimateModel(weights.EndpointConverse, bedrockModel, []byte(converseJSON))
			if err != nil {
				t.Fatal(err)
			}
			prompt := used - int64(aws.ToInt32(u.OutputTokens))
			ratio := float64(e.InputTokens) / float64(prompt)
			t.Logf("estimate vs actual: prompt %d estimated / %d reported (%.2f), reservation %d (%d + maxTokens %d) / usage %d",
				e.InputTokens, prompt, ratio, e.InputTokens+e.OutputTokens, e.InputTokens, e.OutputTokens, used)
			if e.OutputTokens != 100 || ratio < 0.8 || ratio > 2 {
				t.Errorf("estimate %+v against a reported prompt of %d: want maxTokens reserved and the prompt within [0.8, 2]", e, prompt)
			}
		})
	}
}

// converseJSON is conversation() as the SDK serialises it.
const converseJSON = `{"inferenceConfig":{"maxTokens":100},"messages":[{"content":[{"text":"Why is the sky blue? Explain Rayleigh scattering briefly."},{"cachePoint":{"type":"default"}}],"role":"user"}],"system":[{"text":"You are a careful physicist. Answer in one sentence."}]}`

// A rejection reaches the SDK in Bedrock's shape: a 429 to retry is a
// ThrottlingException, which the SDK's standard retryer retries (three
// attempts in all), waiting the gateway's x-amz-retry-after; an
// exhausted budget is a ServiceQuotaExceededException (403, x-should-
// retry: false), which it never retries.
func TestBedrockSDKRefusals(t *testing.T) {
	s := bedrockGateway(t, `
policies:
  - {name: rps, key: [tenant], algorithm: token_bucket, limit: 1, per: 50ms}
`)
	ctx := ctxT(t, 10*time.Second)
	var attempts atomic.Int64
	c := s.client(t, keyA, &attempts)
	if _, err := c.Converse(ctx, conversation()); err != nil {
		t.Fatal(err)
	}
	attempts.Store(0)
	_, err := c.Converse(ctx, conversation())
	var te *types.ThrottlingException
	if !errors.As(err, &te) || !strings.Contains(te.ErrorMessage(), "policy rps") {
		t.Fatalf("over the rate: %v; want a ThrottlingException naming the policy", err)
	}
	if n := attempts.Load(); n != 3 {
		t.Errorf("the SDK made %d attempts; want 3 (its standard retryer retries a ThrottlingException twice)", n)
	}
	resp, _ := s.post(t, "/model/"+bedrockModel+"/converse", converseJSON, "Authorization", "Bearer "+keyA)
	if resp.StatusCode != 429 || resp.Header.Get("X-Amzn-Errortype") != "ThrottlingException" || resp.Header.Get("X-Amz-Retry-After") == "" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("raw refusal: %d, headers %v; want 429 ThrottlingException with x-amz-retry-after and Retry-After", resp.StatusCode, resp.Header)
	}

	b := bedrockGateway(t, `
policies:
  - {name: tenant-budget, key: [tenant], algorithm: quota, per: 7d, limit: 1, budget: true}
`)
	c2 := b.client(t, keyA, &attempts)
	if _, err := c2.Converse(ctx, conversation()); err != nil {
		t.Fatal(err)
	}
	attempts.Store(0)
	_, err = c2.Converse(ctx, conversation())
	var qe *types.ServiceQuotaExceededException
	if !errors.As(err, &qe) {
		t.Fatalf("over the budget: %v; want a ServiceQuotaExceededException", err)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("the SDK made %d attempts on the spent budget; want 1", n)
	}
}

// A ConverseStream whose tenant runs out of tokens as it goes is cut
// with a throttlingException message, which the SDK raises from the
// stream's Err, and is charged what it streamed: nothing remains.
func TestBedrockStreamCut(t *testing.T) {
	s := bedrockGateway(t, `
policies:
  - {name: tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: 60, per: 1m}
`, func(g *gateway.Config, u *upstream.Config) {
		g.ChargeInterval, g.MaxOutputReserve, u.TokensPerSecond, u.OutputTokens = time.Millisecond, 1, 200, 150
	})
	c := s.client(t, keyA, nil)
	in := conversation()
	in.InferenceConfig.MaxTokens = aws.Int32(200)
	out, err := c.ConverseStream(ctxT(t, 10*time.Second), &bedrockruntime.ConverseStreamInput{ModelId: in.ModelId, Messages: in.Messages, InferenceConfig: in.InferenceConfig})
	if err != nil {
		t.Fatal(err)
	}
	st := out.GetStream()
	deltas := 0
	for ev := range st.Events() {
		if _, ok := ev.(*types.ConverseStreamOutputMemberContentBlockDelta); ok {
			deltas++
		}
	}
	var te *types.ThrottlingException
	if err := st.Err(); !errors.As(err, &te) {
		t.Fatalf("stream error %v after %d deltas; want a ThrottlingException", err, deltas)
	}
	if deltas == 0 {
		t.Error("no text before the cut")
	}
	resp, b := s.post(t, "/model/"+bedrockModel+"/converse", converseJSON, "Authorization", "Bearer "+keyA)
	if resp.StatusCode != 429 || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != "0" {
		t.Errorf("after the cut: %d, tokens remaining %q (%s); want a refusal with 0", resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining-Tokens"), b)
	}
}

// Hostile and wrong requests are answered in Bedrock's shape before
// anything goes upstream: a model id that is not one (an ARN, an encoded
// slash, a dot segment, an overlong one) is a 404
// ResourceNotFoundException; a request signed with SigV4 instead of
// carrying a key is a 401 AccessDeniedException that says how to send
// the key; content in S3 is a 400 ValidationException; an unknown path
// under /model/ is a 404 in Bedrock's shape.
func TestBedrockHostile(t *testing.T) {
	s := bedrockGateway(t, bedrockPolicies)
	key := []string{"Authorization", "Bearer " + keyA}
	msg := `{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`
	for _, tc := range []struct {
		name, path, body string
		hdr              []string
		status           int
		typ, says        string
	}{
		{"arn", "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A%3Afoundation-model%2Fanthropic.claude/converse", msg, key, 404, "ResourceNotFoundException", "ARNs"},
		{"dot segment", "/model/%2E%2E/converse", msg, key, 404, "ResourceNotFoundException", "model id"},
		{"overlong", "/model/" + strings.Repeat("a", 300) + "/converse", msg, key, 404, "ResourceNotFoundException", "model id"},
		{"sigv4", "/model/" + bedrockModel + "/converse", msg, []string{"Authorization", "AWS4-HMAC-SHA256 Credential=AKID/20261201/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00"}, 401, "AccessDeniedException", "AWS_BEARER_TOKEN_BEDROCK"},
		{"wrong key", "/model/" + bedrockModel + "/converse", msg, []string{"Authorization", "Bearer sk-nope"}, 401, "AccessDeniedException", "Incorrect API key"},
		{"s3", "/model/" + bedrockModel + "/converse", `{"messages":[{"role":"user","content":[{"document":{"format":"pdf","name":"d","source":{"s3Location":{"uri":"s3://b/k"}}}}]}]}`, key, 400, "ValidationException", "S3"},
		{"no messages", "/model/" + bedrockModel + "/converse", `{"messages":[]}`, key, 400, "ValidationException", "messages"},
		{"unknown path", "/model/" + bedrockModel + "/invoke", msg, key, 404, "ResourceNotFoundException", "Unknown request URL"},
	} {
		resp, b := s.post(t, tc.path, tc.body, tc.hdr...)
		if resp.StatusCode != tc.status || resp.Header.Get("X-Amzn-Errortype") != tc.typ || !bytes.HasPrefix(b, []byte(`{"message":`)) || !bytes.Contains(b, []byte(tc.says)) {
			t.Errorf("%s: %d %s %s; want %d %s saying %q", tc.name, resp.StatusCode, resp.Header.Get("X-Amzn-Errortype"), b, tc.status, tc.typ, tc.says)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.uris) != 0 {
		t.Errorf("upstream requests %q; want none", s.uris)
	}
}

// Bedrock's own errors: a refusal of the client's request (an unknown
// model's 404) passes through with its type and message; a 429 or a 5xx
// keeps its status and type under a message of the gateway's; a refusal
// of the gateway's credentials (403 UnrecognizedClientException) is a
// 502, never a hint that the client's key is wrong; a body that is not
// JSON is a 502.
func TestBedrockUpstreamErrors(t *testing.T) {
	s := bedrockGateway(t, bedrockPolicies)
	key := "Bearer " + keyA
	for _, tc := range []struct {
		name, model, fault string
		status             int
		typ, says          string
	}{
		{"unknown model", "anthropic.claude-unknown-v1:0", "", 404, "ResourceNotFoundException", "The provided model identifier is invalid."},
		{"throttled", bedrockModel, "429", 429, "ThrottlingException", "rate limiting the gateway"},
		{"failed", bedrockModel, "500", 500, "InternalServerException", "failed with status 500"},
		{"credentials", bedrockModel, "401", 502, "InternalServerException", "refused the gateway's credentials"},
		{"garbage", bedrockModel, "garbage", 502, "InternalServerException", "not valid JSON"},
	} {
		resp, b := s.post(t, "/model/"+tc.model+"/converse", converseJSON, "Authorization", key, "X-Sim-Fault", tc.fault)
		if resp.StatusCode != tc.status || resp.Header.Get("X-Amzn-Errortype") != tc.typ || !bytes.Contains(b, []byte(tc.says)) {
			t.Errorf("%s: %d %s %s; want %d %s saying %q", tc.name, resp.StatusCode, resp.Header.Get("X-Amzn-Errortype"), b, tc.status, tc.typ, tc.says)
		}
	}
}

// The bedrockruntime SDK's Converse and ConverseStream with a cache point
// of one hour (CachePointBlock.Ttl "1h"): the simulator reports the
// write in cacheDetails, and the gateway settles it at the built-in
// one-hour cache-write price of Claude 3.5 Sonnet, $6 per million tokens
// (twice its input price); the spend left, as a refused probe shows, is
// the cap less exactly that.
func TestBedrockSDKOneHourCacheWriteSettled(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			s := bedrockGateway(t, spendPolicy)
			c := s.client(t, keyA, nil)
			ctx := ctxT(t, 10*time.Second)
			in := conversation()
			in.Messages[0].Content[1] = &types.ContentBlockMemberCachePoint{Value: types.CachePointBlock{Type: types.CachePointTypeDefault, Ttl: types.CacheTTLOneHour}}
			_, u := converse(ctx, t, c, in, stream)
			if u == nil || len(u.CacheDetails) != 1 || u.CacheDetails[0].Ttl != types.CacheTTLOneHour ||
				aws.ToInt32(u.CacheDetails[0].InputTokens) != aws.ToInt32(u.CacheWriteInputTokens) || aws.ToInt32(u.CacheWriteInputTokens) == 0 {
				t.Fatalf("usage %+v: want the prompt written to the one-hour cache", u)
			}
			uncached, written, output := int64(aws.ToInt32(u.InputTokens)), int64(aws.ToInt32(u.CacheWriteInputTokens)), int64(aws.ToInt32(u.OutputTokens))
			cost := oneHourCost(uncached, 0, written, output, 3, 3.75, 6, 15)
			if got, want := s.remainingSpend(t, keyA), 100_000_000-cost; got != want {
				t.Errorf("spend left after the call = %d µ$; want %d (cost %d µ$ of usage %+v)", got, want, cost, u)
			}
		})
	}
}

// remainingSpend asks for more output than the spend cap can pay for
// (the refusal is decided before anything is charged) and returns what
// its answer's RateLimit field says remains, in micro-dollars.
func (s *bedrockStack) remainingSpend(t *testing.T, key string) int64 {
	t.Helper()
	resp, b := s.post(t, "/model/"+bedrockModel+"/converse", `{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":10000000}}`,
		"Authorization", "Bearer "+key)
	field := resp.Header.Get("RateLimit")
	_, rest, _ := strings.Cut(field, `"spend";r=`)
	r, _, _ := strings.Cut(rest, ";")
	n, err := strconv.ParseInt(r, 10, 64)
	if resp.StatusCode < 400 || err != nil {
		t.Fatalf("probe: %d, RateLimit %q (%s); want a refusal with the spend left", resp.StatusCode, field, b)
	}
	return n
}
