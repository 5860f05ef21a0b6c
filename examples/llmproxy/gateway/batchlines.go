package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/sluicehq/sluice/internal/jsonscan"
	"github.com/sluicehq/sluice/weights"
)

// fileSummary is what the gateway keeps of a batch input file it counted
// as it was uploaded through it: a fixed handful of figures, never its
// lines.
type fileSummary struct {
	tenant   string
	model    string // the one model of every line
	endpoint string // the one url of every line: "/v1/chat/completions"
	lines    int
	// in and out are the file's prompt tokens and output reservation,
	// summed over its lines, saturating at math.MaxInt64.
	in, out int64
	// bytes is the file's size.
	bytes int64
}

// lineError is a batch input file refused: the line (from 1) and what is
// wrong with it. Its message names no content of the file but the model
// and url a line asked for, bounded.
type lineError struct {
	line int
	msg  string
}

func (e *lineError) Error() string { return "line " + strconv.Itoa(e.line) + ": " + e.msg }

// errFileTooLarge is a file over BatchAPI.MaxFileBytes.
var errFileTooLarge = errors.New("the file is larger than the gateway accepts")

// lineCounter counts the requests of a batch input file (JSON Lines, one
// request a line: custom_id, method, url, body) as its bytes go through
// it, an io.Writer: each line is parsed strictly and its body priced
// exactly as the same body sent to its url would be. It holds one line at
// a time, at most maxLine bytes, and stops at the first problem: a line
// over maxLine, more than maxLines requests, more than maxBytes in all,
// a line that is not a request object, a url the gateway does not price,
// a model or url other than the first line's, a body the estimator
// refuses.
type lineCounter struct {
	est       *weights.Estimator
	maxLine   int
	maxLines  int
	maxBytes  int64
	maxOutput int64 // the output reservation cap of a line; 0 for none
	// defaults, when set, gives a line's estimate the output reservation
	// the same body sent to its url gets (see Gateway.defaultOutput).
	defaults func(*weights.Estimate)
	// chain, when set, returns the size of the chain a /v1/responses
	// line continues (see responses.chainTokens); nil refuses a line
	// that continues a response or names a conversation.
	chain func(responsesRequest) (int64, error)
	// refs, when set, checks the objects stored upstream a line's body
	// names and prices the files among them (see Gateway.checkRefs);
	// nil refuses a line that names any.
	refs func(*weights.Estimate) error

	buf   []byte // the line being read, without its newline
	line  int    // the number of the line being read, from 1
	total int64  // bytes seen
	sum   fileSummary
	err   error
}

func newLineCounter(est *weights.Estimator, maxLine, maxLines int, maxBytes, maxOutput int64) *lineCounter {
	return &lineCounter{est: est, maxLine: maxLine, maxLines: maxLines, maxBytes: maxBytes, maxOutput: maxOutput, line: 1}
}

// Write implements io.Writer: it counts the complete lines of p and keeps
// the rest for the next write. After a problem it returns it, having
// consumed nothing more.
func (lc *lineCounter) Write(p []byte) (int, error) {
	if lc.err != nil {
		return 0, lc.err
	}
	// The bytes past the cap are refused after those before it are
	// counted, so the problem found does not depend on how the file was
	// cut into writes.
	n, over := len(p), false
	if room := lc.maxBytes - lc.total; int64(len(p)) > room {
		p, over = p[:max(room, 0)], true
	}
	lc.total += int64(len(p))
	if err := lc.lines(p); err != nil || over {
		if err == nil {
			lc.err = errFileTooLarge
		}
		return 0, lc.err
	}
	return n, nil
}

// lines counts the complete lines of p, keeping the rest for later.
func (lc *lineCounter) lines(p []byte) error {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		if len(lc.buf)+len(part) > lc.maxLine {
			lc.err = &lineError{lc.line, "the line is longer than " + strconv.Itoa(lc.maxLine) + " bytes"}
			return lc.err
		}
		lc.buf = append(lc.buf, part...)
		if i < 0 {
			break
		}
		if lc.err = lc.count(lc.buf); lc.err != nil {
			return lc.err
		}
		lc.buf, lc.line, p = lc.buf[:0], lc.line+1, p[i+1:]
	}
	return nil
}

// Close counts the last line, when the file does not end with a newline,
// and reports the first problem, or a file without a request.
func (lc *lineCounter) Close() error {
	if lc.err == nil && len(lc.buf) > 0 {
		lc.err = lc.count(lc.buf)
		lc.buf = lc.buf[:0]
	}
	if lc.err == nil && lc.sum.lines == 0 {
		lc.err = &lineError{lc.line, "the file has no request: a batch input file has one JSON request a line"}
	}
	return lc.err
}

// batchLineURLs are the urls a batch line may name, with the endpoint
// its body is priced as: the gateway's token-priced routes.
func batchLineEndpoint(url string) (weights.Endpoint, bool) {
	for _, rt := range llmRoutes {
		if rt.path == url {
			return rt.endpoint, true
		}
	}
	return weights.EndpointUnknown, false
}

// maxCustomID bounds a line's custom_id.
const maxCustomID = 512

// count parses and prices one line.
func (lc *lineCounter) count(line []byte) error {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if len(bytes.TrimSpace(line)) == 0 {
		return nil // a blank line holds no request
	}
	bad := func(format string, args ...any) error { return &lineError{lc.line, fmt.Sprintf(format, args...)} }
	if lc.sum.lines >= lc.maxLines {
		return bad("the file has more than %d requests", lc.maxLines)
	}
	var customID, method, url, body json.RawMessage
	if err := objectFields(line, objField{"custom_id", &customID}, objField{"method", &method}, objField{"url", &url}, objField{"body", &body}); err != nil {
		return bad("not a batch request (a JSON object of custom_id, method, url and body): %v", err)
	}
	id, idOK := jsonText(customID)
	m, mOK := jsonText(method)
	u, uOK := jsonText(url)
	switch {
	case !idOK || id == "" || len(id) > maxCustomID:
		return bad("custom_id must be a string of 1 to %d bytes", maxCustomID)
	case !mOK || m != "POST":
		return bad(`method must be "POST"`)
	case !uOK:
		return bad("url must be a string")
	case len(body) == 0 || body[0] != '{':
		return bad("body must be a JSON object")
	}
	ep, ok := batchLineEndpoint(u)
	if !ok {
		return bad("url %s is not one this gateway prices (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses)", quoteClip(u))
	}
	if lc.sum.lines > 0 && u != lc.sum.endpoint {
		return bad("url %s differs from the first request's %s: a batch calls one endpoint", quoteClip(u), lc.sum.endpoint)
	}
	e, err := lc.est.EstimateEndpoint(ep, body)
	if err != nil {
		var mal *weights.MalformedError
		if errors.As(err, &mal) {
			return bad("body: %v", mal)
		}
		return bad("the body could not be priced")
	}
	switch {
	case e.Model == "" || !ValidModelName(e.Model):
		return bad("body.model must name a model (at most %d bytes of text)", MaxModelBytes)
	case lc.sum.lines > 0 && e.Model != lc.sum.model:
		return bad("model %s differs from the first request's %s: a batch runs one model", quoteClip(e.Model), quoteClip(lc.sum.model))
	case e.Stream:
		return bad("body.stream: a batch request cannot stream")
	}
	if len(e.Refs) > 0 {
		// Only the tenant's own, as on the line's url.
		err := error(&refProblem{e.Refs[0].Field, "this gateway does not serve objects stored upstream in batch lines"})
		if lc.refs != nil {
			err = lc.refs(&e)
		}
		if err != nil {
			return bad("body.%v", err)
		}
	}
	if ep == weights.EndpointResponses {
		// A continued response is priced from its recorded chain, and
		// only the tenant's own, as on /v1/responses.
		rr, err := parseResponsesRequest(body)
		if err != nil {
			return bad("body: %v", err)
		}
		if rr.previous != "" || rr.conversation {
			n, err := int64(0), errUnknownChain
			if lc.chain != nil {
				n, err = lc.chain(rr)
			}
			switch {
			case errors.Is(err, errUnknownChain), errors.Is(err, errConversation):
				return bad("body.%v", err)
			case err != nil:
				return bad("body.previous_response_id: the gateway cannot look the previous response up right now")
			}
			e.InputTokens = min(satSum(e.InputTokens, n), weights.MaxTokens)
		}
	}
	if lc.defaults != nil {
		lc.defaults(&e)
	}
	out := e.OutputTokens
	if lc.maxOutput > 0 && out > lc.maxOutput {
		out = lc.maxOutput
	}
	if lc.sum.lines == 0 {
		lc.sum.model, lc.sum.endpoint = e.Model, u
	}
	lc.sum.lines++
	lc.sum.in = satSum(lc.sum.in, e.InputTokens)
	lc.sum.out = satSum(lc.sum.out, out)
	return nil
}

// jsonText returns the text of raw, a JSON value, when it is a string
// (or null, as encoding/json decodes it into a string: "").
func jsonText(raw json.RawMessage) (string, bool) {
	switch {
	case string(raw) == "null":
		return "", true
	case len(raw) < 2 || raw[0] != '"':
		return "", false
	}
	return jsonscan.Unquote(raw[1 : len(raw)-1])
}

// satSum adds non-negative a and b, saturating at math.MaxInt64.
func satSum(a, b int64) int64 {
	b = max(b, 0)
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// quoteClip quotes a string a client sent, cut to 64 bytes.
func quoteClip(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strconv.Quote(s)
}

// objField is a key objectFields reads and where its value goes.
type objField struct {
	name string
	dst  *json.RawMessage
}

// objectFields reads data, which must be one JSON object and nothing
// else, into fields by key: each value is the span of data it takes. A
// key not among fields, given twice or written with escapes is an error:
// two values for one key would let the gateway price one and the
// upstream run the other, and an escaped key could spell a known one
// the gateway did not recognise. Invalid JSON anywhere in data is the
// error reported first. Values are checked and their spans found in one
// pass, without copying or decoding them.
func objectFields(data []byte, fields ...objField) error {
	if len(fields) > 64 {
		panic("gateway: objectFields reads at most 64 keys")
	}
	var sc jsonscan.Scanner
	sc.ResetBytes(data)
	var problem error
	if sc.Peek() != '{' {
		sc.Skip()
		problem = errors.New("not a JSON object")
	} else {
		sc.Open()
		var seen uint64
		for n := 0; sc.More(&n, '}'); {
			key, _ := sc.Key() // an escaped key is compared as written: unknown
			sc.SkipSpace()
			start := sc.Pos()
			sc.Skip()
			if problem != nil || sc.Err() != nil {
				continue
			}
			k := -1
			for j := range fields {
				if key == fields[j].name {
					k = j
					break
				}
			}
			switch {
			case k < 0:
				problem = fmt.Errorf("unknown key %s", quoteClip(key))
			case seen&(1<<k) != 0:
				problem = fmt.Errorf("key %s given twice", quoteClip(key))
			default:
				seen |= 1 << k
				end := sc.Pos()
				*fields[k].dst = data[start:end:end]
			}
		}
	}
	if sc.End(); sc.Err() != nil {
		return errors.New("invalid JSON")
	}
	return problem
}
