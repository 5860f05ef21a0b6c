package gateway

import (
	"net/url"
	"path"
	"strings"
	"testing"
)

// FuzzGeminiCall: whatever the last segment of a Gemini path, a call it
// accepts names a model that passes ValidModelID without ':' or '@' and
// a served method, and the upstream path built from them is one clean
// segment under /models/: nothing the client sends can reach another
// upstream path.
func FuzzGeminiCall(f *testing.F) {
	for _, s := range []string{"gemini-2.5-flash:generateContent", "gemini-2.5-flash:streamGenerateContent", "..%2F..%2Fv1:countTokens",
		"a%3Ab:generateContent", "..:generateContent", "x:y:countTokens", "%2e%2e:generateContent", "gemini:embedContent"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, param string, encoded bool) {
		model, method, ok := geminiCall(param, encoded)
		if !ok {
			return
		}
		if _, served := geminiRoutes[method]; !served || !ValidModelID(model) || strings.ContainsAny(model, ":@/") || len(model) > maxGeminiModel {
			t.Fatalf("geminiCall(%q, %v) = %q, %q; want a valid model and a served method", param, encoded, model, method)
		}
		p := "/v1beta/models/" + model + ":" + method
		u, err := url.Parse("http://upstream" + p)
		if err != nil || u.Path != p || path.Clean(p) != p {
			t.Fatalf("upstream path %q parses as %v, %v; want itself, clean", p, u, err)
		}
	})
}
