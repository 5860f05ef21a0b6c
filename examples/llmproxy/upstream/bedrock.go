package upstream

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// Amazon Bedrock's Converse API, simulated: POST /model/{modelId}/converse
// answers a ConverseResponse (output.message, stopReason, usage,
// metrics), /model/{modelId}/converse-stream the same as an AWS event
// stream (messageStart, a contentBlockDelta per ChunkTokens words,
// contentBlockStop, messageStop, and metadata with the usage), for the
// models of Config.Models and BedrockModels. Errors take Bedrock's shape
// (the type in x-amzn-ErrorType, the body {"message": ...}).
//
// Every request must carry a SigV4 signature of the shape AWS checks
// (Authorization: AWS4-HMAC-SHA256 Credential=<key id>/<date>/<region>/
// bedrock/aws4_request, SignedHeaders=...;host;...;x-amz-date...,
// Signature=<64 hex digits>, and X-Amz-Date), else it is refused with 403
// (MissingAuthenticationTokenException, or InvalidSignatureException for
// a malformed one); the signature itself is not checked, as the
// simulator holds no secret.
//
// The prompt is priced as the other routes price it (one token per four
// bytes of text, 3 per message, 3 to prime the reply). The part of the
// prompt up to the last cachePoint block is the cached prefix: written
// to the cache (cacheWriteInputTokens), or, with the request header
// X-Sim-Cache: read, read from it (cacheReadInputTokens); inputTokens is
// the rest, as Bedrock reports it. The writes are split by time to live
// in cacheDetails (1h before 5m, as Bedrock sorts them, an empty part
// left out): the prompt up to the last cachePoint with "ttl": "1h" is
// written for an hour, the rest of the prefix for five minutes. The X-Sim-* headers of the package
// doc apply: X-Sim-Fault: 429 answers a ThrottlingException, 500 an
// InternalServerException, 401 a 403 UnrecognizedClientException (as
// for wrong upstream credentials). Config.Limits is enforced as on the
// other routes, a refusal answered with a ThrottlingException and no
// limit headers, as Bedrock sends none.

// BedrockModels are served by the Converse API besides Config.Models.
var BedrockModels = []string{
	"anthropic.claude-3-5-sonnet-20240620-v1:0", "anthropic.claude-3-haiku-20240307-v1:0",
	"us.anthropic.claude-sonnet-4-20250514-v1:0", "global.anthropic.claude-haiku-4-5-20251001-v1:0",
	"amazon.nova-pro-v1:0", "meta.llama3-1-70b-instruct-v1:0",
}

// bedrockCall returns the model id and the operation of a Converse API
// path (stream for converse-stream), or ok false for another path.
func bedrockCall(r *http.Request, path string) (model string, stream, ok bool) {
	i := strings.LastIndex(path, "/model/")
	if r.Method != http.MethodPost || i < 0 {
		return "", false, false
	}
	model, op, ok := strings.Cut(path[i+len("/model/"):], "/")
	switch {
	case !ok:
	case op == "converse":
		return model, false, true
	case op == "converse-stream":
		return model, true, true
	}
	return "", false, false
}

// isBedrock reports whether a request is for the Converse API.
func isBedrock(r *http.Request, path string) bool {
	_, _, ok := bedrockCall(r, path)
	return ok
}

// converseRequest is the part of a Converse body the simulator reads.
type converseRequest struct {
	Messages []struct {
		Role    string          `json:"role"`
		Content []converseBlock `json:"content"`
	} `json:"messages"`
	System          []converseBlock `json:"system"`
	InferenceConfig struct {
		MaxTokens *int `json:"maxTokens"`
	} `json:"inferenceConfig"`
}

// converseBlock is a content block: its text, or a cache point.
type converseBlock struct {
	Text       string `json:"text"`
	CachePoint *struct {
		TTL string `json:"ttl"`
	} `json:"cachePoint"`
}

// price prices the system blocks and the messages, and 3 to prime the
// reply; prefix is the part up to the last cache point, hour the part
// up to the last one-hour cache point.
func (c *converseRequest) price() (total, prefix, hour int) {
	block := func(b converseBlock) {
		total += textTokens(b.Text)
		if b.CachePoint != nil {
			prefix = total
			if b.CachePoint.TTL == "1h" {
				hour = total
			}
		}
	}
	if len(c.System) > 0 {
		total += 3
	}
	for _, b := range c.System {
		block(b)
	}
	for _, m := range c.Messages {
		total += 3 + textTokens(m.Role)
		for _, b := range m.Content {
			block(b)
		}
	}
	return total + 3, prefix, hour
}

// sigV4 is the shape of a SigV4 Authorization header for Bedrock.
var sigV4 = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=[A-Za-z0-9]{1,128}/\d{8}/[a-z0-9-]{1,32}/bedrock/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=[0-9a-f]{64}$`)

// signedWell reports whether r carries a well-formed SigV4 signature
// that covers host and x-amz-date.
func signedWell(r *http.Request) bool {
	m := sigV4.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil || len(r.Header.Get("X-Amz-Date")) != len("20060102T150405Z") {
		return false
	}
	signed := strings.Split(m[1], ";")
	return slices.Contains(signed, "host") && slices.Contains(signed, "x-amz-date")
}

// bedrockError answers in Bedrock's error shape.
func bedrockError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("X-Amzn-Errortype", typ)
	writeJSON(w, status, map[string]any{"message": msg})
}

// bedrockFaults are the Converse API's answers to X-Sim-Fault.
var bedrockFaults = apiFaults{
	"500": func(w http.ResponseWriter, _ *http.Request) {
		bedrockError(w, http.StatusInternalServerError, "InternalServerException", "The server encountered an internal error.")
	},
	"429": func(w http.ResponseWriter, _ *http.Request) {
		bedrockError(w, http.StatusTooManyRequests, "ThrottlingException", "Too many requests, please wait before trying again.")
	},
	"401": func(w http.ResponseWriter, _ *http.Request) {
		bedrockError(w, http.StatusForbidden, "UnrecognizedClientException", "The security token included in the request is invalid.")
	},
}

// bedrock serves the Converse API.
func (s *Server) bedrock(w http.ResponseWriter, r *http.Request, path, model string, stream bool) {
	s.record(Seen{Path: path, Auth: r.Header.Get("Authorization"), Stream: stream})
	switch {
	case r.Header.Get("Authorization") == "":
		bedrockError(w, http.StatusForbidden, "MissingAuthenticationTokenException", "Missing Authentication Token")
		return
	case !signedWell(r):
		bedrockError(w, http.StatusForbidden, "InvalidSignatureException", "The request signature we calculated does not match the signature you provided.")
		return
	}
	var req converseRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		bedrockError(w, http.StatusBadRequest, "ValidationException", "Malformed input request, please reformat your input and try again.")
		return
	}
	if !s.knows(model) && !slices.Contains(BedrockModels, model) {
		bedrockError(w, http.StatusNotFound, "ResourceNotFoundException", "The provided model identifier is invalid.")
		return
	}
	fault, done := s.answerFault(w, r, bedrockFaults)
	if done {
		return
	}
	prompt, prefix, hour := req.price()
	out := s.outputTokens(r)
	stop := "end_turn"
	if lim := req.InferenceConfig.MaxTokens; lim != nil && *lim < out {
		out, stop = max(*lim, 0), "max_tokens"
	}
	if s.limits != nil {
		if v := s.limits.take(model, int64(prompt+out)); v.refused != "" {
			s.limited.Add(1)
			bedrockError(w, http.StatusTooManyRequests, "ThrottlingException", "Too many tokens, please wait before trying again.")
			return
		}
	}
	usage := map[string]any{"inputTokens": prompt - prefix, "cacheWriteInputTokens": prefix, "cacheReadInputTokens": 0}
	if r.Header.Get("X-Sim-Cache") == "read" {
		usage["cacheWriteInputTokens"], usage["cacheReadInputTokens"] = 0, prefix
	} else if prefix > 0 {
		var details []any
		for _, d := range []struct {
			ttl    string
			tokens int
		}{{"1h", hour}, {"5m", prefix - hour}} {
			if d.tokens > 0 {
				details = append(details, map[string]any{"ttl": d.ttl, "inputTokens": d.tokens})
			}
		}
		usage["cacheDetails"] = details
	}
	g := gen{s: s, w: w, r: r, req: &simRequest{Model: model, Stream: stream}, prompt: prompt, out: out, finish: stop, cut: fault == "cut"}
	g.converse(usage)
}

// converse answers one Converse call, in JSON or as an event stream.
func (g *gen) converse(usage map[string]any) {
	final := func() map[string]any {
		u := map[string]any{"outputTokens": g.out, "totalTokens": g.prompt + g.out}
		for k, v := range usage {
			u[k] = v
		}
		return u
	}
	metrics := map[string]any{"latencyMs": 1}
	if !g.req.Stream {
		if !g.pace(g.out) {
			return
		}
		writeJSON(g.w, http.StatusOK, map[string]any{
			"output":     map[string]any{"message": map[string]any{"role": "assistant", "content": []any{map[string]any{"text": g.text()}}}},
			"stopReason": g.finish, "usage": final(), "metrics": metrics,
		})
		return
	}
	h := g.w.Header()
	h.Set("Content-Type", "application/vnd.amazon.eventstream")
	g.w.WriteHeader(http.StatusOK)
	es := &sseWriter{w: g.w, rc: http.NewResponseController(g.w), frames: true}
	if !es.event("messageStart", map[string]any{"role": "assistant"}) {
		return
	}
	g.deltaEvent = "contentBlockDelta"
	if !g.streamTokens(es, func(text string) any {
		return map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"text": text}}
	}) {
		return
	}
	if !es.event("contentBlockStop", map[string]any{"contentBlockIndex": 0}) || !es.event("messageStop", map[string]any{"stopReason": g.finish}) {
		return
	}
	es.last()
	es.event("metadata", map[string]any{"usage": final(), "metrics": metrics})
}
