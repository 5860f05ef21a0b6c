package config

import (
	"fmt"
	"net/textproto"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission/apikey"
)

// Session is the identity.session section: where the agent session of a
// request is read from, for the policies keyed by session
// (limits.KeySession). The first source that carries a value gives it:
// the headers in order, then the body fields in order (a program that
// reads bodies, such as llmproxy, reads them). A value that is empty,
// longer than MaxLength or not printable ASCII (0x21 to 0x7E, the
// characters of an MCP session id, apikey.ValidSession) is refused with
// 400, never used nor shortened; a request without one is not counted by
// session policies.
//
//	identity:
//	  session:
//	    headers: [X-Session-Id, Mcp-Session-Id]
//	    body: [metadata.session_id, metadata.user_id]
//	    max_length: 128
type Session struct {
	// Headers are the request headers that may carry the session id,
	// tried in order, in canonical form (default X-Session-Id, then the
	// MCP transport's Mcp-Session-Id). A header that carries credentials
	// (one of identity.api_key_headers, Authorization, Cookie...) is
	// refused.
	Headers []string
	// Body lists the body fields that may carry the session id, tried in
	// order after the headers: metadata.session_id (OpenAI's request
	// metadata), metadata.user_id (Anthropic's Messages API), user
	// (OpenAI's end-user id, for clients that put the session there).
	// Default metadata.session_id, then metadata.user_id; an empty list
	// reads headers only.
	Body []string
	// MaxLength is the longest session id accepted, in bytes (default
	// apikey.DefaultMaxSessionLength, at most apikey.MaxSessionLength).
	MaxLength int
}

// The body fields identity.session.body may list.
const (
	SessionFieldMetadataSessionID = "metadata.session_id"
	SessionFieldMetadataUserID    = "metadata.user_id"
	SessionFieldUser              = "user"
)

// defaultSession is identity.session when the file leaves it out.
func defaultSession() Session {
	return Session{
		Headers:   slices.Clone(apikey.DefaultSessionHeaders),
		Body:      []string{SessionFieldMetadataSessionID, SessionFieldMetadataUserID},
		MaxLength: apikey.DefaultMaxSessionLength,
	}
}

// credentialHeaders are the headers that carry credentials in the
// common schemes: never a session id, which reaches logs.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "Api-Key", "X-Auth-Token", "X-Access-Token"}

func (d *decoder) decodeSession(n *yaml.Node, path string) {
	s := &d.f.Identity.Session
	var headers, body []string
	headersSet, bodySet := false, false
	d.mapping(n, path,
		field{"headers", func(n *yaml.Node, p string) { headersSet = true; d.list(&headers, true)(n, p) }},
		field{"body", func(n *yaml.Node, p string) { bodySet = true; d.list(&body, true)(n, p) }},
		field{"max_length", d.integer(&s.MaxLength, 1)},
	)
	if s.MaxLength > apikey.MaxSessionLength {
		d.errorf(d.lines[path+".max_length"], path+".max_length", "must be at most %d, got %d", apikey.MaxSessionLength, s.MaxLength)
	}
	if headersSet {
		s.Headers = s.Headers[:0:0]
		for i, h := range headers {
			p := fmt.Sprintf("%s.headers[%d]", path, i)
			if !validHeaderName(h) {
				d.errorf(d.lines[p], p, "%q is not a header name", h)
				continue
			}
			s.Headers = append(s.Headers, textproto.CanonicalMIMEHeaderKey(h))
		}
	}
	if bodySet {
		s.Body = body
		for i, f := range body {
			switch f {
			case SessionFieldMetadataSessionID, SessionFieldMetadataUserID, SessionFieldUser:
			default:
				p := fmt.Sprintf("%s.body[%d]", path, i)
				d.errorf(d.lines[p], p, "unknown field %q (want one of %s, %s, %s)", f,
					SessionFieldMetadataSessionID, SessionFieldMetadataUserID, SessionFieldUser)
			}
		}
	}
}

// checkSessionHeaders refuses a session header that carries credentials:
// the session id reaches logs, a key must not. It runs once the whole
// identity section is read.
func (d *decoder) checkSessionHeaders(path string) {
	id := &d.f.Identity
	for i, h := range id.Session.Headers {
		if slices.ContainsFunc(credentialHeaders, func(c string) bool { return strings.EqualFold(c, h) }) ||
			slices.ContainsFunc(id.KeyHeaders, func(c string) bool { return strings.EqualFold(c, h) }) {
			p := fmt.Sprintf("%s.session.headers[%d]", path, i)
			d.errorf(d.lines[p], p, "%s carries credentials: it cannot carry a session id, which logs show", h)
		}
	}
}

// validHeaderName reports whether s is an HTTP field name (RFC 9110
// token) of at most 64 bytes.
func validHeaderName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}
