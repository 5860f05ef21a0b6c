package upstream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OpenAI's Batch API, simulated: POST /v1/files (multipart/form-data
// with purpose and file), GET /v1/files/{id} and /v1/files/{id}/content,
// POST /v1/batches, GET /v1/batches/{id} and POST
// /v1/batches/{id}/cancel, with OpenAI's objects and error shape.
//
// A batch is validating when created, in_progress once it is retrieved
// after that, and ends Config.BatchDelay after its creation (a
// cancelled one Config.BatchDelay after its cancellation, cancelling
// until then), on the clock of WithClock. Its metadata picks the ending,
// for tests:
//
//	sim_outcome: completed     the default; also failed, expired, cancelled
//	sim_completed: 2           requests done when it expires or is cancelled (default 0)
//	sim_input_tokens: 1200     the usage reported at the end, instead of the
//	sim_output_tokens: 300     one counted from the input file's lines (as
//	sim_cached_tokens: 100     the chat route counts a prompt)
//	sim_id: batch_x            the id the batch is given (a hostile upstream)
//	sim_hang: 1                no answer to the creation (until the caller gives up)
//
// A completed, expired or cancelled batch reports its usage in the batch
// object's usage field (input_tokens, input_tokens_details.cached_tokens,
// output_tokens, output_tokens_details.reasoning_tokens, total_tokens),
// of the requests it completed, and an output file of their responses; a
// failed one reports errors and no usage.

// MaxSimFileBytes bounds a file uploaded to the simulator.
const MaxSimFileBytes = 64 << 20

// batchStore holds the simulator's files and batches.
type batchStore struct {
	mu      sync.Mutex
	files   map[string]*simFile
	batches map[string]*simBatch
	// The Message Batches API's: by id, and their ids, oldest first.
	msgBatches map[string]*simMessageBatch
	order      []string
}

type simFile struct {
	id, purpose, filename string
	data                  []byte
	created               int64
}

type simBatch struct {
	id, endpoint, inputFile, window string
	metadata                        map[string]string
	created, cancelAt               time.Time // cancelAt is zero unless cancelled
	lines                           []simLine
	outcome                         string
	completed                       int // requests done on expiry or cancellation (sim_completed)
	usage                           *[3]int64
	outputFile                      string
	retrieved                       bool
}

// simLine is one request of an input file.
type simLine struct {
	customID      string
	prompt, out   int
	model, reqURL string
}

// isBatchAPI reports whether a request is for the files or batches API.
func isBatchAPI(path string) bool {
	return strings.Contains(path, "/files") || strings.Contains(path, "/batches")
}

func (s *Server) now() time.Time { return s.clock.Now() }

// batchAPI serves the files and batches routes.
func (s *Server) batchAPI(w http.ResponseWriter, r *http.Request, path string) {
	s.record(Seen{Path: path, Auth: r.Header.Get("Authorization")})
	st := &s.batch
	st.mu.Lock()
	if st.files == nil {
		st.files, st.batches = map[string]*simFile{}, map[string]*simBatch{}
	}
	st.mu.Unlock()
	_, rest, _ := strings.Cut(path, "/files")
	isFiles := strings.HasSuffix(path, "/files") || strings.Contains(path, "/files/")
	switch {
	case isFiles && r.Method == http.MethodPost && rest == "":
		s.uploadFile(w, r)
	case isFiles && r.Method == http.MethodGet && strings.HasSuffix(rest, "/content"):
		s.fileContent(w, strings.TrimSuffix(strings.TrimPrefix(rest, "/"), "/content"))
	case isFiles && r.Method == http.MethodGet && rest != "":
		st.mu.Lock()
		f := st.files[strings.TrimPrefix(rest, "/")]
		st.mu.Unlock()
		if f == nil {
			writeError(w, http.StatusNotFound, "invalid_request_error", "", "No such File object: "+strings.TrimPrefix(rest, "/"))
			return
		}
		writeJSON(w, http.StatusOK, f.object())
	case strings.HasSuffix(path, "/batches") && r.Method == http.MethodPost:
		s.createBatch(w, r)
	default:
		_, id, _ := strings.Cut(path, "/batches/")
		id, cancel := strings.CutSuffix(id, "/cancel")
		if id == "" || (cancel != (r.Method == http.MethodPost)) || (!cancel && r.Method != http.MethodGet) {
			writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "Unknown request URL: "+r.Method+" "+r.URL.Path)
			return
		}
		now := s.now()
		st.mu.Lock()
		b := st.batches[id]
		if b != nil {
			if st := b.status(now, s.cfg.BatchDelay); cancel && (st == "validating" || st == "in_progress") {
				b.cancelAt = now
			}
			b.retrieved = true
		}
		var obj map[string]any
		if b != nil {
			obj = s.batchObject(b, now)
		}
		st.mu.Unlock()
		if b == nil {
			writeError(w, http.StatusNotFound, "invalid_request_error", "", "No batch found with id '"+id+"'.")
			return
		}
		writeJSON(w, http.StatusOK, obj)
	}
}

func (f *simFile) object() map[string]any {
	return map[string]any{"id": f.id, "object": "file", "bytes": len(f.data), "created_at": f.created,
		"filename": f.filename, "purpose": f.purpose, "status": "processed"}
}

// uploadFile stores a multipart upload: its purpose field and its file.
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "The body must be multipart/form-data.")
		return
	}
	f := &simFile{created: s.now().Unix()}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", "The multipart body could not be read.")
			return
		}
		b, err := io.ReadAll(io.LimitReader(p, MaxSimFileBytes+1))
		if err != nil || len(b) > MaxSimFileBytes {
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "", "The file is too large.")
			return
		}
		switch p.FormName() {
		case "purpose":
			f.purpose = string(b)
		case "file":
			f.filename, f.data = p.FileName(), b
		}
	}
	if f.purpose == "" || f.data == nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "A file upload needs a purpose and a file.")
		return
	}
	f.id = fmt.Sprintf("file-sim%d", s.seq.Add(1))
	s.batch.mu.Lock()
	s.batch.files[f.id] = f
	s.batch.mu.Unlock()
	writeJSON(w, http.StatusOK, f.object())
}

func (s *Server) fileContent(w http.ResponseWriter, id string) {
	s.batch.mu.Lock()
	f := s.batch.files[id]
	s.batch.mu.Unlock()
	if f == nil {
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "No such File object: "+id)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
	_, _ = w.Write(f.data)
}

// createBatch creates a batch of an uploaded file's requests.
func (s *Server) createBatch(w http.ResponseWriter, r *http.Request) {
	var req struct {
		InputFileID      string            `json:"input_file_id"`
		Endpoint         string            `json:"endpoint"`
		CompletionWindow string            `json:"completion_window"`
		Metadata         map[string]string `json:"metadata"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "We could not parse the JSON body of your request.")
		return
	}
	switch req.Endpoint {
	case "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses":
	default:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "Invalid endpoint.")
		return
	}
	if req.CompletionWindow != "24h" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "completion_window must be 24h.")
		return
	}
	s.batch.mu.Lock()
	f := s.batch.files[req.InputFileID]
	s.batch.mu.Unlock()
	if f == nil || f.purpose != "batch" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "No batch input file with id "+req.InputFileID+".")
		return
	}
	lines, err := s.simLines(f.data)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
		return
	}
	md := req.Metadata
	if md["sim_hang"] != "" {
		<-r.Context().Done() // never answers, and creates nothing
		return
	}
	b := &simBatch{
		id: fmt.Sprintf("batch_sim%d", s.seq.Add(1)), endpoint: req.Endpoint, inputFile: f.id, window: req.CompletionWindow,
		metadata: md, created: s.now(), lines: lines, outcome: "completed",
	}
	if v := md["sim_id"]; v != "" {
		b.id = v
	}
	switch v := md["sim_outcome"]; v {
	case "", "completed":
	case "failed", "expired", "cancelled":
		b.outcome = v
	default:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "Unknown sim_outcome.")
		return
	}
	b.completed, _ = strconv.Atoi(md["sim_completed"])
	b.completed = min(max(b.completed, 0), len(lines))
	if in, err := strconv.ParseInt(md["sim_input_tokens"], 10, 64); err == nil {
		out, _ := strconv.ParseInt(md["sim_output_tokens"], 10, 64)
		cached, _ := strconv.ParseInt(md["sim_cached_tokens"], 10, 64)
		b.usage = &[3]int64{in, out, cached}
	}
	now := s.now()
	s.batch.mu.Lock()
	s.batch.batches[b.id] = b
	obj := s.batchObject(b, now)
	s.batch.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

// simLines reads the requests of an input file, one JSON object a line.
func (s *Server) simLines(data []byte) ([]simLine, error) {
	var lines []simLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, MaxSimFileBytes)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var l struct {
			CustomID string     `json:"custom_id"`
			Method   string     `json:"method"`
			URL      string     `json:"url"`
			Body     simRequest `json:"body"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("line %d is not a JSON request", n)
		}
		out := s.cfg.OutputTokens
		if lim, ok := l.Body.outputLimit(); ok && lim < out {
			out = max(lim, 0)
		}
		lines = append(lines, simLine{customID: l.CustomID, prompt: chatPromptTokens(&l.Body), out: out, model: l.Body.Model, reqURL: l.URL})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("the input file has no requests")
	}
	return lines, nil
}

// status is b's status at now, d being Config.BatchDelay.
func (b *simBatch) status(now time.Time, d time.Duration) string {
	switch {
	case !b.cancelAt.IsZero() && now.Sub(b.cancelAt) >= d:
		return "cancelled"
	case !b.cancelAt.IsZero():
		return "cancelling"
	case !b.retrieved:
		return "validating"
	case now.Sub(b.created) < d:
		return "in_progress"
	}
	// A sim_outcome of cancelled is a batch cancelled upstream, not
	// through the API (from the provider's console, say).
	return b.outcome
}

// batchObject is b as the API returns it at now; the store's lock is
// held.
func (s *Server) batchObject(b *simBatch, now time.Time) map[string]any {
	st := b.status(now, s.cfg.BatchDelay)
	done := 0
	switch st {
	case "completed":
		done = len(b.lines)
	case "expired", "cancelled":
		done = b.completed
	}
	failed := 0
	if st == "failed" {
		failed = len(b.lines)
	}
	o := map[string]any{
		"id": b.id, "object": "batch", "endpoint": b.endpoint, "errors": nil, "input_file_id": b.inputFile,
		"completion_window": b.window, "status": st, "output_file_id": nil, "error_file_id": nil,
		"created_at": b.created.Unix(), "expires_at": b.created.Add(24 * time.Hour).Unix(),
		"request_counts": map[string]int{"total": len(b.lines), "completed": done, "failed": failed},
		"metadata":       b.metadata,
	}
	switch st {
	case "failed":
		o["errors"] = map[string]any{"object": "list", "data": []any{map[string]any{"code": "invalid_request", "message": "The batch failed validation.", "line": 1}}}
		o["failed_at"] = now.Unix()
		return o
	case "completed", "expired", "cancelled":
		o[st+"_at"] = now.Unix()
	default:
		return o
	}
	var in, out, cached int64
	for _, l := range b.lines[:done] {
		in, out = in+int64(l.prompt), out+int64(l.out)
	}
	if b.usage != nil {
		in, out, cached = b.usage[0], b.usage[1], b.usage[2]
	}
	o["usage"] = map[string]any{
		"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": cached},
		"output_tokens": out, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": in + out,
	}
	if b.outputFile == "" && done > 0 {
		var buf bytes.Buffer
		for i, l := range b.lines[:done] {
			line, _ := json.Marshal(map[string]any{
				"id": fmt.Sprintf("batch_req_sim%d", i), "custom_id": l.customID,
				"response": map[string]any{"status_code": 200, "body": map[string]any{
					"object": "chat.completion", "model": l.model,
					"usage": map[string]int{"prompt_tokens": l.prompt, "completion_tokens": l.out, "total_tokens": l.prompt + l.out},
				}},
			})
			buf.Write(append(line, '\n'))
		}
		f := &simFile{id: fmt.Sprintf("file-sim%d", s.seq.Add(1)), purpose: "batch_output", filename: "output.jsonl", data: buf.Bytes(), created: now.Unix()}
		s.batch.files[f.id] = f
		b.outputFile = f.id
	}
	if b.outputFile != "" {
		o["output_file_id"] = b.outputFile
	}
	return o
}

// Files returns the number of files the simulator stores, of every
// purpose.
func (s *Server) Files() int {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return len(s.batch.files)
}
