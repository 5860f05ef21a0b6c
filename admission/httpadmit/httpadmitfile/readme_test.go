package httpadmitfile_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
)

// readmeSubstitutions are the only differences between the README's
// library example and readmeService's copy of it: the server is a
// function of the test, and the clock is the test's.
var readmeSubstitutions = []struct{ readme, test string }{
	{"http.ListenAndServe(", "listenAndServe("},
	{"httpadmit.WithRoutes(mux)))", "httpadmit.WithRoutes(mux)), withClock)"},
}

// readmeService runs the README's library example as the README prints
// it, but for readmeSubstitutions: listenAndServe stands for the server,
// log.Fatal fails the test.
func readmeService(t *testing.T, ctx context.Context, withClock httpadmitfile.Option, listenAndServe func(string, http.Handler) error) {
	log := fatalLog{t}
	// README:begin
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat", func(w http.ResponseWriter, r *http.Request) {
		id, _ := httpadmit.IdentityFrom(r.Context()) // the caller, from its API key
		fmt.Fprintln(w, "hello", id.Tenant)
	})
	s, err := httpadmitfile.FromFile(ctx, "policies.yaml", httpadmitfile.WithMiddleware(httpadmit.WithRoutes(mux)), withClock)
	if err != nil {
		log.Fatal(err) // policies.yaml:3:60: policies[0].limit: ...
	}
	defer s.Close()
	log.Fatal(listenAndServe(":8080", s.Handler(mux)))
	// README:end
}

// fatalLog stands for package log in readmeService: Fatal fails the test
// on anything but a nil error.
type fatalLog struct{ t *testing.T }

func (l fatalLog) Fatal(v ...any) {
	if len(v) != 1 || v[0] != nil {
		l.t.Helper()
		l.t.Fatal(v...)
	}
}

// TestREADMELibrary checks that the README's library example is the code
// readmeService runs, and runs it on the README's policy file (a real key
// hash in place of its placeholder): the tenant gets the file's 600
// requests a minute and a 429 after them, a caller without a key a 401.
func TestREADMELibrary(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	goBlock, yamlBlock := readmeBlocks(t, string(readme), "## The library, in Go")
	want := goBlock
	for _, s := range readmeSubstitutions {
		if !strings.Contains(want, s.readme) {
			t.Fatalf("README.md's library example no longer has %q, which the test replaces", s.readme)
		}
		want = strings.ReplaceAll(want, s.readme, s.test)
	}
	self, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(self), "\t// README:begin\n")
	body, _, _ := strings.Cut(after, "\t// README:end\n")
	if got := strings.ReplaceAll(body, "\n\t", "\n"); strings.TrimPrefix(got, "\t") != want {
		t.Fatalf("README.md's library example differs from readmeService's copy:\nREADME (substituted):\n%s\ntest:\n%s", want, strings.TrimPrefix(got, "\t"))
	}
	const placeholder = `"sha256:…"`
	if !strings.Contains(yamlBlock, placeholder) {
		t.Fatalf("README.md's policy file no longer has the key placeholder %s:\n%s", placeholder, yamlBlock)
	}
	t.Chdir(t.TempDir())
	file := strings.Replace(yamlBlock, placeholder, apikey.Sum("sk-acme").String(), 1)
	if err := os.WriteFile("policies.yaml", []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}

	clock := admissiontest.NewClock(backendtest.Epoch)
	served := false
	readmeService(t, t.Context(), httpadmitfile.WithClock(clock), func(addr string, h http.Handler) error {
		served = true
		send := func(key string) *httptest.ResponseRecorder {
			r := httptest.NewRequest("POST", "/v1/chat", nil)
			if key != "" {
				r.Header.Set("Authorization", "Bearer "+key)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		for i := range 600 {
			if w := send("sk-acme"); w.Code != http.StatusOK || w.Body.String() != "hello acme\n" {
				t.Fatalf("request %d: %d %q; want 200 \"hello acme\"", i+1, w.Code, w.Body)
			}
		}
		if w := send("sk-acme"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Errorf("request 601: %d, Retry-After %q; want 429 with a Retry-After", w.Code, w.Header().Get("Retry-After"))
		}
		if w := send(""); w.Code != http.StatusUnauthorized {
			t.Errorf("request without a key: %d; want 401", w.Code)
		}
		return nil
	})
	if !served {
		t.Fatal("the README's example never served")
	}
}

// readmeBlocks returns the first go and the first yaml fenced block after
// the heading.
func readmeBlocks(t *testing.T, readme, heading string) (goBlock, yamlBlock string) {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no heading %q", heading)
	}
	block := func(lang string) string {
		_, rest, ok := strings.Cut(section, "\n```"+lang+"\n")
		if !ok {
			t.Fatalf("README.md: no %s block after %q", lang, heading)
		}
		b, _, ok := strings.Cut(rest, "\n```\n")
		if !ok {
			t.Fatalf("README.md: the %s block after %q does not end", lang, heading)
		}
		return b + "\n"
	}
	return block("go"), block("yaml")
}
