// Package upstream is a simulated OpenAI-compatible API: chat completions,
// legacy completions, embeddings and responses, streaming and not, with
// realistic usage reports, configurable latency and output rate. The llmproxy
// gateway runs it in-process when no real upstream is configured, and its
// tests and benchmarks use it as the provider.
//
// The simulator counts prompt tokens as one per four bytes of prompt text plus
// the chat format's fixed costs, and writes one token per output word, so the
// usage it reports is close to what a tokenizer would count on its output.
//
// A few request headers steer it, for tests and demonstrations:
//
//	X-Sim-Tokens: 500      output tokens to generate (capped by max_tokens)
//	X-Sim-Fault: 500       answer 500 in the OpenAI error shape
//	X-Sim-Fault: 429       answer 429 with retry-after headers
//	X-Sim-Retry-After: 86400  that 429's retry-after instead (and no retry-after-ms)
//	X-Sim-Fault: 401       answer 401, as for a wrong upstream key
//	X-Sim-Fault: hang      never answer (until the caller gives up)
//	X-Sim-Fault: cut       break the connection half-way through the output
//	X-Sim-Fault: garbage   answer 200 with a body that is not JSON
//	X-Sim-Latency: 2s      time before the first byte, for this request
//	X-Sim-Reasoning-Tokens: 40  reasoning tokens added to a response's output
//
// With Config.Limits it enforces a provider's requests and tokens per
// minute per model over a rolling window, answering 429 with OpenAI's
// headers, and sends its x-ratelimit figures on every answer (see Limits).
//
// It also serves OpenAI's Batch API: file uploads and contents, batches
// created, retrieved and cancelled, each running Config.BatchDelay on the
// clock of WithClock and ending as its metadata picks (sim_outcome,
// sim_completed, sim_input_tokens, sim_output_tokens, sim_cached_tokens,
// sim_id, sim_hang), with its usage in the batch object's usage field.
//
// It serves Azure OpenAI's paths too (see azure.go): the deployment
// routes with their api-version, the v1 routes, the routes of one
// stored response, Config.Deployments mapping each deployment to its
// model, and Azure's 429.
//
// It serves the Responses API whole (see responses.go): stored responses
// retrieved, deleted, listed and cancelled, chains whose usage grows with
// them, background responses running Config.BackgroundDelay, built-in
// tool calls, cached and reasoning tokens in the usage.
//
// It serves Amazon Bedrock's Converse API (see bedrock.go): Converse and
// ConverseStream as an AWS event stream, checking that every request is
// signed with SigV4.
//
// Optional collaborators are options: WithClock; see
// docs/concepts.md#constructors.
package upstream

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/internal/eventstream"
)

// Defaults of Config fields left zero.
const (
	DefaultOutputTokens = 32
	DefaultDimensions   = 8
)

// DefaultModels are the models served when Config.Models is empty.
var DefaultModels = []string{
	"gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano",
	"gpt-5", "gpt-5-mini", "o4-mini", "gpt-3.5-turbo", "gpt-3.5-turbo-instruct",
	"text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002",
}

// Config configures a Server. The zero value answers at once.
type Config struct {
	// Latency is the time before the first byte of every response.
	Latency time.Duration
	// TokensPerSecond is the output rate: a stream sends its tokens at this
	// pace, a non-streaming response waits as long as generating them
	// takes. Zero means as fast as possible.
	TokensPerSecond float64
	// OutputTokens is how many tokens a completion has when the request
	// sets no smaller limit. Zero means DefaultOutputTokens.
	OutputTokens int
	// ChunkTokens is the number of tokens per streamed chunk; zero means 1.
	ChunkTokens int
	// Models lists the models served; others get 404 model_not_found.
	// Empty means DefaultModels.
	Models []string
	// AnyModel serves every model name.
	AnyModel bool
	// Deployments are the Azure OpenAI deployments served, each with the
	// model it runs (see azure.go); nil serves every deployment as the
	// model of its name.
	Deployments map[string]string
	// Limits are the provider's limits per model; the zero Limits limit
	// nothing.
	Limits Limits
	// BatchDelay is how long a batch runs before it ends (see the Batch
	// API in batches.go); zero ends it at its first retrieval.
	BatchDelay time.Duration
	// BackgroundDelay is how long a background response runs before it
	// completes (see responses.go); zero completes it at its first
	// retrieval.
	BackgroundDelay time.Duration
	// CancelBestEffort answers the cancellation of a running background
	// response as Azure OpenAI may: cancelled, while the response runs
	// on and completes as if never cancelled.
	CancelBestEffort bool
	// CancelKeepsOutput has a background response cancelled while
	// running keep the part of its text it made before (the part of
	// BackgroundDelay it ran), its usage still null.
	CancelKeepsOutput bool
}

// An Option sets an optional collaborator of a Server.
type Option func(*Server)

// WithClock sets the clock of batches and of Limits' windows; nil means
// admission.SystemClock, the wall clock, the default.
func WithClock(c admission.Clock) Option {
	return func(s *Server) {
		if c != nil {
			s.clock = c
		}
	}
}

// Server is the simulated API. It is an http.Handler, safe for concurrent
// use, and counts the requests it serves.
type Server struct {
	cfg      Config
	clock    admission.Clock
	models   map[string]bool
	seq      atomic.Int64
	requests atomic.Int64
	inflight atomic.Int64
	maxIn    atomic.Int64
	mu       sync.Mutex
	seen     []Seen
	limits   *limiter // nil without Limits
	limited  atomic.Int64
	batch    batchStore
	resp     respStore
	// finishing ends every stream at its next token (FinishStreams).
	finishing atomic.Bool
}

// Seen records what one request asked for, for tests.
type Seen struct {
	Path string
	// Auth is the Authorization header the upstream received.
	Auth string
	// APIKey is the api-key header (Azure OpenAI's) it received.
	APIKey       string
	IncludeUsage bool
	Stream       bool
	// User is the request's "user" field.
	User string
	// Query is the raw query string of a Gemini API or Azure OpenAI
	// request, or of a route of one response, and GoogAPIKey its
	// x-goog-api-key header.
	Query, GoogAPIKey string
}

// New returns a simulator.
func New(cfg Config, opts ...Option) *Server {
	if cfg.OutputTokens <= 0 {
		cfg.OutputTokens = DefaultOutputTokens
	}
	if cfg.ChunkTokens <= 0 {
		cfg.ChunkTokens = 1
	}
	if len(cfg.Models) == 0 {
		cfg.Models = DefaultModels
	}
	s := &Server{cfg: cfg, clock: admission.SystemClock{}, models: map[string]bool{}}
	for _, o := range opts {
		o(s)
	}
	if cfg.Limits.enabled() {
		s.limits = newLimiter(cfg.Limits, s.clock)
	}
	for _, m := range cfg.Models {
		s.models[m] = true
	}
	return s
}

// Requests returns the number of requests received.
func (s *Server) Requests() int64 { return s.requests.Load() }

// FinishStreams makes every stream served from now on end at its next
// token, as if its output were complete there: its finish chunk, its
// usage (of the tokens sent) and [DONE]. A load test ends many streams at
// once with it, whatever their max_tokens.
func (s *Server) FinishStreams() { s.finishing.Store(true) }

// Limited returns the number of requests refused by Config.Limits.
func (s *Server) Limited() int64 { return s.limited.Load() }

// InFlight returns the number of requests being served now.
func (s *Server) InFlight() int64 { return s.inflight.Load() }

// MaxInFlight returns the most requests served at once since the last
// ResetMaxInFlight.
func (s *Server) MaxInFlight() int64 { return s.maxIn.Load() }

// ResetMaxInFlight starts a new MaxInFlight measurement.
func (s *Server) ResetMaxInFlight() { s.maxIn.Store(s.inflight.Load()) }

// Seen returns the requests received so far (the last 1000).
func (s *Server) Seen() []Seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// simRequest is the part of a request body the simulator reads.
type simRequest struct {
	Model               string          `json:"model"`
	Messages            []simMessage    `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Input               json.RawMessage `json:"input"`
	Instructions        string          `json:"instructions"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MaxOutputTokens     *int            `json:"max_output_tokens"`
	N                   int             `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	EncodingFormat string `json:"encoding_format"`
	Dimensions     int    `json:"dimensions"`
	User           string `json:"user"`
	// The Responses API's chain, background mode and tools.
	PreviousResponseID string `json:"previous_response_id"`
	Background         bool   `json:"background"`
	Tools              []struct {
		Type string `json:"type"`
	} `json:"tools"`
}

// outputLimit returns the smallest of the request's output limits
// (max_tokens, max_completion_tokens, max_output_tokens), and whether it
// sets one.
func (r *simRequest) outputLimit() (int, bool) {
	out, ok := 0, false
	for _, lim := range []*int{r.MaxCompletionTokens, r.MaxTokens, r.MaxOutputTokens} {
		if lim != nil && (!ok || *lim < out) {
			out, ok = *lim, true
		}
	}
	return out, ok
}

type simMessage struct {
	Role    string          `json:"role"`
	Name    string          `json:"name"`
	Content json.RawMessage `json:"content"`
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	n := s.inflight.Add(1)
	// A request stops counting as in flight just before its last write,
	// so a caller that has read the whole answer never sees it counted.
	var once sync.Once
	done := func() { once.Do(func() { s.inflight.Add(-1) }) }
	defer done()
	w = &lastWriter{ResponseWriter: w, done: done}
	for {
		m := s.maxIn.Load()
		if n <= m || s.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(path, "/models"):
		s.listModels(w)
		return
	case r.Method == http.MethodGet && strings.Contains(path, "/models/"):
		id := path[strings.LastIndex(path, "/models/")+len("/models/"):]
		if !s.knows(id) {
			notFound(w, id)
			return
		}
		writeJSON(w, http.StatusOK, modelObject(id))
		return
	case isMessageBatches(path):
		s.messageBatches(w, r, path)
		return
	case isMessages(r, path):
		s.messages(w, r, path)
		return
	case isBedrock(r, path):
		model, stream, _ := bedrockCall(r, path)
		s.bedrock(w, r, path, model, stream)
		return
	case isGemini(r, path):
		model, method, _ := geminiCall(r, path)
		s.gemini(w, r, path, model, method)
		return
	case isBatchAPI(path):
		s.batchAPI(w, r, path)
		return
	case isResponseObject(path):
		s.responseObject(w, r, path)
		return
	case r.Method != http.MethodPost:
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "Method not allowed.")
		return
	}
	var req simRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "We could not parse the JSON body of your request.")
		return
	}
	s.record(Seen{
		Path: path, Auth: r.Header.Get("Authorization"), APIKey: r.Header.Get("Api-Key"), Stream: req.Stream,
		IncludeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage, User: req.User, Query: r.URL.RawQuery,
	})
	azure := azurePath(path)
	if azure && !s.azureDeployment(w, path, &req) {
		return
	}
	if !azure && !s.knows(req.Model) {
		notFound(w, req.Model)
		return
	}
	fault, ok := s.wait(r)
	if ok && azure && fault == "429" {
		azureThrottled(w, r)
		return
	}
	if !ok || s.fault(w, r, fault) {
		return
	}
	out := s.outputTokens(r)
	finish := "stop"
	if lim, ok := req.outputLimit(); ok && lim < out {
		out, finish = max(lim, 0), "length"
	}
	chain := 0
	if strings.HasSuffix(path, "/responses") {
		if chain, ok = s.chain(w, &req); !ok {
			return
		}
	}
	if s.limits != nil {
		n := s.limits.count(path, &req, out) + int64(chain)
		v := s.limits.take(req.Model, n)
		s.limits.setHeaders(w.Header(), v)
		if v.refused != "" {
			s.limited.Add(1)
			s.limits.refuse(w, req.Model, n, v)
			return
		}
	}
	g := gen{s: s, w: w, r: r, req: &req, out: out, finish: finish, cut: fault == "cut"}
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		g.prompt = chatPromptTokens(&req)
		g.chat()
	case strings.HasSuffix(path, "/completions"):
		g.prompt = promptTokens(req.Prompt)
		g.completion()
	case strings.HasSuffix(path, "/embeddings"):
		s.embeddings(w, &req)
	case strings.HasSuffix(path, "/responses"):
		g.prompt = promptTokens(req.Input) + textTokens(req.Instructions) + chain
		g.cached = chain
		g.responses()
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "Unknown request URL: "+r.Method+" "+r.URL.Path)
	}
}

// fault answers the X-Sim-Fault of a request, when it names one the
// simulator answers at once (500, 429, 401, garbage), and reports
// whether it did.
func (s *Server) fault(w http.ResponseWriter, r *http.Request, fault string) bool {
	switch fault {
	case "500":
		writeError(w, http.StatusInternalServerError, "server_error", "", "The server had an error while processing your request.")
		return true
	case "429":
		h := w.Header()
		faultRetryHints(h, r)
		h.Set("X-Ratelimit-Limit-Requests", "10000")
		h.Set("X-Ratelimit-Remaining-Requests", "0")
		h.Set("X-Ratelimit-Reset-Requests", "1s")
		writeError(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", "Rate limit reached for gpt-4o-mini in organization org-simulated on requests per min (RPM): Limit 10000, Used 10000, Requested 1. Please try again in 1s.")
		return true
	case "401":
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		return true
	case "garbage":
		writeGarbage(w)
		return true
	}
	return false
}

// faultRetryHints sets the retry hints of the 429 fault in h: one
// second, or the X-Sim-Retry-After of r (and then no retry-after-ms).
func faultRetryHints(h http.Header, r *http.Request) {
	h.Set("Retry-After", "1")
	h.Set("Retry-After-Ms", "1000")
	if v := r.Header.Get("X-Sim-Retry-After"); v != "" {
		h.Set("Retry-After", v)
		h.Del("Retry-After-Ms")
	}
}

func (s *Server) record(x Seen) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) >= 1000 {
		s.seen = s.seen[1:]
	}
	s.seen = append(s.seen, x)
}

func (s *Server) knows(model string) bool { return s.cfg.AnyModel || s.models[model] }

func (s *Server) listModels(w http.ResponseWriter) {
	data := make([]any, 0, len(s.cfg.Models))
	for _, m := range s.cfg.Models {
		data = append(data, modelObject(m))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func modelObject(id string) map[string]any {
	return map[string]any{"id": id, "object": "model", "created": 1700000000, "owned_by": "sluice-simulator"}
}

func notFound(w http.ResponseWriter, model string) {
	writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found",
		fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model))
}

// wait holds a request for its time to the first byte (Config.Latency,
// or the X-Sim-Latency header's duration) and returns its X-Sim-Fault;
// ok is false when the client left first, or the fault is "hang" (held
// until the client leaves).
func (s *Server) wait(r *http.Request) (fault string, ok bool) {
	latency := s.cfg.Latency
	if d, err := time.ParseDuration(r.Header.Get("X-Sim-Latency")); err == nil {
		latency = d
	}
	fault = r.Header.Get("X-Sim-Fault")
	if fault == "hang" {
		<-r.Context().Done()
		return fault, false
	}
	return fault, sleep(r, latency)
}

// apiFaults are an API's own answers to the X-Sim-Faults it answers at
// once, by fault.
type apiFaults map[string]func(http.ResponseWriter, *http.Request)

// answerFault holds a request for its time to the first byte (wait) and
// answers its X-Sim-Fault in its API's shape (answers; "garbage" is
// answered alike on every API). It reports whether the request is done:
// answered, or its client gone; otherwise it returns the fault, which
// the generation may play ("cut").
func (s *Server) answerFault(w http.ResponseWriter, r *http.Request, answers apiFaults) (fault string, done bool) {
	fault, ok := s.wait(r)
	switch {
	case !ok:
		return fault, true
	case answers[fault] != nil:
		answers[fault](w, r)
		return fault, true
	case fault == "garbage":
		writeGarbage(w)
		return fault, true
	}
	return fault, false
}

// sleep waits d or until the request is cancelled; it reports whether the
// request is still alive.
func sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// textTokens prices a text at one token per four bytes, rounded up.
func textTokens(s string) int { return (len(s) + 3) / 4 }

// promptTokens prices a JSON prompt value (a string, an array of strings,
// content parts or input items) by the length of the strings it holds.
func promptTokens(raw json.RawMessage) int { return promptCount(raw, textTokens) }

// promptCount counts a JSON prompt value with text, which counts one of
// the strings it holds (a token id counts 1).
func promptCount(raw json.RawMessage, text func(string) int) int {
	if len(raw) == 0 {
		return 0
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return text(string(raw))
	}
	return walkTokens(v, text)
}

func walkTokens(v any, text func(string) int) int {
	switch x := v.(type) {
	case string:
		return text(x)
	case []any:
		n := 0
		for _, e := range x {
			n += walkTokens(e, text)
		}
		return n
	case map[string]any:
		n := 0
		for k, e := range x {
			if k == "text" || k == "content" || k == "input" {
				n += walkTokens(e, text)
			}
		}
		return n
	case float64:
		return 1 // a token id
	}
	return 0
}

func chatPromptTokens(req *simRequest) int { return chatPromptCount(req, textTokens) }

// chatPromptCount counts a chat request's messages with text, plus 3 a
// message and 3 for the reply, as OpenAI's tokenizers do.
func chatPromptCount(req *simRequest, text func(string) int) int {
	n := 3
	for _, m := range req.Messages {
		n += 3 + promptCount(m.Content, text)
		if m.Name != "" {
			n++
		}
	}
	return n
}

// words are the simulated output: each is one token in the common
// tokenizers.
var words = []string{" The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."}

func word(i int) string { return words[i%len(words)] }

// gen generates one completion.
type gen struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	req    *simRequest
	prompt int
	cached int // prompt tokens read from the cache (a chain's earlier turns)
	out    int
	finish string
	cut    bool
	// deltaEvent names the events of streamed text, on APIs that name
	// their events.
	deltaEvent string
}

func (g *gen) id(prefix string) string { return fmt.Sprintf("%s-sim%d", prefix, g.s.seq.Add(1)) }

func (g *gen) choices() int { return max(g.req.N, 1) }

// pace waits for the generation of k tokens; it reports whether the
// request is still alive.
func (g *gen) pace(k int) bool {
	if g.s.cfg.TokensPerSecond <= 0 || k == 0 {
		return g.r.Context().Err() == nil
	}
	return sleep(g.r, time.Duration(float64(k)/g.s.cfg.TokensPerSecond*float64(time.Second)))
}

func (g *gen) text() string {
	var b strings.Builder
	for i := range g.out {
		b.WriteString(word(i))
	}
	return b.String()
}

func (g *gen) includeUsage() bool {
	return g.req.StreamOptions != nil && g.req.StreamOptions.IncludeUsage
}

func (g *gen) chatUsage() map[string]any {
	out := g.out * g.choices()
	return map[string]any{
		"prompt_tokens": g.prompt, "completion_tokens": out, "total_tokens": g.prompt + out,
		"prompt_tokens_details":     map[string]any{"cached_tokens": 0, "audio_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0, "audio_tokens": 0},
	}
}

func (g *gen) chat() {
	created := time.Now().Unix()
	if !g.req.Stream {
		if !g.pace(g.out) {
			return
		}
		choices := make([]any, g.choices())
		for i := range choices {
			choices[i] = map[string]any{
				"index": i, "finish_reason": g.finish, "logprobs": nil,
				"message": map[string]any{"role": "assistant", "content": g.text(), "refusal": nil},
			}
		}
		writeJSON(g.w, http.StatusOK, map[string]any{
			"id": g.id("chatcmpl"), "object": "chat.completion", "created": created, "model": g.req.Model,
			"choices": choices, "usage": g.chatUsage(), "system_fingerprint": "fp_sim",
		})
		return
	}
	id := g.id("chatcmpl")
	sse := g.startSSE()
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": g.req.Model,
			"system_fingerprint": "fp_sim",
			"choices":            []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		}
		if g.includeUsage() {
			c["usage"] = nil
		}
		return c
	}
	if !sse.data(chunk(map[string]any{"role": "assistant", "content": ""}, nil)) {
		return
	}
	if !g.streamTokens(sse, func(text string) any { return chunk(map[string]any{"content": text}, nil) }) {
		return
	}
	if !sse.data(chunk(map[string]any{}, g.finish)) {
		return
	}
	if g.includeUsage() {
		if !sse.data(map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": g.req.Model,
			"system_fingerprint": "fp_sim", "choices": []any{}, "usage": g.chatUsage(),
		}) {
			return
		}
	}
	sse.done()
}

// streamTokens sends the output in chunks; it reports whether the stream
// may go on.
func (g *gen) streamTokens(sse *sseWriter, event func(text string) any) bool {
	step := g.s.cfg.ChunkTokens
	for i := 0; i < g.out; i += step {
		if g.s.finishing.Load() {
			g.out = i
			break
		}
		k := min(step, g.out-i)
		if g.cut && i >= g.out/2 {
			// Break the connection without ending the response.
			panic(http.ErrAbortHandler)
		}
		if !g.pace(k) {
			return false
		}
		var b strings.Builder
		for j := range k {
			b.WriteString(word(i + j))
		}
		ok := false
		if g.deltaEvent != "" {
			ok = sse.event(g.deltaEvent, event(b.String()))
		} else {
			ok = sse.data(event(b.String()))
		}
		if !ok {
			return false
		}
	}
	return true
}

func (g *gen) completion() {
	created := time.Now().Unix()
	usage := func() map[string]any {
		return map[string]any{"prompt_tokens": g.prompt, "completion_tokens": g.out * g.choices(), "total_tokens": g.prompt + g.out*g.choices()}
	}
	if !g.req.Stream {
		if !g.pace(g.out) {
			return
		}
		choices := make([]any, g.choices())
		for i := range choices {
			choices[i] = map[string]any{"index": i, "text": g.text(), "finish_reason": g.finish, "logprobs": nil}
		}
		writeJSON(g.w, http.StatusOK, map[string]any{
			"id": g.id("cmpl"), "object": "text_completion", "created": created, "model": g.req.Model,
			"choices": choices, "usage": usage(),
		})
		return
	}
	id := g.id("cmpl")
	sse := g.startSSE()
	chunk := func(text string, finish any) map[string]any {
		c := map[string]any{
			"id": id, "object": "text_completion", "created": created, "model": g.req.Model,
			"choices": []any{map[string]any{"index": 0, "text": text, "finish_reason": finish, "logprobs": nil}},
		}
		if g.includeUsage() {
			c["usage"] = nil
		}
		return c
	}
	if !g.streamTokens(sse, func(text string) any { return chunk(text, nil) }) {
		return
	}
	if !sse.data(chunk("", g.finish)) {
		return
	}
	if g.includeUsage() {
		if !sse.data(map[string]any{"id": id, "object": "text_completion", "created": created, "model": g.req.Model, "choices": []any{}, "usage": usage()}) {
			return
		}
	}
	sse.done()
}

func (s *Server) embeddings(w http.ResponseWriter, req *simRequest) {
	var inputs []json.RawMessage
	if len(req.Input) > 0 && req.Input[0] == '[' {
		if json.Unmarshal(req.Input, &inputs) != nil {
			inputs = nil
		}
		// An array of token ids is one input.
		if len(inputs) > 0 && len(inputs[0]) > 0 && inputs[0][0] != '"' && inputs[0][0] != '[' {
			inputs = []json.RawMessage{req.Input}
		}
	} else {
		inputs = []json.RawMessage{req.Input}
	}
	dims := req.Dimensions
	if dims <= 0 || dims > 4096 {
		dims = DefaultDimensions
	}
	tokens := 0
	data := make([]any, len(inputs))
	for i, in := range inputs {
		tokens += promptTokens(in)
		vec := make([]float32, dims)
		for j := range vec {
			vec[j] = float32(math.Sin(float64(i*dims+j+len(in)))) / 2
		}
		var emb any = vec
		if req.EncodingFormat == "base64" {
			var b bytes.Buffer
			_ = binary.Write(&b, binary.LittleEndian, vec)
			emb = base64.StdEncoding.EncodeToString(b.Bytes())
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": emb}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": data, "model": req.Model,
		"usage": map[string]any{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}

// sseWriter writes server-sent events, or the messages of an AWS event
// stream (frames), and flushes each.
type sseWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	frames bool
}

func (g *gen) startSSE() *sseWriter {
	h := g.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	g.w.WriteHeader(http.StatusOK)
	return &sseWriter{w: g.w, rc: http.NewResponseController(g.w)}
}

func (s *sseWriter) data(v any) bool {
	b, _ := json.Marshal(v)
	return s.write("", b)
}

func (s *sseWriter) event(name string, v any) bool {
	b, _ := json.Marshal(v)
	return s.write(name, b)
}

func (s *sseWriter) done() {
	s.last()
	s.write("", []byte("[DONE]"))
}

// last marks the next write as the response's last.
func (s *sseWriter) last() {
	if lw, ok := s.w.(*lastWriter); ok {
		lw.done()
	}
}

// lastWriter lets the handler stop counting a request before its last
// write.
type lastWriter struct {
	http.ResponseWriter
	done func()
}

func (w *lastWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *sseWriter) write(name string, data []byte) bool {
	var buf []byte
	if s.frames {
		buf = eventstream.Event(name, data)
	} else {
		buf = make([]byte, 0, len(data)+len(name)+16)
		if name != "" {
			buf = append(append(append(buf, "event: "...), name...), '\n')
		}
		buf = append(append(append(buf, "data: "...), data...), "\n\n"...)
	}
	if _, err := s.w.Write(buf); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	if lw, ok := w.(*lastWriter); ok {
		lw.done()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	var c any
	if code != "" {
		c = code
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}})
}

// writeGarbage answers the "garbage" fault: a 200 whose JSON body is an
// HTML error page, as a broken proxy in front of a provider sends.
func writeGarbage(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("<html>upstream proxy error</html>"))
}

// outputTokens is how many tokens an answer has: X-Sim-Tokens when it is
// a non-negative number, else the configured OutputTokens.
func (s *Server) outputTokens(r *http.Request) int {
	if v, err := strconv.Atoi(r.Header.Get("X-Sim-Tokens")); err == nil && v >= 0 {
		return v
	}
	return s.cfg.OutputTokens
}
