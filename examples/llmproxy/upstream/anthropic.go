package upstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Anthropic's Messages API, simulated: POST /v1/messages answers a
// message in JSON, or as server-sent events (message_start with the
// prompt's usage, content_block_start, content_block_delta per chunk,
// content_block_stop, message_delta with the output's usage,
// message_stop), and POST /v1/messages/count_tokens the prompt's
// input_tokens, for the models of Config.Models and ClaudeModels.
// Errors take Anthropic's shape.
//
// The prompt is priced as the OpenAI routes price it (one token per four
// bytes of text, 3 per message, 3 to prime the reply). The part of the
// prompt up to and including the last block with cache_control is the
// cached prefix: written to the cache (cache_creation_input_tokens), or,
// with the request header X-Sim-Cache: read, read from it
// (cache_read_input_tokens); input_tokens is the rest, as Anthropic
// reports it. The writes are split by time to live in cache_creation:
// the prompt up to the last block whose cache_control has "ttl": "1h" is
// ephemeral_1h_input_tokens, the rest of the prefix
// ephemeral_5m_input_tokens. The X-Sim-* headers of the package doc apply, and
// X-Sim-Fault: 529 answers overloaded_error.

// ClaudeModels are served by the Messages API besides Config.Models.
var ClaudeModels = []string{
	"claude-opus-4-1", "claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5",
	"claude-sonnet-4-0", "claude-3-7-sonnet-latest", "claude-3-5-haiku-latest",
}

// anthropicFaults are the Messages API's answers to X-Sim-Fault.
var anthropicFaults = apiFaults{
	"500": func(w http.ResponseWriter, _ *http.Request) {
		anthropicError(w, http.StatusInternalServerError, "api_error", "Internal server error")
	},
	"529": func(w http.ResponseWriter, _ *http.Request) { anthropicError(w, 529, "overloaded_error", "Overloaded") },
	"429": func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Retry-After", "1")
		h.Set("Anthropic-Ratelimit-Requests-Limit", "50")
		h.Set("Anthropic-Ratelimit-Requests-Remaining", "0")
		h.Set("Anthropic-Ratelimit-Requests-Reset", time.Now().Add(time.Second).UTC().Format(time.RFC3339))
		h.Set("Anthropic-Organization-Id", "org-simulated")
		anthropicError(w, http.StatusTooManyRequests, "rate_limit_error", "This request would exceed the rate limit for your organization (org-simulated) of 50 requests per minute.")
	},
	"401": func(w http.ResponseWriter, _ *http.Request) {
		anthropicError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
	},
}

// isMessages reports whether a request is for the Messages API.
func isMessages(r *http.Request, path string) bool {
	return r.Method == http.MethodPost && (strings.HasSuffix(path, "/messages") || strings.HasSuffix(path, "/messages/count_tokens"))
}

// messagesRequest is the part of a Messages API body the simulator reads.
type messagesRequest struct {
	Model     string            `json:"model"`
	MaxTokens *int              `json:"max_tokens"`
	System    json.RawMessage   `json:"system"`
	Messages  []messagesMessage `json:"messages"`
	Stream    bool              `json:"stream"`
	Metadata  struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
}

type messagesMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// messagesPrompt is a prompt's tokens: the whole, the cached prefix, and
// the part of the prefix cached for an hour.
type messagesPrompt struct{ total, prefix, hour int }

// usage returns the prompt's part of a message's usage: the prefix
// written to the cache, split by time to live, or read from it.
func (p messagesPrompt) usage(read bool) map[string]any {
	if read {
		return map[string]any{
			"input_tokens": p.total - p.prefix, "cache_creation_input_tokens": 0, "cache_read_input_tokens": p.prefix,
			"cache_creation": map[string]any{"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
		}
	}
	return map[string]any{
		"input_tokens": p.total - p.prefix, "cache_creation_input_tokens": p.prefix, "cache_read_input_tokens": 0,
		"cache_creation": map[string]any{"ephemeral_5m_input_tokens": p.prefix - p.hour, "ephemeral_1h_input_tokens": p.hour},
	}
}

// price prices the system prompt and the messages, and finds the cached
// prefix and its one-hour part.
func (m *messagesRequest) price() messagesPrompt {
	var p messagesPrompt
	add := func(raw json.RawMessage) {
		var blocks []struct {
			CacheControl *struct {
				TTL string `json:"ttl"`
			} `json:"cache_control"`
		}
		if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &blocks) != nil {
			p.total += promptTokens(raw)
			return
		}
		var parts []json.RawMessage
		_ = json.Unmarshal(raw, &parts)
		for i, b := range parts {
			p.total += promptTokens(b)
			if cc := blocks[i].CacheControl; cc != nil {
				p.prefix = p.total
				if cc.TTL == "1h" {
					p.hour = p.total
				}
			}
		}
	}
	add(m.System)
	for _, msg := range m.Messages {
		p.total += 3
		add(msg.Content)
	}
	p.total += 3
	return p
}

// anthropicError answers in Anthropic's error shape.
func anthropicError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

// messages serves the Messages API.
func (s *Server) messages(w http.ResponseWriter, r *http.Request, path string) {
	// As Anthropic's API, an id on every answer.
	w.Header().Set("Request-Id", fmt.Sprintf("req_sim_%024d", s.requests.Load()))
	var req messagesRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "The request body is not valid JSON.")
		return
	}
	s.record(Seen{Path: path, Auth: r.Header.Get("Authorization"), APIKey: r.Header.Get("Api-Key"), Stream: req.Stream})
	if !s.knows(req.Model) && !slices.Contains(ClaudeModels, req.Model) {
		anthropicError(w, http.StatusNotFound, "not_found_error", "model: "+req.Model)
		return
	}
	prompt := req.price()
	if strings.HasSuffix(path, "/count_tokens") {
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": prompt.total})
		return
	}
	if req.MaxTokens == nil {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "max_tokens: Field required")
		return
	}
	fault, done := s.answerFault(w, r, anthropicFaults)
	if done {
		return
	}
	out := s.outputTokens(r)
	stop := "end_turn"
	if *req.MaxTokens < out {
		out, stop = max(*req.MaxTokens, 0), "max_tokens"
	}
	usage := prompt.usage(r.Header.Get("X-Sim-Cache") == "read")
	g := gen{s: s, w: w, r: r, req: &simRequest{Model: req.Model, Stream: req.Stream}, prompt: prompt.total, out: out, finish: stop, cut: fault == "cut"}
	g.message(usage)
}

// message answers one message, in JSON or streamed.
func (g *gen) message(usage map[string]any) {
	id := g.id("msg")
	msg := func(content []any, stop any, output int) map[string]any {
		u := map[string]any{"output_tokens": output}
		for k, v := range usage {
			u[k] = v
		}
		return map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": g.req.Model, "content": content,
			"stop_reason": stop, "stop_sequence": nil, "usage": u,
		}
	}
	if !g.req.Stream {
		if !g.pace(g.out) {
			return
		}
		writeJSON(g.w, http.StatusOK, msg([]any{map[string]any{"type": "text", "text": g.text()}}, g.finish, g.out))
		return
	}
	sse := g.startSSE()
	event := func(typ string, v map[string]any) bool {
		v["type"] = typ
		return sse.event(typ, v)
	}
	if !event("message_start", map[string]any{"message": msg([]any{}, nil, 1)}) ||
		!event("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) ||
		!event("ping", map[string]any{}) {
		return
	}
	g.deltaEvent = "content_block_delta"
	if !g.streamTokens(sse, func(text string) any {
		return map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": text}}
	}) {
		return
	}
	if !event("content_block_stop", map[string]any{"index": 0}) ||
		!event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": g.finish, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": g.out}}) {
		return
	}
	sse.last()
	event("message_stop", map[string]any{})
}
