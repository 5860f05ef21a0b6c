package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/internal/bodywatch"
	"github.com/sluicehq/sluice/weights"
)

// OpFiles is the route of a file upload, POST /v1/files: a batch input
// file (purpose batch), counted line by line as it streams upstream.
const OpFiles = "/v1/files"

// The routes of one file, GET /v1/files/{id} and its content, GET
// /v1/files/{id}/content: served for the files a tenant may read (see
// batches.ownsFile), any other is a 404.
const (
	OpFile        = "/v1/files/:id"
	OpFileContent = "/v1/files/:id/content"
)

var (
	filesRoute       = route{OpFiles, "POST " + OpFiles, "/files", 0, nil}
	fileRoute        = route{OpFile, "GET " + OpFiles + "/{id}", "/files/", 0, nil}
	fileContentRoute = route{OpFileContent, "GET " + OpFiles + "/{id}/content", "/files/", 0, nil}
)

// maxFormField bounds a form field of an upload other than its file.
const maxFormField = 256

// multipartSlack is what an upload may carry besides its file: the
// multipart framing and the small fields.
const multipartSlack = 64 << 10

// ValidObjectID reports whether id, an object id a client or the
// upstream sent (a file's "file-abc123", a batch's "batch_abc123"), may
// go into an upstream path or a log: 1 to 128 ASCII letters, digits, '-'
// and '_'. Nothing that could change the meaning of a path (a separator,
// a dot, '%', a control character) is in the set.
func ValidObjectID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '-', b == '_':
		default:
			return false
		}
	}
	return true
}

// handleFileUpload serves POST /v1/files: identity, the policies that
// match the upload (limited by requests), then the multipart body
// streamed upstream part by part, the file's lines counted as they pass
// (lineCounter). A file the counter refuses is cut before its end, so the
// upstream never stores it, and answered 400 (413 over the size cap).
// An upload the upstream accepts leaves its summary (fileSummary) for
// the batches created from it.
func (g *Gateway) handleFileUpload(c echo.Context, rt route) error {
	b := g.batches
	st, req, ok := g.batchCaller(c, b.cfg.MaxFileBytes+multipartSlack)
	if !ok {
		return nil
	}
	r := c.Request()
	ctx := r.Context()
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "multipart/form-data" || params["boundary"] == "" {
		g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_body", "", "A file upload is a multipart/form-data body with a purpose and a file.")
		return nil
	}
	_, finish, ok := g.admitRequest(c, st, req)
	if !ok {
		return nil
	}
	defer finish()
	end, refused := b.startUpload(req.Tenant)
	switch refused {
	case http.StatusTooManyRequests:
		c.Response().Header().Set("Retry-After", "1")
		g.batchError(c, refused, "requests", "too_many_uploads", "",
			"Your account has "+strconv.Itoa(b.cfg.MaxUploadsPerTenant)+" uploads in progress, as many as it may. Please retry once one has ended.")
		return nil
	case http.StatusServiceUnavailable:
		c.Response().Header().Set("Retry-After", "1")
		g.batchError(c, refused, "server_error", "server_busy", "", "The gateway is counting too many uploads at once. Please retry.")
		return nil
	}
	defer end()
	if !b.roomForFile(req.Tenant) {
		c.Response().Header().Set("Retry-After", "60")
		g.batchError(c, http.StatusServiceUnavailable, "server_error", "server_busy", "", "The gateway holds as many batch input files as it can. Please retry later.")
		return nil
	}
	lc := newLineCounter(g.est, int(b.cfg.MaxLineBytes), b.cfg.MaxLines, b.cfg.MaxFileBytes, g.cfg.MaxOutputReserve)
	lc.defaults = func(e *weights.Estimate) { g.defaultOutput(st, e) }
	lc.chain = func(rr responsesRequest) (int64, error) {
		// The tenant's records on Config.Upstream, where its batches run.
		return g.responses.chainTokens(ctx, req.Tenant, rr)
	}
	lc.refs = func(e *weights.Estimate) error { return g.checkRefs(req.Tenant, true, e) }
	body := http.MaxBytesReader(c.Response(), b.paced(c), b.cfg.MaxFileBytes+multipartSlack)
	pr, pw := io.Pipe()
	out := multipart.NewWriter(pw)
	uctx, ucancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer ucancel()
	type answer struct {
		resp *http.Response
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := g.batchCall(uctx, st, r, http.MethodPost, "/files", pr, out.FormDataContentType(), -1)
		// An upstream that answered early reads no more: the copy stops.
		pr.CloseWithError(errUpstreamAnswered)
		done <- answer{resp, err}
	}()
	perr := copyUpload(multipart.NewReader(body, params["boundary"]), out, lc)
	if perr == nil {
		perr = out.Close()
	}
	if perr != nil {
		pw.CloseWithError(perr)
		ucancel()
	} else {
		pw.Close()
	}
	a := <-done
	if a.resp != nil {
		defer a.resp.Body.Close()
	}
	var le *lineError
	var mbe *http.MaxBytesError
	switch {
	case perr == nil:
	case errors.Is(perr, errUpstreamAnswered), errors.Is(perr, io.ErrClosedPipe):
		// (The transport closes the body of a call that failed.)
		// The upstream answered before the whole file was sent: its
		// refusal is passed on; an acceptance of part of a file is not.
		if a.err == nil && a.resp.StatusCode == http.StatusOK {
			g.m.count(ctx, g.m.upstreamFailures, "bad_response")
			g.batchError(c, http.StatusBadGateway, "server_error", "bad_upstream_response", "", "The upstream API accepted the upload before it was complete.")
			return nil
		}
	case errors.Is(perr, errFileTooLarge) || errors.As(perr, &mbe):
		g.tooLarge(c, b.cfg.MaxFileBytes)
		return nil
	case errors.As(perr, &le):
		g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_batch_file", "file", "The batch input file was refused: "+le.Error()+".")
		return nil
	case errors.Is(perr, errUploadForm):
		g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_body", "", "A file upload has a purpose field of \"batch\" and one file, and nothing else.")
		return nil
	case ctx.Err() != nil:
		c.Response().Status = 499
		return nil
	default:
		g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_body", "", "The multipart body could not be read.")
		return nil
	}
	if a.err != nil {
		g.upstreamFailed(c, ctx, a.err)
		return nil
	}
	g.m.upstreamStatus(ctx, a.resp.StatusCode)
	data, err := readLimited(a.resp.Body, maxBatchObject)
	if err != nil {
		g.upstreamFailed(c, ctx, err)
		return nil
	}
	if a.resp.StatusCode != http.StatusOK {
		g.upstreamError(c, a.resp, data)
		return nil
	}
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(data, &obj) != nil || !ValidObjectID(obj.ID) {
		g.m.count(ctx, g.m.upstreamFailures, "bad_response")
		g.batchError(c, http.StatusBadGateway, "server_error", "bad_upstream_response", "", "The upstream API answered the upload without a valid file id.")
		return nil
	}
	sum := lc.sum
	sum.tenant, sum.bytes = req.Tenant, lc.total
	b.addFile(obj.ID, &sum)
	g.writeUpstream(c, a.resp, data)
	return nil
}

// paced returns the request body held to the minimum upload rate: the
// connection's read deadline is UploadGrace from now, and moves to
// UploadGrace from the moment each further MinUploadRate × UploadGrace
// bytes have arrived, so a span that brings less cuts the upload (the
// read fails, and the client gets 408). The deadline is left alone once
// the body has ended, where WatchBody (the deadlines middleware) lifts it.
func (b *batches) paced(c echo.Context) io.ReadCloser {
	r := c.Request()
	rc := http.NewResponseController(c.Response().Writer)
	p := &pacedBody{ReadCloser: r.Body, rc: rc, grace: b.cfg.UploadGrace,
		need: max(int64(min(float64(b.cfg.MinUploadRate)*b.cfg.UploadGrace.Seconds(), float64(b.cfg.MaxFileBytes))), 1)}
	if wb, ok := r.Body.(*bodywatch.Body); ok {
		p.done = wb.Complete
	}
	_ = rc.SetReadDeadline(time.Now().Add(p.grace))
	return p
}

// pacedBody is a body held to a minimum rate (see batches.paced).
type pacedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	grace time.Duration
	need  int64       // bytes each span must bring
	got   int64       // bytes of the current span
	done  func() bool // whether the body has ended; nil: only at io.EOF
}

// Read implements io.Reader.
func (p *pacedBody) Read(b []byte) (int, error) {
	n, err := p.ReadCloser.Read(b)
	if p.got += int64(n); p.got >= p.need && err == nil && (p.done == nil || !p.done()) {
		p.got = 0
		_ = p.rc.SetReadDeadline(time.Now().Add(p.grace))
	}
	return n, err
}

// errUpstreamAnswered stops the copy of an upload the upstream answered
// before its end.
var errUpstreamAnswered = errors.New("gateway: the upstream answered the upload")

// errUploadForm is an upload whose form is not a purpose of batch and
// one file.
var errUploadForm = errors.New("gateway: not a batch file upload")

// copyUpload copies the parts of an upload to out: the purpose field,
// which must say batch, one file, whose bytes also go through lc, and
// the file's expiry (expires_after[anchor], expires_after[seconds]); any
// other field, a second purpose or a second file is refused
// (errUploadForm). It
// returns lc's problem, if any, once the file has ended.
func copyUpload(in *multipart.Reader, out *multipart.Writer, lc *lineCounter) error {
	var purpose, file bool
	for {
		p, err := in.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		switch p.FormName() {
		case "purpose":
			v, err := io.ReadAll(io.LimitReader(p, maxFormField))
			if err != nil {
				return err
			}
			if purpose || string(v) != "batch" {
				return errUploadForm
			}
			purpose = true
			if err := out.WriteField("purpose", "batch"); err != nil {
				return err
			}
		case "file":
			if file {
				return errUploadForm
			}
			file = true
			name := p.FileName()
			if !ValidFileName(name) {
				name = "batch.jsonl"
			}
			w, err := out.CreateFormFile("file", name)
			if err != nil {
				return err
			}
			if _, err := io.Copy(io.MultiWriter(lc, w), p); err != nil {
				if lc.err != nil {
					return lc.err
				}
				return err
			}
			if err := lc.Close(); err != nil {
				return err
			}
		case "expires_after[anchor]", "expires_after[seconds]":
			// The file's expiry, passed through: a short value of
			// letters, digits, '-' and '_'.
			v, err := io.ReadAll(io.LimitReader(p, maxFormField+1))
			if err != nil {
				return err
			}
			if len(v) > maxFormField || !ValidObjectID(string(v)) {
				return errUploadForm
			}
			if err := out.WriteField(p.FormName(), string(v)); err != nil {
				return err
			}
		default:
			return errUploadForm
		}
	}
	if !purpose || !file {
		return errUploadForm
	}
	return nil
}

// ValidFileName reports whether an uploaded file's name is passed
// upstream as sent: 1 to 128 ASCII letters, digits, '-', '_' and '.';
// any other name goes up as batch.jsonl.
func ValidFileName(name string) bool { return config.ValidPathSegment(name, 128) }

// batchCall sends a Batch API (or Responses API object) request to
// Config.Upstream + path, a path the caller built from constants and ids
// that passed ValidObjectID, and after a '?' a query it built from
// checked values, with
// the forwardable headers of r (nil for the gateway's own polls; st is
// the state that decided r) and the upstream key; a path under
// /messages/ (the Message Batches API) goes to Config.Anthropic's
// upstream with its key and version instead, one under /openai/ (Azure
// OpenAI's responses) to Config.Azure's with its api-key. n is the
// body's length, -1 when unknown.
func (g *Gateway) batchCall(ctx context.Context, st *state, r *http.Request, method, path string, body io.Reader, contentType string, n int64) (*http.Response, error) {
	base, messages, azure := g.base, strings.HasPrefix(path, "/messages/"), strings.HasPrefix(path, "/openai/")
	switch {
	case messages:
		base = g.anthropic
	case azure:
		base = g.azure
	}
	if base == nil {
		return nil, errNotForwarded
	}
	u := *base
	path, query, _ := strings.Cut(path, "?") // a query the caller built and checked
	u.Path = base.Path + path
	u.RawPath, u.RawQuery = "", base.RawQuery
	if query != "" {
		u.RawQuery = strings.TrimPrefix(u.RawQuery+"&"+query, "&")
	}
	if body == nil {
		body = http.NoBody
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	if r != nil {
		g.copyRequestHeaders(st, req.Header, r.Header)
	}
	req.Header.Del("Content-Type")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if messages {
		var src http.Header
		if r != nil {
			src = r.Header
		}
		g.setAnthropicUpstream(req.Header, src)
	} else if azure {
		g.setAzureKey(req.Header)
	} else {
		g.setUpstreamKey(req.Header)
	}
	req.ContentLength = n
	return g.opt.transport.RoundTrip(req)
}

// batchError answers an error of the Batch API routes in the OpenAI
// shape, counted as a client error when it is one.
func (g *Gateway) batchError(c echo.Context, status int, typ, code, param, msg string) {
	if status < 500 {
		g.m.count(c.Request().Context(), g.m.clientErrors, code)
	}
	writeError(c.Response(), status, typ, code, param, msg)
}

// streamUpstream answers with an upstream response's status, headers
// and body, the body copied as it comes. It returns the bytes of the
// body passed on, and an error unless the whole of it was.
func streamUpstream(c echo.Context, resp *http.Response) (int64, error) {
	h := c.Response().Header()
	for k, vs := range resp.Header {
		if !dropResponseHeader(k) {
			h[k] = vs
		}
	}
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	c.Response().WriteHeader(resp.StatusCode)
	return io.Copy(c.Response(), resp.Body)
}
