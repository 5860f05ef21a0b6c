package gateway

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/internal/jsonscan"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/weights"
)

// GenAIConvention is the version of the OpenTelemetry semantic
// conventions the GenAI metrics and span attributes follow
// (go.opentelemetry.io/otel/semconv, package genaiconv): their names,
// units, attribute names and the values of gen_ai.operation.name,
// gen_ai.provider.name and gen_ai.token.type. It is the last version
// of go.opentelemetry.io/otel/semconv with the GenAI conventions (later
// ones moved them to a registry of their own). That version defines the
// token types input and output only: cached and reasoning tokens are
// counted within them on gen_ai.client.token.usage, and reported apart
// by the convention's usage attributes on the request's span
// (gen_ai.usage.cache_read.input_tokens,
// gen_ai.usage.cache_creation.input_tokens,
// gen_ai.usage.reasoning.output_tokens, next to
// gen_ai.usage.input_tokens and gen_ai.usage.output_tokens).
const GenAIConvention = "1.41.0"

// OtherModel is the gen_ai.request.model of a model the policy file's
// prices do not name: the model of a request is its own text, and a
// metric label takes only a bounded set of values.
const OtherModel = "other"

// The explicit bucket boundaries the convention advises.
var (
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	ttftBuckets     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	tpotBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
)

// genAI are the GenAI metrics of the token-priced routes: the tokens of
// each request by type (gen_ai.client.token.usage: the gateway is the
// provider's client), and as the server its clients call, the request
// duration (gen_ai.server.request.duration), the time to the first and
// per output token of a stream (gen_ai.server.time_to_first_token,
// gen_ai.server.time_per_output_token). Every value is recorded with the
// request's context, so a histogram's exemplars point at its trace. The
// tenant is never an attribute.
type genAI struct {
	tokens   genaiconv.ClientTokenUsage
	duration genaiconv.ServerRequestDuration
	ttft     genaiconv.ServerTimeToFirstToken
	tpot     genaiconv.ServerTimePerOutputToken
	sets     sync.Map // genAIKey → attribute.Set, built once per combination
}

// genAIKey is one combination of attributes; every field takes a bounded
// set of values.
type genAIKey struct {
	op, provider, model string
	// respModel is the family (metrics.ModelFamily) of the model the
	// upstream answered with; empty until an answer named a valid one.
	respModel string
	tokenType genaiconv.TokenTypeAttr // empty on the duration metrics
	errType   string                  // the error status of a failed request
}

func (m *genAI) init(meter metric.Meter) error {
	var errs [4]error
	m.tokens, errs[0] = genaiconv.NewClientTokenUsage(meter, metric.WithExplicitBucketBoundaries(tokenBuckets...))
	m.duration, errs[1] = genaiconv.NewServerRequestDuration(meter, metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.ttft, errs[2] = genaiconv.NewServerTimeToFirstToken(meter, metric.WithExplicitBucketBoundaries(ttftBuckets...))
	m.tpot, errs[3] = genaiconv.NewServerTimePerOutputToken(meter, metric.WithExplicitBucketBoundaries(tpotBuckets...))
	return errors.Join(errs[:]...)
}

// set returns the attribute set of k.
func (m *genAI) set(k genAIKey) attribute.Set {
	if s, ok := m.sets.Load(k); ok {
		return s.(attribute.Set)
	}
	kvs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", k.op),
		attribute.String("gen_ai.provider.name", k.provider),
		attribute.String("gen_ai.request.model", k.model),
	}
	if k.respModel != "" {
		kvs = append(kvs, attribute.String("gen_ai.response.model", k.respModel))
	}
	if k.tokenType != "" {
		kvs = append(kvs, attribute.String("gen_ai.token.type", string(k.tokenType)))
	}
	if k.errType != "" {
		kvs = append(kvs, attribute.String("error.type", k.errType))
	}
	s, _ := m.sets.LoadOrStore(k, attribute.NewSet(kvs...))
	return s.(attribute.Set)
}

// usage records the input and output tokens of a settled request, and
// puts them on the request's span by type, cached and reasoning tokens
// included (see GenAIConvention); a request settled at nothing (a
// provider refusal retried) records none.
func (m *genAI) usage(ctx context.Context, k genAIKey, ep weights.Endpoint, u weights.Usage) {
	if u.InputTokens <= 0 && u.OutputTokens <= 0 {
		return
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		var buf [5]attribute.KeyValue
		attrs := append(buf[:0], semconv.GenAIUsageInputTokensKey.Int64(u.InputTokens), semconv.GenAIUsageOutputTokensKey.Int64(u.OutputTokens))
		if u.CachedInputTokens > 0 {
			attrs = append(attrs, semconv.GenAIUsageCacheReadInputTokensKey.Int64(u.CachedInputTokens))
		}
		if u.CacheWriteInputTokens > 0 {
			attrs = append(attrs, semconv.GenAIUsageCacheCreationInputTokensKey.Int64(u.CacheWriteInputTokens))
		}
		if u.ReasoningTokens > 0 {
			attrs = append(attrs, semconv.GenAIUsageReasoningOutputTokensKey.Int64(u.ReasoningTokens))
		}
		span.SetAttributes(attrs...)
	}
	k.tokenType = genaiconv.TokenTypeInput
	m.tokens.RecordSet(ctx, u.InputTokens, m.set(k))
	if ep != weights.EndpointEmbeddings {
		k.tokenType = genaiconv.TokenTypeOutput
		m.tokens.RecordSet(ctx, u.OutputTokens, m.set(k))
	}
}

// requestDuration records how long an admitted request took, from its
// arrival to its answer's end, with error.type the status of a failed
// one.
func (m *genAI) requestDuration(ctx context.Context, k genAIKey, d time.Duration, status int) {
	if status >= 400 && status <= 599 {
		k.errType = strconv.Itoa(status)
	}
	m.duration.RecordSet(ctx, d.Seconds(), m.set(k))
}

// operationName returns the gen_ai.operation.name of an endpoint: chat
// for the conversational APIs (Chat Completions, Responses, Messages).
func operationName(ep weights.Endpoint) string {
	switch ep {
	case weights.EndpointCompletions:
		return string(genaiconv.OperationNameTextCompletion)
	case weights.EndpointEmbeddings:
		return string(genaiconv.OperationNameEmbeddings)
	}
	return string(genaiconv.OperationNameChat)
}

// genAIKey returns the attributes of a request on route rt for model, by
// the state st that decided it.
func (g *Gateway) genAIKey(st *state, rt route, model string) genAIKey {
	k := genAIKey{op: operationName(rt.endpoint), provider: g.cfg.GenAIProvider, model: OtherModel}
	switch {
	case rt.anthropic():
		k.provider = string(genaiconv.ProviderNameAnthropic)
	case rt.gemini():
		k.provider = string(genaiconv.ProviderNameGCPGemini)
	case rt.azure():
		k.provider = string(genaiconv.ProviderNameAzureAIOpenAI)
	case rt.bedrock():
		k.provider = string(genaiconv.ProviderNameAWSBedrock)
	}
	if m := strings.ToLower(model); st.models[m] {
		k.model = m
	}
	return k
}

// configuredModels returns the model names the prices of f name, lower
// case: its entries, its aliases and, unless it leaves them out, the
// built-in ones. These, and OtherModel, are the values of
// gen_ai.request.model.
func configuredModels(f *config.File) map[string]bool {
	names := map[string]bool{}
	if f.Prices.Builtin {
		for m := range maps.Keys(weights.DefaultPrices()) {
			names[strings.ToLower(m)] = true
		}
	}
	for m := range maps.Keys(f.Prices.Models) {
		names[strings.ToLower(m)] = true
	}
	for m := range maps.Keys(f.Prices.Aliases) {
		names[strings.ToLower(m)] = true
	}
	return names
}

// maxModelName bounds the model name an upstream's answer may put on a
// span.
const maxModelName = 128

// responseModel notes the model the upstream answered with, named in b,
// a JSON response body or the start of a stream (see answeredModel): on
// the request's span as gen_ai.response.model, as the upstream wrote it
// once checked (validModel), and in k, for the metrics recorded after,
// as its family (metrics.ModelFamily: a bounded set of values, other for
// a model of no known family). An answer that names no valid model
// changes neither.
func (m *genAI) responseModel(ctx context.Context, k *genAIKey, b []byte) {
	model := answeredModel(b)
	if model == "" {
		return
	}
	k.respModel = metrics.ModelFamily(model)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(semconv.GenAIResponseModel(strings.Clone(model)))
	}
}

// answeredModel returns the model b names, a view into b ("" when it
// names no valid one): for a JSON object, its "model" member, else that
// of its "response" member (a Responses API event) or its "message"
// member (Anthropic's message_start); for server-sent events, that of
// the first event's data when b holds its whole line.
func answeredModel(b []byte) string {
	var view jsonscan.Scanner
	view.ResetBytes(b) // b as a string, not copied
	v := strings.TrimLeft(view.Src(), " \t\r\n")
	if strings.HasPrefix(v, "{") {
		return objectModel(v, true)
	}
	for v != "" {
		line, rest, whole := strings.Cut(v, "\n")
		if !whole {
			return ""
		}
		if data, ok := strings.CutPrefix(line, "data:"); ok {
			return objectModel(strings.TrimSpace(data), true)
		}
		v = rest
	}
	return ""
}

// objectModel returns the valid model name of the JSON object v: its
// "model" member, else, when nested, that of its "response" or "message"
// member; "" when there is none or v is not a JSON object.
func objectModel(v string, nested bool) string {
	var s jsonscan.Scanner
	s.Reset(v)
	if s.Peek() != '{' {
		return ""
	}
	var model, inner string
	s.Open()
	for n := 0; s.More(&n, '}'); {
		key, dirty := s.Key()
		switch {
		case dirty:
			s.Skip()
		case key == "model" && s.Peek() == '"':
			var esc bool
			if model, esc = s.Str(); esc {
				model = "" // no valid name has an escape
			}
		case nested && (key == "response" || key == "message") && s.Peek() == '{':
			inner = s.Value()
		default:
			s.Skip()
		}
	}
	if s.End(); s.Err() != nil {
		return ""
	}
	if model == "" && inner != "" {
		return objectModel(inner, false)
	}
	return validModel(model)
}

// validModel returns m when it may name a model on a span: 1 to
// maxModelName letters, digits and . _ - : / @ +, and "" otherwise.
func validModel(m string) string {
	if m == "" || len(m) > maxModelName {
		return ""
	}
	for i := 0; i < len(m); i++ {
		switch c := m[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == '-', c == ':', c == '/', c == '@', c == '+':
		default:
			return ""
		}
	}
	return m
}
