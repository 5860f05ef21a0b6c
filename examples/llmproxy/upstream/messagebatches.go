package upstream

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Anthropic's Message Batches API, simulated: POST /v1/messages/batches
// (a JSON body of requests, each a custom_id and the params of a Messages
// API call), GET /v1/messages/batches (a page of batch objects), GET and
// DELETE /v1/messages/batches/{id}, POST /v1/messages/batches/{id}/cancel
// and GET /v1/messages/batches/{id}/results (JSON Lines), with
// Anthropic's objects and error shape.
//
// A batch is in_progress until Config.BatchDelay after its creation,
// then ended, every request succeeded; one cancelled before is canceling
// until Config.BatchDelay after the cancellation, then ended with every
// request canceled. Each succeeded request's message is priced as the
// Messages API prices it: its prompt as input_tokens (the cached prefix
// as cache_creation_input_tokens, split by time to live in
// cache_creation), and the smaller of its max_tokens and
// Config.OutputTokens as output_tokens. A request whose params set
// metadata.user_id "sim_errored" is errored instead.

// simMessageBatch is one message batch of the simulator.
type simMessageBatch struct {
	id                 string
	created, cancelAt  time.Time // cancelAt is zero unless cancelled
	requests           []simMessageRequest
	deleted            bool
	resultsURLTemplate string
}

// simMessageRequest is one request of a message batch.
type simMessageRequest struct {
	customID, model, stop string
	prompt                messagesPrompt
	out                   int
	errored               bool
}

// isMessageBatches reports whether a request is for the Message Batches
// API.
func isMessageBatches(path string) bool {
	return strings.HasSuffix(path, "/messages/batches") || strings.Contains(path, "/messages/batches/")
}

// ended reports whether b has ended at now, and whether it was
// cancelled.
func (b *simMessageBatch) ended(now time.Time, delay time.Duration) (ended, cancelled bool) {
	if !b.cancelAt.IsZero() {
		return !now.Before(b.cancelAt.Add(delay)), true
	}
	return !now.Before(b.created.Add(delay)), false
}

// object returns b's batch object at now.
func (b *simMessageBatch) object(now time.Time, delay time.Duration) map[string]any {
	ended, cancelled := b.ended(now, delay)
	counts := map[string]int{"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
	status := "in_progress"
	switch {
	case ended:
		status = "ended"
		for _, r := range b.requests {
			switch {
			case cancelled:
				counts["canceled"]++
			case r.errored:
				counts["errored"]++
			default:
				counts["succeeded"]++
			}
		}
	case cancelled:
		status = "canceling"
		counts["processing"] = len(b.requests)
	default:
		counts["processing"] = len(b.requests)
	}
	stamp := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t.UTC().Format(time.RFC3339)
	}
	obj := map[string]any{
		"id": b.id, "type": "message_batch", "processing_status": status, "request_counts": counts,
		"created_at": stamp(b.created), "expires_at": stamp(b.created.Add(24 * time.Hour)),
		"cancel_initiated_at": stamp(b.cancelAt), "archived_at": nil, "ended_at": nil, "results_url": nil,
	}
	if ended {
		end := b.created.Add(delay)
		if cancelled {
			end = b.cancelAt.Add(delay)
		}
		obj["ended_at"], obj["results_url"] = stamp(end), fmt.Sprintf(b.resultsURLTemplate, b.id)
	}
	return obj
}

// messageBatches serves the Message Batches routes.
func (s *Server) messageBatches(w http.ResponseWriter, r *http.Request, path string) {
	w.Header().Set("Request-Id", fmt.Sprintf("req_sim_%024d", s.requests.Load()))
	s.record(Seen{Path: path, Auth: r.Header.Get("Authorization"), APIKey: r.Header.Get("X-Api-Key")})
	st := &s.batch
	_, rest, _ := strings.Cut(path, "/messages/batches")
	rest = strings.TrimPrefix(rest, "/")
	id, sub, _ := strings.Cut(rest, "/")
	switch {
	case rest == "" && r.Method == http.MethodPost:
		s.createMessageBatch(w, r, path)
		return
	case rest == "" && r.Method == http.MethodGet:
		s.listMessageBatches(w, r)
		return
	}
	now := s.now()
	st.mu.Lock()
	b := st.msgBatches[id]
	if b != nil && b.deleted {
		b = nil
	}
	var (
		obj     map[string]any
		results []simMessageRequest
		ended   bool
		cancel  bool
	)
	if b != nil {
		ended, cancel = b.ended(now, s.cfg.BatchDelay)
		switch {
		case sub == "cancel" && r.Method == http.MethodPost:
			if !ended && b.cancelAt.IsZero() {
				b.cancelAt = now
				cancel = true
			}
		case sub == "" && r.Method == http.MethodDelete:
			if ended {
				b.deleted = true
			}
		case sub == "results" && r.Method == http.MethodGet:
			results = slices.Clone(b.requests)
		case sub == "" && r.Method == http.MethodGet:
		default:
			b = nil
		}
		if b != nil {
			obj = b.object(now, s.cfg.BatchDelay)
		}
	}
	st.mu.Unlock()
	switch {
	case b == nil:
		anthropicError(w, http.StatusNotFound, "not_found_error", "No message batch found with id '"+id+"'.")
	case sub == "" && r.Method == http.MethodDelete && !ended:
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "Message batch "+id+" is still in progress: cancel it first.")
	case sub == "" && r.Method == http.MethodDelete:
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "type": "message_batch_deleted"})
	case sub == "results" && !ended:
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "Message batch "+id+" has not ended: its results are not available yet.")
	case sub == "results":
		s.writeMessageBatchResults(w, results, cancel)
	default:
		writeJSON(w, http.StatusOK, obj)
	}
}

// createMessageBatch creates a message batch of the body's requests.
func (s *Server) createMessageBatch(w http.ResponseWriter, r *http.Request, path string) {
	var body struct {
		Requests []struct {
			CustomID string          `json:"custom_id"`
			Params   messagesRequest `json:"params"`
		} `json:"requests"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxSimFileBytes))
	if err := dec.Decode(&body); err != nil {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "The request body is not valid JSON.")
		return
	}
	if len(body.Requests) == 0 {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "requests: List should have at least 1 item")
		return
	}
	b := &simMessageBatch{id: fmt.Sprintf("msgbatch_sim%d", s.seq.Add(1)), created: s.now()}
	b.resultsURLTemplate = "http://" + r.Host + strings.TrimSuffix(path, "/messages/batches") + "/messages/batches/%s/results"
	for _, q := range body.Requests {
		p := q.Params
		if !s.knows(p.Model) && !slices.Contains(ClaudeModels, p.Model) {
			anthropicError(w, http.StatusBadRequest, "invalid_request_error", "requests."+q.CustomID+".params.model: "+p.Model+" is not a model")
			return
		}
		if p.MaxTokens == nil {
			anthropicError(w, http.StatusBadRequest, "invalid_request_error", "requests."+q.CustomID+".params.max_tokens: Field required")
			return
		}
		prompt := p.price()
		out, stop := s.outputTokens(r), "end_turn"
		if *p.MaxTokens < out {
			out, stop = max(*p.MaxTokens, 0), "max_tokens"
		}
		b.requests = append(b.requests, simMessageRequest{
			customID: q.CustomID, model: p.Model, prompt: prompt, out: out, stop: stop,
			errored: p.Metadata.UserID == "sim_errored",
		})
	}
	now := s.now()
	s.batch.mu.Lock()
	if s.batch.msgBatches == nil {
		s.batch.msgBatches = map[string]*simMessageBatch{}
	}
	s.batch.msgBatches[b.id] = b
	s.batch.order = append(s.batch.order, b.id)
	obj := b.object(now, s.cfg.BatchDelay)
	s.batch.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

// listMessageBatches answers a page of the batches, newest first, after
// the query's after_id (or before its before_id), of at most its limit
// (20 by default).
func (s *Server) listMessageBatches(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			anthropicError(w, http.StatusBadRequest, "invalid_request_error", "limit: must be 1 to 1000")
			return
		}
		limit = n
	}
	now := s.now()
	s.batch.mu.Lock()
	var ids []string
	for _, id := range slices.Backward(s.batch.order) {
		if b := s.batch.msgBatches[id]; b != nil && !b.deleted {
			ids = append(ids, id)
		}
	}
	if after := q.Get("after_id"); after != "" {
		if i := slices.Index(ids, after); i >= 0 {
			ids = ids[i+1:]
		}
	} else if before := q.Get("before_id"); before != "" {
		if i := slices.Index(ids, before); i >= 0 {
			ids = ids[:i]
		}
	}
	more := len(ids) > limit
	ids = ids[:min(len(ids), limit)]
	data := make([]any, 0, len(ids))
	for _, id := range ids {
		data = append(data, s.batch.msgBatches[id].object(now, s.cfg.BatchDelay))
	}
	s.batch.mu.Unlock()
	page := map[string]any{"data": data, "has_more": more, "first_id": nil, "last_id": nil}
	if len(ids) > 0 {
		page["first_id"], page["last_id"] = ids[0], ids[len(ids)-1]
	}
	writeJSON(w, http.StatusOK, page)
}

// writeMessageBatchResults answers the results of a batch's requests as
// JSON Lines.
func (s *Server) writeMessageBatchResults(w http.ResponseWriter, reqs []simMessageRequest, cancelled bool) {
	w.Header().Set("Content-Type", "application/x-jsonl")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	for i, q := range reqs {
		var result map[string]any
		switch {
		case cancelled:
			result = map[string]any{"type": "canceled"}
		case q.errored:
			result = map[string]any{"type": "errored", "error": map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": "simulated error"}}}
		default:
			usage := q.prompt.usage(false)
			usage["output_tokens"] = q.out
			result = map[string]any{"type": "succeeded", "message": map[string]any{
				"id": fmt.Sprintf("msg_simbatch%d", i), "type": "message", "role": "assistant", "model": q.model,
				"content":     []any{map[string]any{"type": "text", "text": strings.Repeat("tok ", q.out)}},
				"stop_reason": q.stop, "stop_sequence": nil,
				"usage": usage,
			}}
		}
		line, _ := json.Marshal(map[string]any{"custom_id": q.customID, "result": result})
		_, _ = bw.Write(append(line, '\n'))
	}
	_ = bw.Flush()
}
