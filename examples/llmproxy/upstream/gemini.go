package upstream

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The Gemini API, simulated: POST .../models/{model}:generateContent
// answers a GenerateContentResponse (candidates, usageMetadata),
// :streamGenerateContent?alt=sse the same as server-sent events (a chunk
// per ChunkTokens words, each with the usage so far; the last with its
// finishReason and the whole usage), and :countTokens the prompt's
// totalTokens, for the models of Config.Models and GeminiModels. Errors
// take Google's shape ({"error":{"code","message","status","details"}}).
//
// The prompt is priced as the OpenAI routes price it (one token per four
// bytes of text, 3 per content, 3 to prime the reply). The X-Sim-*
// headers of the package doc apply: X-Sim-Fault: 429 answers
// RESOURCE_EXHAUSTED with a RetryInfo detail (retryDelay "1s", or
// X-Sim-Retry-After's seconds) and a QuotaFailure on input tokens per
// minute; X-Sim-Reasoning-Tokens reports thoughtsTokenCount, and
// X-Sim-Cached-Tokens cachedContentTokenCount (part of the prompt).
// Config.Limits is enforced as on the other routes (the prompt and the
// output against the tokens limit), a refusal answered with Google's 429
// (its QuotaFailure naming the quota run out, its RetryInfo the wait)
// and no limit headers, as Google sends none.

// GeminiModels are served by the Gemini API besides Config.Models.
var GeminiModels = []string{"gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.0-flash", "gemini-3-pro-preview"}

// isGemini reports whether a request is for the Gemini API.
func isGemini(r *http.Request, path string) bool {
	_, _, ok := geminiCall(r, path)
	return ok
}

// geminiCall returns the model and method of a Gemini API path, or ok
// false for another path.
func geminiCall(r *http.Request, path string) (model, method string, ok bool) {
	i := strings.LastIndex(path, "/models/")
	if r.Method != http.MethodPost || i < 0 {
		return "", "", false
	}
	model, method, ok = strings.Cut(path[i+len("/models/"):], ":")
	switch method {
	case "generateContent", "streamGenerateContent", "countTokens":
		return model, method, ok
	}
	return "", "", false
}

// geminiRequest is the part of a generateContent body the simulator reads.
type geminiRequest struct {
	Contents          []geminiContent `json:"contents"`
	SystemInstruction *geminiContent  `json:"systemInstruction"`
	GenerationConfig  struct {
		MaxOutputTokens *int `json:"maxOutputTokens"`
	} `json:"generationConfig"`
}

// geminiContent is a Content: its role and its parts' text.
type geminiContent struct {
	Role  string `json:"role"`
	Parts []struct {
		Text string `json:"text"`
	} `json:"parts"`
}

// tokens prices a content as a message: 3, its role and its text.
func (c *geminiContent) tokens() int {
	n := 3 + textTokens(c.Role)
	for _, p := range c.Parts {
		n += textTokens(p.Text)
	}
	return n
}

// price prices the system instruction and the contents, and 3 to prime
// the reply.
func (g *geminiRequest) price() int {
	n := 3
	if g.SystemInstruction != nil {
		n += g.SystemInstruction.tokens()
	}
	for i := range g.Contents {
		n += g.Contents[i].tokens()
	}
	return n
}

// googleError answers in Google's error shape.
func googleError(w http.ResponseWriter, status int, code, msg string, details ...any) {
	e := map[string]any{"code": status, "message": msg, "status": code}
	if len(details) > 0 {
		e["details"] = details
	}
	writeJSON(w, status, map[string]any{"error": e})
}

// quotaExceeded answers Google's 429: RESOURCE_EXHAUSTED with a
// QuotaFailure naming the quota of dim ("requests" or "tokens", input
// tokens per minute) and its value, and a RetryInfo of delay (rounded up
// to the millisecond).
func quotaExceeded(w http.ResponseWriter, model, dim string, value int64, delay time.Duration) {
	metric, id := "generate_content_paid_tier_requests", "GenerateRequestsPerMinutePerProjectPerModel"
	if dim == "tokens" {
		metric, id = "generate_content_paid_tier_input_token_count", "GenerateContentPaidTierInputTokensPerModelPerMinute"
	}
	ms := (delay + time.Millisecond - 1) / time.Millisecond
	googleError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED",
		"You exceeded your current quota, please check your plan and billing details.",
		map[string]any{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []any{map[string]any{
			"quotaMetric": "generativelanguage.googleapis.com/" + metric, "quotaId": id,
			"quotaDimensions": map[string]any{"location": "global", "model": model},
			"quotaValue":      strconv.FormatInt(value, 10),
		}}},
		map[string]any{"@type": "type.googleapis.com/google.rpc.Help", "links": []any{map[string]any{"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}}},
		map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64) + "s"})
}

// gemini serves the Gemini API.
func (s *Server) gemini(w http.ResponseWriter, r *http.Request, path, model, method string) {
	var req geminiRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		googleError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received.")
		return
	}
	stream := method == "streamGenerateContent"
	s.record(Seen{Path: path, Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization"), APIKey: r.Header.Get("Api-Key"), GoogAPIKey: r.Header.Get("X-Goog-Api-Key"), Stream: stream})
	if !s.knows(model) && !slices.Contains(GeminiModels, model) {
		googleError(w, http.StatusNotFound, "NOT_FOUND", "models/"+model+" is not found for API version v1beta, or is not supported for generateContent.")
		return
	}
	prompt := req.price()
	if method == "countTokens" {
		writeJSON(w, http.StatusOK, map[string]any{"totalTokens": prompt})
		return
	}
	if stream && r.URL.Query().Get("alt") != "sse" {
		googleError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "The simulator streams with alt=sse only.")
		return
	}
	fault, done := s.answerFault(w, r, apiFaults{
		"500": func(w http.ResponseWriter, _ *http.Request) {
			googleError(w, http.StatusInternalServerError, "INTERNAL", "An internal error has occurred.")
		},
		"429": func(w http.ResponseWriter, r *http.Request) {
			delay := time.Second
			if v, err := strconv.Atoi(r.Header.Get("X-Sim-Retry-After")); err == nil && v >= 0 {
				delay = time.Duration(v) * time.Second
			}
			quotaExceeded(w, model, "tokens", 1_000_000, delay)
		},
		"401": func(w http.ResponseWriter, _ *http.Request) {
			googleError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
				map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com",
					"metadata": map[string]any{"service": "generativelanguage.googleapis.com"}})
		},
	})
	if done {
		return
	}
	out := s.outputTokens(r)
	finish := "STOP"
	if lim := req.GenerationConfig.MaxOutputTokens; lim != nil && *lim < out {
		out, finish = max(*lim, 0), "MAX_TOKENS"
	}
	if s.limits != nil {
		// Google sends no limit headers: its figures are in the 429's body.
		if v := s.limits.take(model, int64(prompt+out)); v.refused != "" {
			s.limited.Add(1)
			limit := s.limits.cfg.Requests
			if v.refused == "tokens" {
				limit = s.limits.cfg.Tokens
			}
			quotaExceeded(w, model, v.refused, limit, v.retry)
			return
		}
	}
	reasoning, _ := strconv.Atoi(r.Header.Get("X-Sim-Reasoning-Tokens"))
	cached, _ := strconv.Atoi(r.Header.Get("X-Sim-Cached-Tokens"))
	g := gen{s: s, w: w, r: r, req: &simRequest{Model: model, Stream: stream}, prompt: prompt, cached: min(max(cached, 0), prompt), out: out, finish: finish, cut: fault == "cut"}
	g.generateContent(max(reasoning, 0))
}

// geminiUsage is a usageMetadata with output tokens of text so far, as
// the Gemini API writes it: a count of zero is left out.
func (g *gen) geminiUsage(output, thoughts int) map[string]any {
	u := map[string]any{"promptTokenCount": g.prompt, "totalTokenCount": g.prompt + output + thoughts}
	if output > 0 {
		u["candidatesTokenCount"] = output
	}
	if thoughts > 0 {
		u["thoughtsTokenCount"] = thoughts
	}
	if g.cached > 0 {
		u["cachedContentTokenCount"] = g.cached
	}
	return u
}

// generateContent answers one generateContent call, in JSON or streamed.
func (g *gen) generateContent(thoughts int) {
	id := g.id("gemini")
	chunk := func(text string, finish string, usage map[string]any) map[string]any {
		c := map[string]any{"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": text}}}, "index": 0}
		if finish != "" {
			c["finishReason"] = finish
		}
		return map[string]any{"candidates": []any{c}, "usageMetadata": usage, "modelVersion": g.req.Model, "responseId": id}
	}
	if !g.req.Stream {
		if !g.pace(g.out) {
			return
		}
		writeJSON(g.w, http.StatusOK, chunk(g.text(), g.finish, g.geminiUsage(g.out, thoughts)))
		return
	}
	sse := g.startSSE()
	if !g.streamTokens(sse, func(text string) any {
		return chunk(text, "", g.geminiUsage(0, 0))
	}) {
		return
	}
	sse.last()
	sse.data(chunk("", g.finish, g.geminiUsage(g.out, thoughts)))
}
