package config

import (
	"net/url"
	"strings"
)

// RedactURL returns the URL s with the password of its user information
// replaced by "xxxxx", as url.URL.Redacted writes it, for echoing a
// configured URL (a webhook, an upstream, a Redis or OTLP endpoint, a
// database) in an error, a log line or a status page. A URL that does not
// parse, or whose "@" url.Parse did not take for the end of credentials
// (a password holding "/" or "?" unescaped makes its start a host and
// port), is redacted by hand: everything between the scheme (or the
// start) and its last "@" but the user name, so that no URL ever echoes
// its secret, at the price of hiding more than the password of one with
// an "@" in its path or query. Never echo s itself, nor the error
// url.Parse gives for it, which holds s, or a part of it, too.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Opaque == "" && (u.User != nil || !strings.Contains(s, "@")) {
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
