package httpadmit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
)

// bodyHeaders are the headers that describe an answer's body, which a
// rejection handler writes its own way.
var bodyHeaders = []string{"Content-Type", "Content-Length", "Cache-Control", "X-Content-Type-Options", "Date"}

// TestRejectionHandlerHeaders: a WithRejectionHandler function that calls
// SetRejectionHeaders and writes its own JSON body answers with exactly
// the status and headers of the default answer, by the settings of the
// snapshot that decided the request: Retry-After (absent when waiting
// cannot help), Retry-After-Ms when on, the RateLimit fields, and the
// configured quota status, also when a reload lands while the handler
// runs.
func TestRejectionHandlerHeaders(t *testing.T) {
	rate := admission.Policy{Name: "rps", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket, Limit: 5, Per: time.Second, Burst: 1}
	quota := admission.Policy{Name: "daily", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Quota, Limit: 1, Period: limits.PeriodDay}
	tokens := admission.Policy{Name: "tpm", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket, Unit: limits.UnitTokens, Limit: 100, Per: time.Minute}
	huge := httpadmit.WithRequest(func(_ *http.Request, req *admission.Request) error { req.Tokens = 1000; return nil })
	for _, tc := range []struct {
		name   string
		policy admission.Policy
		opts   []httpadmit.Option
		reload bool // the handler applies WithQuotaStatus(403) before rendering
		status int
		want   []string // headers the answer must carry
		absent []string // headers it must not
	}{
		{"rate with Retry-After-Ms", rate, []httpadmit.Option{httpadmit.WithRetryAfterMs(true)}, false, 429,
			[]string{"Retry-After", "Retry-After-Ms", "Ratelimit", "Ratelimit-Policy", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}, nil},
		{"rate", rate, nil, false, 429,
			[]string{"Retry-After", "Ratelimit", "Ratelimit-Policy"}, []string{"Retry-After-Ms"}},
		{"quota, default status", quota, nil, false, 403,
			[]string{"Retry-After", "Ratelimit", "Ratelimit-Policy"}, []string{"Retry-After-Ms"}},
		{"quota, status 429", quota, []httpadmit.Option{httpadmit.WithQuotaStatus(429), httpadmit.WithRetryAfterMs(true)}, false, 429,
			[]string{"Retry-After", "Retry-After-Ms", "Ratelimit", "Ratelimit-Policy"}, nil},
		{"quota, status 429, reloaded to 403 while answering", quota, []httpadmit.Option{httpadmit.WithQuotaStatus(429)}, true, 429,
			[]string{"Retry-After", "Ratelimit", "Ratelimit-Policy"}, nil},
		{"never fits", tokens, []httpadmit.Option{huge, httpadmit.WithRetryAfterMs(true)}, false, 429,
			[]string{"Ratelimit", "Ratelimit-Policy"}, []string{"Retry-After", "Retry-After-Ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			serve := func(custom bool) *http.Response {
				ctl, err := admission.New(admission.Config{Policies: []admission.Policy{tc.policy}}, admission.WithClock(admissiontest.NewClock(t0)))
				if err != nil {
					t.Fatal(err)
				}
				opts := append([]httpadmit.Option{httpadmit.WithLogger(slog.New(slog.DiscardHandler))}, tc.opts...)
				var mw *httpadmit.Middleware
				if custom {
					opts = append(opts, httpadmit.WithRejectionHandler(func(w http.ResponseWriter, r *http.Request, rej *admission.Rejection) {
						if tc.reload {
							if err := mw.Apply(admission.Config{Policies: []admission.Policy{tc.policy}}, httpadmit.WithQuotaStatus(403)); err != nil {
								t.Error(err)
							}
						}
						status := httpadmit.SetRejectionHeaders(w, r, rej)
						w.Header().Set("Content-Type", "application/json")
						w.WriteHeader(status)
						fmt.Fprintf(w, `{"custom":%q}`, rej.Policy)
					}))
				}
				if mw, err = httpadmit.New(ctl, opts...); err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
				defer srv.Close()
				var resp *http.Response
				for range 2 {
					resp = call(t, srv, "GET", "/v1/items/1", "")
				}
				return resp
			}
			def, cus := serve(false), serve(true)
			if def.StatusCode != tc.status || cus.StatusCode != tc.status {
				t.Errorf("status: default %d, custom %d; want %d", def.StatusCode, cus.StatusCode, tc.status)
			}
			var body struct{ Custom string }
			if b, _ := io.ReadAll(cus.Body); json.Unmarshal(b, &body) != nil || body.Custom != tc.policy.Name {
				t.Errorf("custom body = %s; want the handler's own", b)
			}
			for _, h := range bodyHeaders {
				def.Header.Del(h)
				cus.Header.Del(h)
			}
			for _, h := range tc.want {
				if def.Header.Get(h) == "" {
					t.Errorf("default answer has no %s: %v", h, def.Header)
				}
			}
			for _, h := range tc.absent {
				if def.Header.Get(h) != "" {
					t.Errorf("default answer has %s: %v", h, def.Header)
				}
			}
			if !equalHeaders(def.Header, cus.Header) {
				t.Errorf("headers of the custom answer = %v; want the default answer's %v", cus.Header, def.Header)
			}
		})
	}
}

// equalHeaders reports whether a and b hold the same fields and values.
func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestContextValue: the context the handler gets holds the identity and
// the ticket; an identity placed on it later (ContextWithIdentity) keeps
// the ticket; a printed context shows neither.
func TestContextValue(t *testing.T) {
	var got, inner httpadmit.Identity
	var ticket, innerTicket bool
	var printed string
	stub := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = httpadmit.IdentityFrom(r.Context())
		_, ticket = httpadmit.TicketFrom(r.Context())
		ctx := httpadmit.ContextWithIdentity(r.Context(), httpadmit.Identity{Tenant: "other"})
		inner, _ = httpadmit.IdentityFrom(ctx)
		_, innerTicket = httpadmit.TicketFrom(ctx)
		printed = fmt.Sprint(ctx)
	})
	benchMiddleware(t, stub, benchRequest(), httpadmit.WithTicketInContext())
	if want := (httpadmit.Identity{Tenant: "acme", KeyID: "key_1"}); got != want || !ticket {
		t.Errorf("handler: IdentityFrom = %+v, TicketFrom ok = %v; want %+v, true", got, ticket, want)
	}
	if inner.Tenant != "other" || !innerTicket {
		t.Errorf("after ContextWithIdentity: IdentityFrom = %+v, TicketFrom ok = %v; want tenant other, true", inner, innerTicket)
	}
	for _, secret := range []string{"acme", "key_1", "other"} {
		if strings.Contains(printed, secret) {
			t.Errorf("printed context %q shows %q", printed, secret)
		}
	}
	if _, ok := httpadmit.IdentityFrom(context.Background()); ok {
		t.Error("IdentityFrom(context.Background()) found an identity")
	}
}
