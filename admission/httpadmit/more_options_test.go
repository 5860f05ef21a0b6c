package httpadmit_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/poll"
)

// TestWithOperation: a custom operation name decides which policies match.
func TestWithOperation(t *testing.T) {
	p := perTenant(1)
	p.Match.Operations = []string{"items"}
	srv, _, _ := setup(t, []admission.Policy{p}, httpadmit.WithOperation(func(r *http.Request) string {
		if r.URL.Path == "/healthz" {
			return "health"
		}
		return "items"
	}))
	if got := call(t, srv, "GET", "/v1/items/1", keyNoisy).StatusCode; got != http.StatusOK {
		t.Fatalf("first item GET = %d; want 200", got)
	}
	if got := call(t, srv, "GET", "/v1/items/2", keyNoisy).StatusCode; got != http.StatusTooManyRequests {
		t.Fatalf("second item GET = %d; want 429 (operation items limited to 1)", got)
	}
	if got := call(t, srv, "GET", "/healthz", keyNoisy).StatusCode; got != http.StatusOK {
		t.Fatalf("GET /healthz = %d; want 200 (operation health matches no policy)", got)
	}
}

// TestWithoutQueueing: a request that would wait in a queue is refused at
// once with queue figures instead.
func TestWithoutQueueing(t *testing.T) {
	// The queue timeout outlasts the test's: a request that queued could
	// only end once the first releases its permit.
	p := admission.Policy{Name: "inflight", Algorithm: limits.Concurrency, Limit: 1,
		Queue: limits.Queue{Size: 5, Timeout: time.Hour}}
	for _, tc := range []struct {
		name  string
		opts  []httpadmit.Option
		block bool // whether the second request waits
	}{
		{"queueing", nil, true},
		{"without", []httpadmit.Option{httpadmit.WithoutQueueing()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			entered := make(chan struct{}, 2)
			ctl, err := admission.New(admission.Config{Policies: []admission.Policy{p}})
			if err != nil {
				t.Fatal(err)
			}
			mw, err := httpadmit.New(ctl, append([]httpadmit.Option{httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{Keys: keys})}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				<-release
			})))
			defer srv.Close()
			first := make(chan int, 1)
			go func() { first <- call(t, srv, "GET", "/a", keyNoisy).StatusCode }()
			<-entered
			second := make(chan int, 1)
			go func() { second <- call(t, srv, "GET", "/b", keySteady).StatusCode }()
			if tc.block {
				// Queued: the controller counts it waiting while the first holds the permit.
				poll.Until(t, time.Second, "the second request to wait in the queue", func() bool { return ctl.Stats()[0].Queued == 1 })
				close(release)
				if code := <-second; code != http.StatusOK {
					t.Fatalf("queued request = %d; want 200 once the permit was released", code)
				}
			} else {
				// Refused at once: answered while the first still holds the permit.
				if code := <-second; code != http.StatusTooManyRequests {
					t.Fatalf("second request = %d while the first held the permit; want 429 at once", code)
				}
				close(release)
			}
			if code := <-first; code != http.StatusOK {
				t.Fatalf("first request = %d; want 200", code)
			}
		})
	}
}

// TestWriteRejection: a service rendering rejections itself gets the
// status, Retry-After and a problem+json body naming the policy.
func TestWriteRejection(t *testing.T) {
	for _, tc := range []struct {
		reason admission.Reason
		quota  int
		want   int
	}{
		{admission.ReasonRate, 403, http.StatusTooManyRequests},
		{admission.ReasonQuota, 403, http.StatusForbidden},
		{admission.ReasonQuota, 429, http.StatusTooManyRequests},
		{admission.ReasonStoreUnavailable, 403, http.StatusServiceUnavailable},
	} {
		rej := &admission.Rejection{Policy: "tpm", Reason: tc.reason, RetryAfter: 1500 * time.Millisecond,
			Status: admission.Status{Policy: "tpm", Unit: limits.UnitTokens, Limit: 100, Window: time.Minute, Reset: 2 * time.Second}}
		w := httptest.NewRecorder()
		httpadmit.WriteRejection(w, rej, tc.quota)
		if w.Code != tc.want {
			t.Errorf("WriteRejection(%s, quota %d) status = %d; want %d", tc.reason, tc.quota, w.Code, tc.want)
		}
		if got := w.Header().Get("Retry-After"); got != "2" {
			t.Errorf("WriteRejection(%s) Retry-After = %q; want 2 (1.5 s rounded up)", tc.reason, got)
		}
		var p struct {
			Status int    `json:"status"`
			Policy string `json:"policy"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != tc.want || p.Policy != "tpm" {
			t.Errorf("WriteRejection(%s) body = %s (%v); want problem+json with status %d and policy tpm", tc.reason, w.Body, err, tc.want)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("Content-Type = %q; want application/problem+json", ct)
		}
	}
}
