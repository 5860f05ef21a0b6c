package gateway

import (
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
)

// What echo hands over as the :id of /v1/models/:id, and what
// ModelIDFromPath makes of it. Echo routes on URL.RawPath when it is set
// (net/http sets it when the path's encoding is not the one it would
// choose: %2F, %2e, %2D...), so the parameter is then the raw, still
// encoded segment; otherwise it is the decoded one (%252F arrives as
// %2F, %5C as a backslash, %00 as NUL).
func TestModelIDBehindEcho(t *testing.T) {
	e := echo.New()
	var param string
	var encoded bool
	e.GET(OpModel, func(c echo.Context) error {
		param, encoded = c.Param("id"), c.Request().URL.RawPath != ""
		return nil
	})
	for _, tc := range []struct {
		target, param, id string // id "" means refused
	}{
		{"/v1/models/gpt-4o-mini", "gpt-4o-mini", "gpt-4o-mini"},
		{"/v1/models/ft:gpt-4o:acme::x1", "ft:gpt-4o:acme::x1", "ft:gpt-4o:acme::x1"},
		{"/v1/models/gpt%2D4o", "gpt%2D4o", "gpt-4o"},
		{"/v1/models/..%2F..%2Fadmin", "..%2F..%2Fadmin", ""},
		{"/v1/models/..%2f..%2fadmin", "..%2f..%2fadmin", ""},
		{"/v1/models/%2e%2e", "%2e%2e", ""},
		{"/v1/models/..", "..", ""},
		{"/v1/models/.", ".", ""},
		{"/v1/models/..%252F", "..%2F", ""},
		{"/v1/models/%2541", "%41", ""},
		{"/v1/models/a%5Cb", `a\b`, ""},
		{`/v1/models/a\b`, `a\b`, ""},
		{"/v1/models/a;b=1", "a;b=1", ""},
		{"/v1/models/%EF%BC%8E%EF%BC%8E", "．．", ""},
		{"/v1/models/a%00", "a\x00", ""},
	} {
		param = "(not routed)"
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, tc.target, nil))
		if param != tc.param {
			t.Errorf("GET %s: c.Param(id) = %q; want %q", tc.target, param, tc.param)
		}
		id, ok := ModelIDFromPath(param, encoded)
		if id != tc.id || ok != (tc.id != "") {
			t.Errorf("ModelIDFromPath(%q, %v) = %q, %v; want %q", param, encoded, id, ok, tc.id)
		}
	}
}

// Whatever the parameter, an accepted id is one clean path segment that
// no decoding changes: appended to a path, it names a child of it.
func FuzzModelIDFromPath(f *testing.F) {
	for _, s := range []string{"gpt-4o", "..%2F..", "%2e%2e", "%252e", "a\\b", "a;b", "ft:x:y", "%C0%AE", "."} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, param string, encoded bool) {
		id, ok := ModelIDFromPath(param, encoded)
		if !ok {
			return
		}
		p := "/v1/models/" + id
		if path.Clean(p) != p || path.Dir(p) != "/v1/models" || len(id) > MaxModelBytes ||
			strings.ContainsAny(id, "%\\;?#/ \x00") || !ValidModelName(id) {
			t.Fatalf("ModelIDFromPath(%q, %v) accepted %q", param, encoded, id)
		}
	})
}

func TestValidModelName(t *testing.T) {
	for m, want := range map[string]bool{
		"gpt-4o-mini": true, "meta-llama/Llama-3-8b": true, "ft:gpt-4o:acme::x": true, "": true,
		strings.Repeat("m", MaxModelBytes): true, strings.Repeat("m", MaxModelBytes+1): false,
		"gpt\n4o": false, "gpt\x00": false, "gpt\x1b[31m": false, "gpt\u0085": false, "gpt\u2028": false, "gpt\xff": false,
	} {
		if got := ValidModelName(m); got != want {
			t.Errorf("ValidModelName(%.20q) = %v; want %v", m, got, want)
		}
	}
}
