package echoadmit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/echoadmit"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/limitheaders"
	"github.com/sluicehq/sluice/internal/poll"
)

func send(t *testing.T, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// The problem types of httpadmit's answers (its package doc).
const (
	problemUnauthenticated = "urn:sluice:problem:unauthenticated"
	problemInvalidCost     = "urn:sluice:problem:invalid-cost"
	problemBodyTooLarge    = "urn:sluice:problem:body-too-large"
)

func problemType(t *testing.T, body string) string {
	t.Helper()
	var p struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return p.Type
}

// TestHTTPAdmitOptionsOnEcho: the httpadmit middleware's WithIdentity,
// WithRejectionHandler and WithRetryAfterMs hold under echo when the
// echo hooks are not set.
func TestHTTPAdmitOptionsOnEcho(t *testing.T) {
	identify := func(r *http.Request) (httpadmit.Identity, error) {
		if r.Header.Get("X-Session") == "valid" {
			return httpadmit.Identity{Tenant: "acme"}, nil
		}
		return httpadmit.Identity{}, errors.New("session not found")
	}
	hook := func(w http.ResponseWriter, r *http.Request, rej *admission.Rejection) {
		limitheaders.SetRetryAfterMs(w.Header(), rej.RetryAfter)
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "busy: "+rej.Policy)
	}
	tb := admission.Policy{Name: "tb", Algorithm: limits.TokenBucket, Limit: 5, Per: time.Second, Burst: 1}
	srv, _ := newServerWith(t, echoadmit.Config{}, []httpadmit.Option{httpadmit.WithIdentity(identify), httpadmit.WithRejectionHandler(hook)}, tb)
	if resp, body := send(t, srv.URL+"/v1/items/1", "X-Session", "forged"); resp.StatusCode != 401 || problemType(t, body) != problemUnauthenticated {
		t.Errorf("forged session: %d %s; want 401 unauthenticated", resp.StatusCode, body)
	}
	if resp, _ := send(t, srv.URL+"/v1/items/1", "X-Session", "valid"); resp.StatusCode != 200 {
		t.Errorf("valid session: %d; want 200", resp.StatusCode)
	}
	if resp, body := send(t, srv.URL+"/v1/items/1", "X-Session", "valid"); resp.StatusCode != 503 || body != "busy: tb" || resp.Header.Get("Retry-After-Ms") != "200" {
		t.Errorf("rejection: %d %q %v; want the hook's 503", resp.StatusCode, body, resp.Header)
	}

	srv, _ = newServerWith(t, echoadmit.Config{}, []httpadmit.Option{httpadmit.WithRetryAfterMs(true)}, tb)
	send(t, srv.URL+"/v1/items/1")
	resp, body := send(t, srv.URL+"/v1/items/1")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("Retry-After-Ms") != "200" || problemType(t, body) != "urn:sluice:problem:rate-limited" {
		t.Errorf("WithRetryAfterMs: %d %v %s; want 429 with Retry-After 1 and Retry-After-Ms 200", resp.StatusCode, resp.Header, body)
	}
}

// TestEchoIdentifierAndCost: an IdentifierExtractor's own error is a 401
// without its text; a negative estimate is a 400 invalid-cost, an
// absurdly large one saturated and refused as a decision.
func TestEchoIdentifierAndCost(t *testing.T) {
	tpm := admission.Policy{Name: "tpm", Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Minute}
	srv := newServer(t, echoadmit.Config{
		IdentifierExtractor: func(c echo.Context) (httpadmit.Identity, error) {
			if c.Request().Header.Get("X-Token") != "signed" {
				return httpadmit.Identity{}, errors.New("signature mismatch for tenant-x")
			}
			return httpadmit.Identity{Tenant: "acme"}, nil
		},
		Request: func(c echo.Context, r *admission.Request) error {
			_, err := fmt.Sscan(c.Request().Header.Get("X-Cost"), &r.Tokens)
			return err
		},
	}, tpm)
	for _, tc := range []struct {
		token, cost string
		status      int
		problem     string
	}{
		{"forged", "1", 401, problemUnauthenticated},
		{"signed", "10", 200, ""},
		{"signed", "-5", 400, problemInvalidCost},
		{"signed", "9223372036854775807", 429, "urn:sluice:problem:rate-limited"},
	} {
		resp, body := send(t, srv.URL+"/v1/items/1", "X-Token", tc.token, "X-Cost", tc.cost)
		if resp.StatusCode != tc.status || (tc.problem != "" && problemType(t, body) != tc.problem) {
			t.Errorf("token %s cost %s: %d %s; want %d %s", tc.token, tc.cost, resp.StatusCode, body, tc.status, tc.problem)
		}
		if strings.Contains(body, "signature mismatch") {
			t.Errorf("the 401 shows the extractor's error: %s", body)
		}
	}
}

// TestEchoServerTiming: a request admitted after 1.5 s in a queue
// carries "queue;dur=1500" under echo too.
func TestEchoServerTiming(t *testing.T) {
	conc := admission.Policy{Name: "conc", Algorithm: limits.Concurrency, Limit: 1, Queue: limits.Queue{Size: 2}}
	srv, env := newServerWith(t, echoadmit.Config{}, nil, conc)
	held := async(t, srv.URL+"/v1/hold")
	waitStats(t, env.ctl, func(s admission.PolicyStats) bool { return s.InFlight == 1 })
	queued := async(t, srv.URL+"/v1/items/1")
	waitStats(t, env.ctl, func(s admission.PolicyStats) bool { return s.Queued == 1 })
	env.clk.Advance(1500 * time.Millisecond)
	env.release <- struct{}{}
	first, second := <-held, <-queued
	if first == nil || second == nil {
		t.Fatal("a request failed")
	}
	if first.Header.Get("Server-Timing") != "" || second.StatusCode != 200 || second.Header.Get("Server-Timing") != "queue;dur=1500" {
		t.Errorf("Server-Timing: at once %q; queued %d %q; want none, then 200 queue;dur=1500",
			first.Header.Get("Server-Timing"), second.StatusCode, second.Header.Get("Server-Timing"))
	}
}

// async sends a GET in the background; its response (nil on a transport
// error, reported) comes on the channel.
func async(t *testing.T, url string) <-chan *http.Response {
	ch := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Get(url)
		if err != nil {
			t.Error(err)
			ch <- nil
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ch <- resp
	}()
	return ch
}

// waitStats polls the controller's one policy until cond holds, with no
// deadline: a condition that never holds is ended by the test timeout.
func waitStats(t *testing.T, ctl *admission.Controller, cond func(admission.PolicyStats) bool) {
	t.Helper()
	poll.Until(t, time.Second, "the policy's figures", func() bool { return cond(ctl.Stats()[0]) })
}

// TestEchoRequestErrors: a Request function's errors are answered as on
// net/http: 413 for a body over the limit, 400 with its text otherwise.
func TestEchoRequestErrors(t *testing.T) {
	srv, _ := newServerWith(t, echoadmit.Config{
		Request: func(c echo.Context, r *admission.Request) error {
			if _, err := io.ReadAll(c.Request().Body); err != nil {
				return err
			}
			if c.Request().Header.Get("X-Model") == "" {
				return errors.New("the model is missing")
			}
			return nil
		},
	}, []httpadmit.Option{httpadmit.WithMaxBody(16)}, itemsPolicy)
	for _, tc := range []struct {
		body, model string
		status      int
		problem     string
	}{
		{"{}", "gpt", 200, ""},
		{"{}", "", 400, "urn:sluice:problem:bad-request"},
		// Chunked, so that only reading finds it too large.
		{strings.Repeat("x", 64), "gpt", 413, problemBodyTooLarge},
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/items/1", io.MultiReader(strings.NewReader(tc.body)))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Model", tc.model)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.problem != "" && problemType(t, string(body)) != tc.problem) {
			t.Errorf("body %d bytes, model %q: %d %s; want %d %s", len(tc.body), tc.model, resp.StatusCode, body, tc.status, tc.problem)
		}
		if tc.status == 400 && !strings.Contains(string(body), "the model is missing") {
			t.Errorf("400 body %s; want the function's text", body)
		}
	}
}

// TestRejectionHeadersOnEcho: under echo, a WithRejectionHandler function
// that writes its own body gets the default answer's headers and status
// from httpadmit.SetRejectionHeaders, by the middleware's settings (the
// quota status 429, Retry-After-Ms).
func TestRejectionHeadersOnEcho(t *testing.T) {
	hook := func(w http.ResponseWriter, r *http.Request, rej *admission.Rejection) {
		status := httpadmit.SetRejectionHeaders(w, r, rej)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"policy":%q}`, rej.Policy)
	}
	daily := admission.Policy{Name: "daily", Algorithm: limits.Quota, Limit: 1, Period: limits.PeriodDay}
	srv, _ := newServerWith(t, echoadmit.Config{}, []httpadmit.Option{
		httpadmit.WithRejectionHandler(hook), httpadmit.WithQuotaStatus(429), httpadmit.WithRetryAfterMs(true),
	}, daily)
	send(t, srv.URL+"/v1/items/1")
	resp, body := send(t, srv.URL+"/v1/items/1")
	h := resp.Header
	if resp.StatusCode != 429 || body != `{"policy":"daily"}` || h.Get("Retry-After") != "86400" || h.Get("Retry-After-Ms") != "86400000" ||
		h.Get("RateLimit") != `"daily";r=0;t=86400` || h.Get("X-RateLimit-Limit") != "1" {
		t.Errorf("quota rejection: %d %v %s; want 429 with Retry-After 86400, Retry-After-Ms and the limit fields", resp.StatusCode, h, body)
	}
}
