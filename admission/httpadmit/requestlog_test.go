package httpadmit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow/replay"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

// TestWithRequestLog: a service behind the middleware writes the request
// log admitctl replay reads, and replaying it through the service's
// policies gives back what the service decided.
func TestWithRequestLog(t *testing.T) {
	policies := []admission.Policy{
		{Name: "rpm", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.FixedWindow, Limit: 4, Per: time.Hour},
		{Name: "inflight", Algorithm: limits.Concurrency, Limit: 10, Mode: limits.Shadow},
	}
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(admission.Config{Policies: policies})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{Keys: keys}), httpadmit.WithRequestLog(rl.Log))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items/{id}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	srv := httptest.NewServer(mw.Handler(mux))
	defer srv.Close()
	ok, refused := 0, 0
	for _, key := range []string{keyNoisy, keyNoisy, keySteady, keyNoisy, keyNoisy, keyNoisy, keySteady, keyNoisy} {
		switch code := call(t, srv, "GET", "/v1/items/1", key).StatusCode; code {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("status %d", code)
		}
	}
	if ok != 6 || refused != 2 {
		t.Fatalf("live: %d admitted, %d refused; want 6 and 2", ok, refused)
	}
	if err := rl.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := replay.Run(context.Background(), f, replay.Config{Reorder: time.Minute}, replay.Candidate{Name: "live", Config: admission.Config{Policies: policies}})
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Candidates[0]; c.Requests != 8 || c.Admitted != 6 || c.Rejected != 2 {
		t.Errorf("replay: %d requests, %d admitted, %d rejected; want 8, 6, 2 as live", c.Requests, c.Admitted, c.Rejected)
	}
	if rl.Written() != 8 || rl.Dropped() != 0 {
		t.Errorf("request log: %d written, %d dropped; want 8 and 0", rl.Written(), rl.Dropped())
	}
}
