package upstream

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OpenAI's Responses API, simulated beyond POST /v1/responses: every
// response is stored (the last maxSimResponses), so that GET and DELETE
// /v1/responses/{id}, GET /v1/responses/{id}/input_items and POST
// /v1/responses/{id}/cancel answer with OpenAI's objects and error
// shape, with the same faults and latency as the other routes
// (X-Sim-Fault, X-Sim-Latency). Azure OpenAI's routes of one response
// (/openai/responses/{id}... and /openai/v1/responses/{id}...) reach
// the same store, whichever route created the response.
//
// A call chained with previous_response_id reads the chain as input: its
// input_tokens are its own prompt plus the previous response's input and
// output tokens, of which input_tokens_details.cached_tokens are the
// chain (an unknown or deleted previous response is a 404). The header
// X-Sim-Reasoning-Tokens adds that many reasoning tokens to the output
// (output_tokens_details.reasoning_tokens). Each web_search and
// file_search tool the request declares makes one web_search_call or
// file_search_call item of the output.
//
// A background call (background: true, not streamed) is answered queued
// and completes Config.BackgroundDelay after its creation on the clock
// of WithClock (at its first retrieval when zero); cancelled before
// that, it ends cancelled without usage, and without output unless
// Config.CancelKeepsOutput; with Config.CancelBestEffort the
// cancellation is answered cancelled and changes nothing. Only a
// background response can be cancelled.

// maxSimResponses bounds the responses the simulator stores.
const maxSimResponses = 10_000

// respStore holds the simulator's responses.
type respStore struct {
	mu    sync.Mutex
	byID  map[string]*simResponse
	order []string
}

// simResponse is a stored response: its final object and input items.
type simResponse struct {
	final      map[string]any // the object once complete
	items      []any
	total      int // input and output tokens: the chain after it
	background bool
	created    time.Time
	retrieved  bool
	cancelled  bool
	// kept is the output a cancelled response keeps
	// (Config.CancelKeepsOutput).
	kept []any
}

// isResponseObject reports whether path is that of one response.
func isResponseObject(path string) bool { return strings.Contains(path, "/responses/") }

func (st *respStore) get(id string) *simResponse {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.byID[id]
}

func (st *respStore) put(id string, r *simResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.byID == nil {
		st.byID = map[string]*simResponse{}
	}
	if len(st.order) >= maxSimResponses {
		delete(st.byID, st.order[0])
		st.order = st.order[1:]
	}
	st.byID[id] = r
	st.order = append(st.order, id)
}

// chain returns the tokens of the chain a Responses API call continues,
// or answers 404 for an unknown previous response and returns false.
func (s *Server) chain(w http.ResponseWriter, req *simRequest) (int, bool) {
	id := req.PreviousResponseID
	if id == "" {
		return 0, true
	}
	r := s.resp.get(id)
	if r == nil {
		writeParamError(w, http.StatusNotFound, "previous_response_id", "Previous response with id '"+clip(id)+"' not found.")
		return 0, false
	}
	s.resp.mu.Lock()
	defer s.resp.mu.Unlock()
	return r.total, true
}

// clip cuts a client's string quoted back to 64 bytes.
func clip(v string) string {
	if len(v) > 64 {
		return v[:64] + "..."
	}
	return v
}

// reasoningTokens is the X-Sim-Reasoning-Tokens of a request.
func reasoningTokens(r *http.Request) int {
	if v, err := strconv.Atoi(r.Header.Get("X-Sim-Reasoning-Tokens")); err == nil && v > 0 {
		return v
	}
	return 0
}

func (g *gen) responsesUsage() map[string]any {
	reasoning := reasoningTokens(g.r)
	return map[string]any{
		"input_tokens": g.prompt, "input_tokens_details": map[string]any{"cached_tokens": g.cached},
		"output_tokens": g.out + reasoning, "output_tokens_details": map[string]any{"reasoning_tokens": reasoning},
		"total_tokens": g.prompt + g.out + reasoning,
	}
}

// toolCalls returns the output items of the built-in tools the request
// declares: one call each.
func (g *gen) toolCalls() []any {
	var out []any
	for _, t := range g.req.Tools {
		switch {
		case strings.HasPrefix(t.Type, "web_search"):
			out = append(out, map[string]any{"type": "web_search_call", "id": g.id("ws"), "status": "completed",
				"action": map[string]any{"type": "search", "query": "simulated"}})
		case t.Type == "file_search":
			out = append(out, map[string]any{"type": "file_search_call", "id": g.id("fs"), "status": "completed",
				"queries": []any{"simulated"}, "results": nil})
		}
	}
	return out
}

func (g *gen) response(id, msgID, status string, text string, usage any, tools []any) map[string]any {
	output := []any{}
	if status == "completed" || status == "incomplete" {
		output = append(output, tools...)
		output = append(output, map[string]any{
			"type": "message", "id": msgID, "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}},
		})
	}
	var prev any
	if g.req.PreviousResponseID != "" {
		prev = g.req.PreviousResponseID
	}
	return map[string]any{
		"id": id, "object": "response", "created_at": g.s.now().Unix(), "status": status,
		"model": g.req.Model, "output": output, "usage": usage, "parallel_tool_calls": true,
		"tool_choice": "auto", "tools": []any{}, "error": nil, "incomplete_details": nil,
		"instructions": nil, "metadata": map[string]any{}, "temperature": 1.0, "top_p": 1.0,
		"previous_response_id": prev, "background": g.req.Background,
	}
}

// inputItems returns the input of a request as the items input_items
// lists: its objects, at most 100.
func (g *gen) inputItems() []any {
	var in []any
	var text string
	if json.Unmarshal(g.req.Input, &text) == nil {
		in = []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": text}}}}
	} else if json.Unmarshal(g.req.Input, &in) != nil {
		in = nil
	}
	items := []any{}
	for _, it := range in {
		if m, ok := it.(map[string]any); ok && len(items) < 100 {
			m["id"] = g.id("msg")
			if m["type"] == nil {
				m["type"] = "message"
			}
			items = append(items, m)
		}
	}
	return items
}

func (g *gen) responses() {
	id, msgID := g.id("resp"), g.id("msg")
	status := "completed"
	if g.finish == "length" {
		status = "incomplete"
	}
	usage, tools := g.responsesUsage(), g.toolCalls()
	stored := &simResponse{
		final: g.response(id, msgID, status, g.text(), usage, tools), items: g.inputItems(),
		total: g.prompt + g.out + reasoningTokens(g.r), background: g.req.Background && !g.req.Stream, created: g.s.now(),
	}
	g.s.resp.put(id, stored)
	if stored.background {
		writeJSON(g.w, http.StatusOK, g.response(id, msgID, "queued", "", nil, nil))
		return
	}
	if !g.req.Stream {
		if !g.pace(g.out) {
			return
		}
		writeJSON(g.w, http.StatusOK, stored.final)
		return
	}
	sse := g.startSSE()
	seq := 0
	event := func(typ string, v map[string]any) bool {
		v["type"] = typ
		v["sequence_number"] = seq
		seq++
		return sse.event(typ, v)
	}
	if !event("response.created", map[string]any{"response": g.response(id, msgID, "in_progress", "", nil, nil)}) {
		return
	}
	g.deltaEvent = "response.output_text.delta"
	if !g.streamTokens(sse, func(text string) any {
		v := map[string]any{"type": "response.output_text.delta", "item_id": msgID, "output_index": 0, "content_index": 0, "delta": text, "sequence_number": seq}
		seq++
		return v
	}) {
		return
	}
	sse.last()
	// FinishStreams may have ended the output early: the final object
	// reports what was sent.
	event("response."+status, map[string]any{"response": g.response(id, msgID, status, g.text(), g.responsesUsage(), tools)})
}

// object returns r's object as a retrieval sees it now: a background
// response is in progress until Config.BackgroundDelay has passed since
// its creation (or, with no delay, until its first retrieval), then
// complete; a cancelled one is cancelled without usage.
func (s *Server) object(r *simResponse) map[string]any {
	s.resp.mu.Lock()
	defer s.resp.mu.Unlock()
	done := !r.background || (s.cfg.BackgroundDelay == 0 && r.retrieved) ||
		(s.cfg.BackgroundDelay > 0 && !s.now().Before(r.created.Add(s.cfg.BackgroundDelay)))
	r.retrieved = true
	switch {
	case r.cancelled:
		o := with(r.final, "cancelled")
		if r.kept != nil {
			o["output"] = r.kept
		}
		return o
	case done:
		return r.final
	}
	return with(r.final, "in_progress")
}

// with returns a copy of a final response object with another status,
// without output or usage.
func with(final map[string]any, status string) map[string]any {
	o := make(map[string]any, len(final))
	for k, v := range final {
		o[k] = v
	}
	o["status"], o["output"], o["usage"] = status, []any{}, nil
	return o
}

// keptOutput returns the output a response whose final object is final
// keeps when cancelled after the fraction f of its run: its message,
// incomplete, with that part of its text (cut after a word).
func keptOutput(final map[string]any, f float64) []any {
	out, _ := final["output"].([]any)
	for _, it := range out {
		m, _ := it.(map[string]any)
		parts, _ := m["content"].([]any)
		if m["type"] != "message" || len(parts) == 0 {
			continue
		}
		part, _ := parts[0].(map[string]any)
		text, _ := part["text"].(string)
		n := int(float64(len(text)) * min(max(f, 0), 1))
		if i := strings.LastIndexByte(text[:n], ' '); i > 0 {
			n = i
		}
		return []any{map[string]any{
			"type": "message", "id": m["id"], "status": "incomplete", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": text[:n], "annotations": []any{}}},
		}}
	}
	return []any{}
}

// responseObject serves the routes of one response.
func (s *Server) responseObject(w http.ResponseWriter, r *http.Request, path string) {
	s.record(Seen{Path: path, Auth: r.Header.Get("Authorization"), APIKey: r.Header.Get("Api-Key"), Query: r.URL.RawQuery})
	fault, ok := s.wait(r)
	if !ok || s.fault(w, r, fault) {
		return
	}
	rest := path[strings.LastIndex(path, "/responses/")+len("/responses/"):]
	id, sub, _ := strings.Cut(rest, "/")
	resp := s.resp.get(id)
	if resp == nil {
		writeParamError(w, http.StatusNotFound, "", "Response with id '"+clip(id)+"' not found.")
		return
	}
	switch {
	case r.Method == http.MethodGet && sub == "":
		writeJSON(w, http.StatusOK, s.object(resp))
	case r.Method == http.MethodDelete && sub == "":
		s.resp.mu.Lock()
		delete(s.resp.byID, id)
		s.resp.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response.deleted", "deleted": true})
	case r.Method == http.MethodGet && sub == "input_items":
		s.resp.mu.Lock()
		items := resp.items
		s.resp.mu.Unlock()
		list := map[string]any{"object": "list", "data": items, "has_more": false, "first_id": nil, "last_id": nil}
		if len(items) > 0 {
			list["first_id"], list["last_id"] = items[0].(map[string]any)["id"], items[len(items)-1].(map[string]any)["id"]
		}
		writeJSON(w, http.StatusOK, list)
	case r.Method == http.MethodPost && sub == "cancel":
		if !resp.background {
			writeParamError(w, http.StatusBadRequest, "", "Only responses created with background=true can be cancelled.")
			return
		}
		o := s.object(resp)
		if o["status"] == "in_progress" && !s.cfg.CancelBestEffort {
			s.resp.mu.Lock()
			resp.cancelled = true
			if s.cfg.CancelKeepsOutput && s.cfg.BackgroundDelay > 0 {
				resp.kept = keptOutput(resp.final, float64(s.now().Sub(resp.created))/float64(s.cfg.BackgroundDelay))
			}
			s.resp.mu.Unlock()
			o = s.object(resp)
		} else if o["status"] == "in_progress" {
			o = with(resp.final, "cancelled")
		}
		writeJSON(w, http.StatusOK, o)
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "Unknown request URL: "+r.Method+" "+r.URL.Path)
	}
}

// writeParamError answers an invalid_request_error naming param (none
// when empty), with no code, as OpenAI answers an unknown response.
func writeParamError(w http.ResponseWriter, status int, param, msg string) {
	var p any
	if param != "" {
		p = param
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": p, "code": nil}})
}
