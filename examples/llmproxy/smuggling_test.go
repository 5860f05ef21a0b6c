package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/smuggle"
)

// A request whose body a proxy in front could frame differently from the
// gateway (Transfer-Encoding with Content-Length, a Transfer-Encoding
// other than one final chunked, HTTP/1.0 with a Transfer-Encoding) is
// answered at most once and its connection closed: the request smuggled
// after its body is never served, on the API listener or the operator
// listener, and never reaches the upstream.
func TestSmuggledRequestsAreNeverServed(t *testing.T) {
	rec := newRecorder(t)
	s := startProxy(t, edgePolicy(t, rec, rpmPolicy, []string{"a"}, "", ""))
	auth := "Host: proxy\r\nAuthorization: Bearer " + testKey("a") + "\r\n"
	tail := "GET /v1/models/smuggled HTTP/1.1\r\n" + auth + "\r\n"
	for _, a := range smuggle.Attempts("POST", "/v1/chat/completions", auth+"Content-Type: application/json\r\n", smallChat, tail) {
		smuggle.Send(t, strings.TrimPrefix(s.URL, "http://"), a, tail, 10*time.Second).Check(t, "API listener: "+a.Name)
	}
	for _, r := range rec.requests() {
		if strings.Contains(r.RequestURI, "smuggled") {
			t.Errorf("the upstream received the smuggled %s %s", r.Method, r.RequestURI)
		}
	}
	opsTail := "GET /debug/rollout HTTP/1.1\r\nHost: ops\r\n\r\n"
	for _, a := range smuggle.Attempts("GET", "/status", "Host: ops\r\n", "x", opsTail) {
		smuggle.Send(t, strings.TrimPrefix(s.OpsURL, "http://"), a, opsTail, 10*time.Second).Check(t, "operator listener: "+a.Name)
	}
}
