package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
)

// roundTrip sends the request upstream with the client's headers, minus
// its credentials and hop-by-hop fields, and the upstream key.
func (g *Gateway) roundTrip(ctx context.Context, r *http.Request, body []byte) (*http.Response, error) {
	u := *g.base
	u.Path = g.base.Path + strings.TrimPrefix(r.URL.Path, "/v1")
	u.RawPath = ""
	u.RawQuery = r.URL.RawQuery
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		if dropRequestHeader(k) {
			continue
		}
		req.Header[k] = vs
	}
	if k := g.cfg.UpstreamKey; k != "" {
		if hk := g.cfg.UpstreamKeyHeader; hk != "" && !strings.EqualFold(hk, "Authorization") {
			req.Header.Set(hk, k)
		} else {
			req.Header.Set("Authorization", "Bearer "+k)
		}
	}
	req.ContentLength = int64(len(body))
	return g.cfg.Transport.RoundTrip(req)
}

func dropRequestHeader(k string) bool {
	switch k {
	case "Authorization", "X-Api-Key", "Api-Key", "Cookie", "Openai-Organization", "Openai-Project", "Connection", "Keep-Alive", "Proxy-Authorization",
		"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Accept-Encoding",
		"Host", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip":
		return true
	}
	return false
}

// dropResponseHeader lists upstream headers a client must not see: hop-by-
// hop fields, the provider account's own limits and identifiers (the
// gateway's limits replace them), cookies.
func dropResponseHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Content-Length", "Set-Cookie", "Openai-Organization", "Openai-Project", "Alt-Svc":
		return true
	}
	lk := strings.ToLower(k)
	return strings.HasPrefix(lk, "x-ratelimit-") || strings.HasPrefix(lk, "ratelimit")
}
