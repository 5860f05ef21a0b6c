package config

import (
	"net/url"
	"strings"
)

// RedactURL returns the URL s with the password of its user information
// replaced by "xxxxx", as url.URL.Redacted writes it, for echoing a
// configured URL (a webhook, an upstream, a Redis or OTLP endpoint, a
// database) in an error, a log line or a status page. A URL that does not
// parse is redacted too: everything between the scheme (or the start) and
// its last "@" but the user name, so that a malformed URL never echoes
// its secret. Never echo s itself, nor the error url.Parse gives for it,
// which holds s whole.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Opaque == "" {
		return u.Redacted()
	}
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + len("://")
	}
	at := strings.LastIndexByte(s[start:], '@')
	if at < 0 {
		return s
	}
	at += start
	user, _, _ := strings.Cut(s[start:at], ":")
	user, _, _ = strings.Cut(user, "/")
	return s[:start] + user + ":xxxxx" + s[at:]
}
