package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/internal/smuggle"
)

// A request whose body a proxy in front could frame differently is
// answered at most once and its connection closed, so the request
// smuggled after its body is never served: behind the middleware, on an
// exempt path, and on a route no middleware wraps when the server's
// handler is StrictFraming.
func TestSmuggledRequestsAreNeverServed(t *testing.T) {
	ctl, err := admission.New(admission.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{Keys: keys}))
	if err != nil {
		t.Fatal(err)
	}
	var smuggled atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /smuggled", func(w http.ResponseWriter, r *http.Request) { smuggled.Add(1) })
	mux.Handle("/api/", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })))
	mux.Handle("/healthz", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	srv := httptest.NewServer(httpadmit.StrictFraming(mux))
	t.Cleanup(srv.Close)
	bare := httptest.NewServer(mux) // the middleware alone
	t.Cleanup(bare.Close)

	hdr := "Host: svc\r\nAuthorization: Bearer " + keySteady + "\r\n"
	tail := "GET /smuggled HTTP/1.1\r\nHost: svc\r\n\r\n"
	for _, tc := range []struct{ name, url, path string }{
		{"middleware", bare.URL, "/api/x"},
		{"exempt path", bare.URL, "/healthz"},
		{"StrictFraming, no route", srv.URL, "/nowhere"},
		{"StrictFraming and middleware", srv.URL, "/api/x"},
	} {
		for _, a := range smuggle.Attempts("POST", tc.path, hdr, "{}", tail) {
			smuggle.Send(t, strings.TrimPrefix(tc.url, "http://"), a, tail, 10*time.Second).Check(t, tc.name+": "+a.Name)
		}
	}
	if n := smuggled.Load(); n != 0 {
		t.Errorf("the smuggled request was served %d times; want 0", n)
	}
}
