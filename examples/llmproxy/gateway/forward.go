package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"
)

// MaxModelBytes is the longest model name the gateway accepts, in a body
// or in a path. OpenAI's own names, fine-tuned ones included, are well
// under it.
const MaxModelBytes = 256

// errNotForwarded is the error of a route the gateway does not forward, or
// of a path parameter that is not valid; handlers check both before
// calling roundTrip, so it means a programming error.
var errNotForwarded = errors.New("gateway: not a forwarded route")

// ValidModelID reports whether id, a path parameter already decoded, may
// name a model in an upstream path: 1 to MaxModelBytes bytes among ASCII
// letters, digits and - _ . : @, and neither "." nor "..". Everything that
// could change the meaning of the path (a separator, raw or encoded, a
// dot segment, a backslash, ';', '%' of a second encoding, a control
// character, a non-ASCII look-alike of a dot or a slash) is outside the
// set.
func ValidModelID(id string) bool {
	if id == "" || len(id) > MaxModelBytes || id == "." || id == ".." {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		case b == '-', b == '_', b == '.', b == ':', b == '@':
		default:
			return false
		}
	}
	return true
}

// ModelIDFromPath validates a model id path parameter as the router gives
// it: encoded says the router handed over the raw segment, still
// percent-encoded (echo does when the request path has encoded
// characters, that is when URL.RawPath is set), which is then decoded
// once; otherwise the segment is already decoded and is not decoded
// again. The result must pass ValidModelID.
func ModelIDFromPath(param string, encoded bool) (string, bool) {
	id := param
	if encoded {
		var err error
		if id, err = url.PathUnescape(param); err != nil {
			return "", false
		}
	}
	if !ValidModelID(id) {
		return "", false
	}
	return id, true
}

// ValidModelName reports whether a model name read from a request body is
// acceptable: at most MaxModelBytes bytes of valid UTF-8 without control
// characters. Unlike a path parameter it may hold a '/' ("org/model" on
// OpenAI-compatible servers), since it is sent in the body only.
func ValidModelName(m string) bool {
	if len(m) > MaxModelBytes || !utf8.ValidString(m) {
		return false
	}
	for _, r := range m {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) || r == '\u2028' || r == '\u2029' {
			return false
		}
	}
	return true
}

// roundTrip sends the request upstream to the path of route (with id, the
// validated model id, for OpModel), with the client's forwardable headers
// and the upstream key (Config.Anthropic's for the Messages API). The
// client's query string is not forwarded: the upstream URL keeps its own
// (Azure's api-version).
func (g *Gateway) roundTrip(ctx context.Context, st *state, r *http.Request, rt route, id string, body []byte) (*http.Response, error) {
	if (rt.path == OpModel) != (id != "") || (id != "" && !ValidModelID(id)) {
		return nil, errNotForwarded
	}
	base := g.base
	if rt.anthropic() {
		base = g.anthropic
	} else if rt.gemini() {
		base = g.gemini
	} else if rt.azure() {
		base = g.azure
	} else if rt.bedrock() {
		base = g.bedrock
	}
	u := *base
	u.Path = base.Path + rt.upstream + id
	u.RawPath = ""
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	g.copyRequestHeaders(st, req.Header, r.Header)
	switch {
	case rt.anthropic():
		g.setAnthropicUpstream(req.Header, r.Header)
	case rt.gemini():
		g.geminiUpstream(req.URL, req.Header, rt)
	case rt.azure():
		g.azureUpstream(req.URL, req.Header, rt)
	case rt.bedrock():
		if err := g.bedrockUpstream(ctx, req, body); err != nil {
			return nil, err
		}
	default:
		g.setUpstreamKey(req.Header)
	}
	req.ContentLength = int64(len(body))
	resp, err := g.opt.transport.RoundTrip(req)
	if err == nil && rt.gemini() {
		geminiThrottled(resp)
	}
	return resp, err
}

// setUpstreamKey puts Config.UpstreamKey in h, in Config.UpstreamKeyHeader
// (Authorization with the Bearer scheme by default).
func (g *Gateway) setUpstreamKey(h http.Header) {
	k := g.cfg.UpstreamKey
	if k == "" {
		return
	}
	if hk := g.cfg.UpstreamKeyHeader; hk != "" && !strings.EqualFold(hk, "Authorization") {
		h.Set(hk, k)
	} else {
		h.Set("Authorization", "Bearer "+k)
	}
}

// copyRequestHeaders copies to dst the client headers that may go
// upstream: those forwardRequestHeader allows, or Config.ForwardHeaders
// lists, and never one that can carry a client credential
// (the IdentityConfig.CredentialHeader of st, the request's state).
func (g *Gateway) copyRequestHeaders(st *state, dst, src http.Header) {
	ic := st.mw.Identity()
	for k, vs := range src {
		if (forwardRequestHeader(k) || g.forward.match(k)) && !ic.CredentialHeader(k) {
			dst[k] = vs
		}
	}
}

// forwardRequestHeader lists the client headers an OpenAI-compatible
// upstream needs: the body's type, what the client accepts, the SDKs'
// own headers (OpenAI-Beta, X-Stainless-*), idempotency and trace
// context. Everything else stays at the gateway: credentials in whatever
// header the client put them, the tenant's organization and project ids,
// hop-by-hop and forwarding fields.
func forwardRequestHeader(k string) bool {
	switch k {
	case "Content-Type", "Accept", "User-Agent", "Openai-Beta", "Idempotency-Key", "Traceparent", "Tracestate", "X-Request-Id":
		return true
	}
	return strings.HasPrefix(k, "X-Stainless-")
}

// headerSet matches canonical header names exactly or, for an entry
// ending in '*', by prefix.
type headerSet struct {
	exact    []string
	prefixes []string
}

func newHeaderSet(names []string) headerSet {
	var s headerSet
	for _, n := range names {
		if p, ok := strings.CutSuffix(n, "*"); ok {
			s.prefixes = append(s.prefixes, http.CanonicalHeaderKey(p))
		} else {
			s.exact = append(s.exact, http.CanonicalHeaderKey(n))
		}
	}
	return s
}

func (s headerSet) match(k string) bool {
	for _, e := range s.exact {
		if e == k {
			return true
		}
	}
	for _, p := range s.prefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// dropResponseHeader lists upstream headers a client must not see: hop-by-
// hop fields, the provider account's own limits and identifiers (the
// gateway's limits replace them), cookies.
func dropResponseHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Content-Length", "Set-Cookie", "Openai-Organization", "Openai-Project", "Anthropic-Organization-Id", "Alt-Svc":
		return true
	}
	lk := strings.ToLower(k)
	return strings.HasPrefix(lk, "x-ratelimit-") || strings.HasPrefix(lk, "ratelimit") || strings.HasPrefix(lk, "anthropic-ratelimit-")
}
