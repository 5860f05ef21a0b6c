package gateway

import (
	"net/http"
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

// TestGeminiRetryDelayBounded: the RetryInfo of a Gemini error carries
// the answer's Retry-After-Ms, which on a provider's 429 is the
// provider's own, any integer: a delay too long for a time.Duration (a
// hostile or broken upstream's) must not wrap into a negative or short
// retryDelay that tells Google's SDKs to retry at once. It is left out,
// as an unreadable one is.
func TestGeminiRetryDelayBounded(t *testing.T) {
	for _, tc := range []struct {
		ms, want string // want: the retryDelay, "" for no RetryInfo
	}{
		{"7000", `"retryDelay":"7s"`},
		{"0", `"retryDelay":"0s"`},
		{"-1", ""},
		{"x", ""},
		{"9223372036854", `"retryDelay":"9223372036.854s"`}, // the longest a Duration holds
		{"9223372036855", ""},
		{"18446744073709", ""}, // 2^64 ns: wraps to 0
		{"9223372036854775807", ""},
	} {
		h := http.Header{"Retry-After-Ms": {tc.ms}}
		b := string(geminiErrorBody(h, http.StatusTooManyRequests, "upstream_error", "throttled"))
		got := ""
		if i := strings.Index(b, `"retryDelay":`); i >= 0 {
			got = b[i:]
			got = got[:strings.IndexByte(got, '}')]
		}
		if got != tc.want {
			t.Errorf("geminiErrorBody with Retry-After-Ms %s: %s; want %q", tc.ms, b, tc.want)
		}
	}
}
