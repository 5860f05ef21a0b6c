package httpadmit_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/httpadmit/httpadmitfile"
)

// TestApplyIsOneStep installs, between the identification of a request
// and its admission, a file that moves the caller's key from tenant a to
// tenant b (b's limit 200, a's 300), or one that changes a's limit only
// (300): the request is decided wholly by the file it arrived under (a's
// limit, 100), never by the new policies for the old tenant (300), and
// the next request wholly by the new file.
func TestApplyIsOneStep(t *testing.T) {
	file := func(owner string, aLimit int) *config.File {
		t.Helper()
		f, err := config.Parse("moving.yaml", []byte(`
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 100, per: 1s}
tenants:
  a: {overrides: {rpm: {limit: `+strconv.Itoa(aLimit)+`}}`+keysIf(owner == "a")+`}
  b: {overrides: {rpm: {limit: 200}}`+keysIf(owner == "b")+`}
identity: {anonymous: deny}
`))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, tc := range []struct {
		name     string
		next     *config.File // installed while the request is between identity and admission
		want     int64        // the limit the request is decided with
		wantNext int64        // the limit the next request is decided with
	}{
		{"the key moves to b", file("b", 300), 100, 200},
		{"a's limit changes", file("a", 300), 100, 300},
		{"nothing is installed", nil, 100, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := file("a", 100)
			ctl, err := admission.New(first.Config)
			if err != nil {
				t.Fatal(err)
			}
			mw, tk := decideDuring(t, ctl, first, tc.next)
			defer tk.Done()
			var buf [1]admission.Status
			if sts := tk.Statuses(buf[:0]); len(sts) != 1 || sts[0].Limit != tc.want {
				t.Errorf("decided with %+v; want limit %d (the file it arrived under)", sts, tc.want)
			}
			r := httptest.NewRequest("GET", "/v1/items", nil)
			r.Header.Set("Authorization", "Bearer "+keyNoisy)
			next, err := mw.Decide(httptest.NewRecorder(), r)
			if err != nil {
				t.Fatal(err)
			}
			defer next.Done()
			if sts := next.Statuses(buf[:0]); len(sts) != 1 || sts[0].Limit != tc.wantNext {
				t.Errorf("next request decided with %+v; want limit %d (the file installed)", sts, tc.wantNext)
			}
		})
	}
}

// decideDuring decides a request with keyNoisy through a middleware over
// ctl built from first, which installs next (when not nil) between the
// request's identification and its admission; the WithRequest function
// installs it again on later requests.
func decideDuring(t *testing.T, ctl *admission.Controller, first, next *config.File) (*httpadmit.Middleware, admission.Ticket) {
	t.Helper()
	var mw *httpadmit.Middleware
	mid := func(*http.Request, *admission.Request) error {
		if next != nil {
			return mw.Apply(next.Config, httpadmitfile.Options(next)...)
		}
		return nil
	}
	mw, err := httpadmit.New(ctl, append(httpadmitfile.Options(first), httpadmit.WithRequest(mid), httpadmit.WithLogger(slog.New(slog.DiscardHandler)))...)
	if err != nil {
		t.Fatal(err)
	}
	if err := mw.Apply(first.Config, httpadmitfile.Options(first)...); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/v1/items", nil)
	r.Header.Set("Authorization", "Bearer "+keyNoisy)
	tk, err := mw.Decide(httptest.NewRecorder(), r)
	if err != nil {
		t.Fatal(err)
	}
	return mw, tk
}

func keysIf(owner bool) string {
	if !owner {
		return ""
	}
	return ", api_keys: [" + apikey.Sum(keyNoisy).String() + "]"
}

// TestReloadCountsTheRequestOnce: a file installed while a request is
// decided moves its key from tenant a to tenant b, with a limit of one
// request an hour per tenant: the request is decided once, for a (the
// file it arrived under), so a's hour is used and b's is not.
func TestReloadCountsTheRequestOnce(t *testing.T) {
	file := func(owner string) *config.File {
		t.Helper()
		f, err := config.Parse("moving.yaml", []byte(`
policies:
  - {name: rph, key: [tenant], algorithm: fixed_window, limit: 1, per: 1h}
tenants:
  a: {overrides: {rph: {limit: 1}}`+keysIf(owner == "a")+`}
  b: {overrides: {rph: {limit: 1}}`+keysIf(owner == "b")+`}
identity: {anonymous: deny}
`))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	first, next := file("a"), file("b")
	ctl, err := admission.New(first.Config, admission.WithClock(admissiontest.NewClock(time.Unix(1_800_000_000, 0))))
	if err != nil {
		t.Fatal(err)
	}
	_, tk := decideDuring(t, ctl, first, next)
	tk.Done()
	ctx := context.Background()
	if tk, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "b"}); err != nil {
		t.Errorf("b's first request of the hour: %v; want admitted (the request counted for a only)", err)
	} else {
		tk.Done()
	}
	if _, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "a"}); !errors.Is(err, admission.ErrRateLimited) {
		t.Errorf("a's second request of the hour: %v; want ErrRateLimited (the request counted once, for a)", err)
	}
}
