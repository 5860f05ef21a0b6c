package weights

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
)

// Endpoint is an OpenAI-compatible API endpoint whose requests can be
// estimated.
type Endpoint int

// The endpoints an [Estimator] understands.
const (
	// EndpointUnknown is any other path.
	EndpointUnknown Endpoint = iota
	// EndpointChatCompletions is POST /v1/chat/completions.
	EndpointChatCompletions
	// EndpointCompletions is POST /v1/completions (the legacy text API).
	EndpointCompletions
	// EndpointEmbeddings is POST /v1/embeddings.
	EndpointEmbeddings
	// EndpointResponses is POST /v1/responses.
	EndpointResponses
	// EndpointMessages is POST /v1/messages, Anthropic's Messages API.
	EndpointMessages
	// EndpointGenerateContent is POST
	// /v1beta/models/{model}:generateContent (and
	// :streamGenerateContent), the Gemini API, whose model is in the
	// path: price it with [Estimator.EstimateModel].
	EndpointGenerateContent
	// EndpointConverse is POST /model/{modelId}/converse (and
	// /converse-stream), Amazon Bedrock's Converse API, whose model is in
	// the path: price it with [Estimator.EstimateModel].
	EndpointConverse
)

// String returns the endpoint's canonical path.
func (e Endpoint) String() string {
	switch e {
	case EndpointChatCompletions:
		return "/v1/chat/completions"
	case EndpointCompletions:
		return "/v1/completions"
	case EndpointEmbeddings:
		return "/v1/embeddings"
	case EndpointResponses:
		return "/v1/responses"
	case EndpointMessages:
		return "/v1/messages"
	case EndpointGenerateContent:
		return "/v1beta/models/{model}:generateContent"
	case EndpointConverse:
		return "/model/{modelId}/converse"
	}
	return "unknown endpoint"
}

// EndpointFor maps a request path to an Endpoint. It matches by suffix, so
// "/v1/chat/completions", "/openai/deployments/d1/chat/completions" (Azure
// OpenAI) and "/api/v1/embeddings/" all resolve; a query string is ignored.
// Anthropic's Messages API is matched as "v1/messages", so that another
// API's messages collection ("/v1/threads/t1/messages") is not priced as
// it, and "/v1/messages/count_tokens" is no endpoint to price.
func EndpointFor(path string) Endpoint {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	path = strings.TrimSuffix(path, "/")
	switch {
	case hasPathSuffix(path, "chat/completions"):
		return EndpointChatCompletions
	case hasPathSuffix(path, "completions"):
		return EndpointCompletions
	case hasPathSuffix(path, "embeddings"):
		return EndpointEmbeddings
	case hasPathSuffix(path, "responses"):
		return EndpointResponses
	case hasPathSuffix(path, "v1/messages"):
		return EndpointMessages
	}
	return EndpointUnknown
}

// pathModel reports whether the endpoint's model is named by the
// request's path rather than its body.
func (e Endpoint) pathModel() bool { return e == EndpointGenerateContent || e == EndpointConverse }

// hasPathSuffix reports whether path ends with the segments of suffix.
func hasPathSuffix(path, suffix string) bool {
	if !strings.HasSuffix(path, suffix) {
		return false
	}
	rest := path[:len(path)-len(suffix)]
	return rest == "" || strings.HasSuffix(rest, "/")
}

// Defaults used when a [Config] field is zero.
const (
	// DefaultMaxBodyBytes is the default request body cap: 8 MiB.
	DefaultMaxBodyBytes = 8 << 20
	// DefaultSampleThreshold is the default amount of text, in bytes, above
	// which prompt tokens are estimated from samples: 64 KiB.
	DefaultSampleThreshold = 64 << 10
	// DefaultSampleBytes is the default amount of text tokenised when
	// sampling: 8 KiB, in 8 windows spread over the text.
	DefaultSampleBytes = 8 << 10
	// DefaultMaxOutputTokens is the default output reservation of a request
	// that sets no limit of its own, for models without a rule of their own.
	DefaultMaxOutputTokens = 4096
	// DefaultCompletionsMaxTokens is the output reservation of a
	// /v1/completions request without max_tokens: the API's own default.
	DefaultCompletionsMaxTokens = 16
)

// maxSampleThreshold bounds Config.SampleThreshold: the text kept below
// the threshold is indexed with 32-bit offsets.
const maxSampleThreshold = 1 << 30

// Config configures an [Estimator]. The zero value is usable: every field
// documents its default. The tags name the fields as configuration files and
// validation errors do; Prices and Counters are set in code.
type Config struct {
	// MaxBodyBytes caps the request body. Estimate returns a
	// *BodyTooLargeError, before any parsing, for a larger body. Zero means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty" yaml:"max_body_bytes,omitempty"`
	// SampleThreshold is the total size, in bytes, of the text of one
	// request above which its prompt tokens are estimated from samples
	// instead of tokenising all of it. Zero means DefaultSampleThreshold; a
	// negative value turns sampling off. It must be at most 1 GiB.
	SampleThreshold int `json:"sample_threshold,omitempty" yaml:"sample_threshold,omitempty"`
	// SampleBytes is how much text is tokenised when sampling. Zero means
	// DefaultSampleBytes. It must be at least 1024.
	SampleBytes int `json:"sample_bytes,omitempty" yaml:"sample_bytes,omitempty"`
	// DefaultEncoding counts the tokens of models that match no rule
	// (including requests without a model). Empty means O200kBase.
	DefaultEncoding Encoding `json:"default_encoding,omitempty" yaml:"default_encoding,omitempty"`
	// DefaultMaxOutputTokens is the output reservation of a request that
	// sets no limit, for models whose rule sets none. Zero means
	// DefaultMaxOutputTokens.
	DefaultMaxOutputTokens int64 `json:"default_max_output_tokens,omitempty" yaml:"default_max_output_tokens,omitempty"`
	// Models are extra model rules, tried before the built-in table.
	Models []ModelRule `json:"models,omitempty" yaml:"models,omitempty"`
	// Prices, when not nil, prices each estimate in micro-dollars.
	Prices *Prices `json:"-" yaml:"-"`
	// Images prices image inputs. The zero value uses OpenAI's tile formula.
	Images ImageCost `json:"images,omitempty" yaml:"images,omitempty"`
	// Counters supplies the exact counters. Nil means the package default
	// (tiktoken-go with its offline loader).
	Counters CounterSource `json:"-" yaml:"-"`
}

// Estimator prices OpenAI-compatible requests in tokens before they are
// sent. It is safe for concurrent use; build one at start-up and share it.
type Estimator struct {
	maxBody         int64
	sampleThreshold int
	sampleBytes     int
	defaultRule     ModelRule
	defaultOutput   int64
	models          []ModelRule
	prices          *Prices
	images          ImageCost
	source          CounterSource

	counters [2]struct {
		once sync.Once
		c    Counter
		err  error
	}
}

// NewEstimator validates cfg and returns an Estimator. It loads the default
// encoding at once so the first request does not pay for it; other
// encodings load on first use.
func NewEstimator(cfg Config) (*Estimator, error) {
	var errs []error
	if cfg.MaxBodyBytes < 0 {
		errs = append(errs, errors.New("max_body_bytes: must be >= 0"))
	}
	if cfg.SampleBytes != 0 && cfg.SampleBytes < 1024 {
		errs = append(errs, errors.New("sample_bytes: must be >= 1024"))
	}
	if cfg.SampleThreshold > maxSampleThreshold {
		errs = append(errs, fmt.Errorf("sample_threshold: must be at most %d", maxSampleThreshold))
	}
	if cfg.SampleThreshold > 0 && cfg.SampleBytes > cfg.SampleThreshold {
		errs = append(errs, errors.New("sample_bytes: must not exceed sample_threshold"))
	}
	if cfg.DefaultEncoding != "" && !cfg.DefaultEncoding.Valid() {
		errs = append(errs, fmt.Errorf("default_encoding: unknown encoding %q", string(cfg.DefaultEncoding)))
	}
	if cfg.DefaultMaxOutputTokens < 0 {
		errs = append(errs, errors.New("default_max_output_tokens: must be >= 0"))
	}
	seen := map[string]int{}
	models := make([]ModelRule, len(cfg.Models))
	for i, r := range cfg.Models {
		path := fmt.Sprintf("models[%d]", i)
		errs = append(errs, r.validate(path)...)
		r.Prefix = strings.ToLower(r.Prefix)
		if j, dup := seen[r.Prefix]; dup && r.Prefix != "" {
			errs = append(errs, fmt.Errorf("%s.prefix: %q duplicates models[%d]", path, r.Prefix, j))
		}
		seen[r.Prefix] = i
		models[i] = r
	}
	errs = append(errs, cfg.Images.validate("images")...)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("weights: invalid config: %w", err)
	}

	e := &Estimator{
		maxBody:         cfg.MaxBodyBytes,
		sampleThreshold: cfg.SampleThreshold,
		sampleBytes:     cfg.SampleBytes,
		defaultRule:     ModelRule{Encoding: cfg.DefaultEncoding},
		defaultOutput:   cfg.DefaultMaxOutputTokens,
		models:          models,
		prices:          cfg.Prices,
		images:          cfg.Images.withDefaults(),
		source:          cfg.Counters,
	}
	if e.maxBody == 0 {
		e.maxBody = DefaultMaxBodyBytes
	}
	if e.sampleThreshold == 0 {
		e.sampleThreshold = DefaultSampleThreshold
	}
	if e.sampleBytes == 0 {
		e.sampleBytes = DefaultSampleBytes
	}
	if e.sampleThreshold > 0 && e.sampleBytes > e.sampleThreshold {
		e.sampleBytes = e.sampleThreshold
	}
	if e.defaultRule.Encoding == "" {
		e.defaultRule.Encoding = O200kBase
	}
	if e.defaultOutput == 0 {
		e.defaultOutput = DefaultMaxOutputTokens
	}
	if e.source == nil {
		e.source = defaultCounters
	}
	if _, err := e.counter(e.defaultRule.Encoding); err != nil {
		return nil, err
	}
	return e, nil
}

// MaxBodyBytes returns the body cap in effect.
func (e *Estimator) MaxBodyBytes() int64 { return e.maxBody }

// ReadBody reads a request body of at most [Estimator.MaxBodyBytes] bytes.
// For a larger body it stops reading at the cap and returns a
// *BodyTooLargeError (Size -1), so an oversized upload costs no more than
// the cap in memory.
func (e *Estimator) ReadBody(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, e.maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("weights: reading request body: %w", err)
	}
	if int64(len(b)) > e.maxBody {
		return nil, &BodyTooLargeError{Limit: e.maxBody, Size: -1}
	}
	return b, nil
}

// counter returns the shared counter of enc, creating it on first use.
func (e *Estimator) counter(enc Encoding) (Counter, error) {
	i := 0
	switch enc {
	case O200kBase:
	case Cl100kBase:
		i = 1
	default:
		return nil, fmt.Errorf("weights: unknown encoding %q", string(enc))
	}
	s := &e.counters[i]
	s.once.Do(func() {
		s.c, s.err = e.source(enc)
		if s.err == nil && s.c == nil {
			s.err = errors.New("counter source returned nil")
		}
		if s.err != nil {
			s.err = fmt.Errorf("weights: counter for %s: %w", enc, s.err)
		}
	})
	return s.c, s.err
}

// model is what an Estimator knows about the model of one request.
type model struct {
	counter   Counter
	encoding  Encoding // empty for a ratio estimate
	maxOutput int64
	toolInit  int64   // per-function overhead of tool definitions
	scale     float64 // multiplies the text's count; 0 or 1: exact
}

// resolve returns how to count tokens for a model name.
func (e *Estimator) resolve(name string) (model, error) {
	r, ok := lookupRule(e.models, name)
	if !ok {
		r = e.defaultRule
	}
	m := model{maxOutput: r.MaxOutputTokens, toolInit: 7, scale: r.TokenScale}
	if m.maxOutput == 0 {
		m.maxOutput = e.defaultOutput
	}
	if r.Encoding == "" && r.CharsPerToken > 0 {
		m.counter = ratioCounter{charsPerToken: r.CharsPerToken}
		return m, nil
	}
	if r.Encoding == "" {
		r.Encoding = e.defaultRule.Encoding
	}
	c, err := e.counter(r.Encoding)
	if err != nil {
		return model{}, err
	}
	m.counter, m.encoding = c, r.Encoding
	if r.Encoding == Cl100kBase {
		m.toolInit = 10
	}
	return m, nil
}

// Counter returns the counter the Estimator uses for a model name, for
// counting text outside a request (for example streamed output when no usage
// arrives).
func (e *Estimator) Counter(modelName string) (Counter, error) {
	m, err := e.resolve(modelName)
	if err != nil {
		return nil, err
	}
	if m.scale > 0 && m.scale != 1 {
		return scaledCounter{c: m.counter, scale: m.scale}, nil
	}
	return m.counter, nil
}

// CountText counts text a model produced (the output items of a response
// that came without usage) with the model's counter, as streamed output
// is counted: a piece at a time, so that no text is slow to count. It
// returns 0 when the model has no counter.
func (e *Estimator) CountText(modelName, text string) int64 {
	c, err := e.Counter(modelName)
	if err != nil || text == "" {
		return 0
	}
	return int64(countText(c, text))
}

// Estimate is the price of one request before it is sent.
type Estimate struct {
	// Endpoint is the endpoint the body was parsed for.
	Endpoint Endpoint
	// Model is the request's model field, as sent (may be empty).
	Model string
	// Encoding is the tokenizer used, or empty when the model's rule
	// estimates from a characters-per-token ratio.
	Encoding Encoding
	// InputTokens is the estimated prompt size, including the chat format's
	// per-message overheads, tool definitions and images, at most
	// [MaxTokens].
	InputTokens int64
	// OutputTokens is the output reservation: the request's own limit (or
	// the model's default) times the number of completions asked for, at
	// most [MaxTokens].
	OutputTokens int64
	// DefaultOutput is, for a request that sets no output limit of its
	// own (max_tokens, max_completion_tokens, max_output_tokens,
	// maxOutputTokens), the number of completions (n, best_of, 1 when
	// unset) OutputTokens reserves the model's default output for; 0 for
	// a request that sets one, and on the completions and embeddings
	// endpoints (the legacy API's own default, 16, is charged there). A
	// caller with a default of its own per model (what its provider's
	// limiter charges such a request) reserves it times DefaultOutput.
	DefaultOutput int64
	// Stream reports whether the request asks for a streamed response.
	Stream bool
	// IncludeUsage reports whether a streaming request already asks for the
	// final usage chunk (stream_options.include_usage).
	IncludeUsage bool
	// Sampled reports whether the prompt was estimated from samples because
	// its text exceeded the sampling threshold.
	Sampled bool
	// MaxInputTokens is, for a Sampled estimate, the most prompt tokens the
	// request can encode to in any tokenizer: its text's size in bytes (a
	// token covers at least one byte) plus the fixed costs, at most
	// [MaxTokens]; 0 for a counted one. Samples can miss what the rest of
	// a text holds (a long prompt whose samples fall on plain words while
	// the rest is dense), so [Estimate.CheckUsage] accepts a reported
	// prompt up to it.
	MaxInputTokens int64
	// Images is the number of image inputs priced.
	Images int
	// CostMicros is the estimated price in micro-dollars (millionths of a
	// US dollar) of InputTokens plus OutputTokens, when Priced.
	CostMicros int64
	// Priced reports whether a price was found for Model.
	Priced bool
	// Refs are the objects stored upstream (files, items of stored
	// responses, vector stores, audio, prompt templates, containers,
	// skills: see [RefKind]) the body names by id, each once, in the
	// order met, at most [MaxRefs]; nil when it names none. Their size
	// is not in the estimate, and the provider reads them for whoever
	// names them: see [Ref].
	Refs []Ref
}

// TotalTokens returns InputTokens + OutputTokens, at most [MaxTokens].
func (e Estimate) TotalTokens() int64 { return capTokens(satAdd(e.InputTokens, e.OutputTokens)) }

// Estimate parses the body of a request to the endpoint at path (see
// [EndpointFor]) and prices it. Errors match [ErrTooLarge] (the body is over
// the cap; nothing was parsed), [ErrMalformed] (the body is not a valid
// request) or [ErrUnsupportedEndpoint]; any other error means a tokenizer
// could not be loaded. Estimate neither modifies body nor keeps a
// reference to it.
func (e *Estimator) Estimate(path string, body []byte) (Estimate, error) {
	ep := EndpointFor(path)
	if ep == EndpointUnknown && int64(len(body)) <= e.maxBody {
		return Estimate{}, fmt.Errorf("%w: %q", ErrUnsupportedEndpoint, path)
	}
	return e.EstimateEndpoint(ep, body)
}

// EstimateEndpoint is Estimate for a request to ep: for a caller that
// routes requests itself (a gateway's route table) and knows the endpoint
// without deriving it from a path.
func (e *Estimator) EstimateEndpoint(ep Endpoint, body []byte) (Estimate, error) {
	return e.estimate(ep, "", nil, body)
}

// estimate prices body for ep; model is the path's model of an endpoint
// that names it there (see EstimateModel), else empty.
func (e *Estimator) estimate(ep Endpoint, model string, as func(string) (string, error), body []byte) (Estimate, error) {
	if int64(len(body)) > e.maxBody {
		return Estimate{}, &BodyTooLargeError{Limit: e.maxBody, Size: int64(len(body))}
	}
	if ep == EndpointUnknown || ep.pathModel() != (model != "") || (ep.pathModel() && as != nil) {
		return Estimate{}, fmt.Errorf("%w: %v", ErrUnsupportedEndpoint, ep)
	}
	est, err := e.priceModel(ep, model, as, body)
	if err != nil {
		return Estimate{}, err
	}
	est.Endpoint = ep
	if e.prices != nil {
		if p, ok := e.prices.Lookup(est.Model); ok {
			est.CostMicros = p.EstimateMicros(est.InputTokens, est.OutputTokens)
			est.Priced = true
		}
	}
	return est, nil
}

// MaxTokens is the largest token figure an [Estimate] carries: 2^50, the
// same bound as limits.MaxAmount, so that an estimate is always an
// amount an admission controller accepts. Every sum and product of the
// estimate saturates there: a request asking for 9223372036854775807 or
// 1e30 output tokens reserves MaxTokens.
const MaxTokens = 1 << 50

// capTokens bounds a token figure to [0, MaxTokens].
func capTokens(n int64) int64 { return min(max(n, 0), MaxTokens) }

// satAdd adds non-negative numbers, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satMul multiplies non-negative numbers, saturating at math.MaxInt64.
func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
