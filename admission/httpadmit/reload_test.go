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
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
)

// TestApplyIsOneStep installs, between the identification of a request
// and its admission, a file that moves the caller's key from tenant a to
// tenant b: the request is decided as the new file identifies it, by the
// new file's policies (b's limit, 200), never by the new policies for the
// old tenant (a's new limit, 300). Another file that changes limits only
// leaves the decision alone.
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
		name string
		next *config.File // installed while the request is between identity and admission
		want int64        // the limit the request is decided with
	}{
		{"the key moves to b", file("b", 300), 200},
		{"a's limit changes", file("a", 300), 300},
		{"nothing is installed", nil, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := file("a", 100)
			ctl, err := admission.New(first.Config)
			if err != nil {
				t.Fatal(err)
			}
			tk := decideDuring(t, ctl, first, tc.next)
			defer tk.Done()
			var buf [1]admission.Status
			if sts := tk.Statuses(buf[:0]); len(sts) != 1 || sts[0].Limit != tc.want {
				t.Errorf("decided with %+v; want limit %d", sts, tc.want)
			}
		})
	}
}

// decideDuring decides a request with keyNoisy through a middleware over
// ctl built from first, which installs next (when not nil) between the
// request's identification and its admission.
func decideDuring(t *testing.T, ctl *admission.Controller, first, next *config.File) admission.Ticket {
	t.Helper()
	var mw *httpadmit.Middleware
	mid := func(*http.Request, *admission.Request) error {
		if next != nil {
			return mw.Apply(next)
		}
		return nil
	}
	mw, err := httpadmit.New(ctl, append(httpadmit.FileOptions(first), httpadmit.WithRequest(mid), httpadmit.WithLogger(slog.New(slog.DiscardHandler)))...)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/v1/items", nil)
	r.Header.Set("Authorization", "Bearer "+keyNoisy)
	tk, err := mw.Decide(httptest.NewRecorder(), r)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func keysIf(owner bool) string {
	if !owner {
		return ""
	}
	return ", api_keys: [" + config.HashKey(keyNoisy).String() + "]"
}

// TestReadmitWhenTheClassMoves: a file installed while a request was being
// decided that gives it another priority class (and nothing else) makes it
// decided again, with the new class.
func TestReadmitWhenTheClassMoves(t *testing.T) {
	var ep config.Epoch
	e := ep.Stable()
	if err := ep.Install(func(moves func()) error { moves(); return nil }); err != nil {
		t.Fatal(err)
	}
	first := admission.Request{Tenant: "a", Operation: "POST /v1/chat/completions", Priority: 10}
	var admitted []int
	admit := func(r admission.Request) (admission.Ticket, error) {
		admitted = append(admitted, r.Priority)
		return admission.Ticket{}, nil
	}
	again := func() (admission.Request, error) {
		r := first
		r.Priority = 1 // the new file puts the key in the batch class
		return r, nil
	}
	req, _, err := httpadmit.Readmit(&ep, e, first, admission.Ticket{}, nil, again, admit)
	if err != nil {
		t.Fatal(err)
	}
	if req.Priority != 1 || len(admitted) != 1 || admitted[0] != 1 {
		t.Errorf("decided as priority %d after admissions with %v; want one more admission, with priority 1", req.Priority, admitted)
	}
}

// TestReadmitCountsTheRequestOnce: a file installed while a request is
// decided moves its key from tenant a to tenant b, with a limit of one
// request an hour per tenant: the request is decided again, for b, and
// the decision undone gives a's request count back, so a's hour is still
// unused and b's is used once.
func TestReadmitCountsTheRequestOnce(t *testing.T) {
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
	tk := decideDuring(t, ctl, first, next)
	tk.Done()
	ctx := context.Background()
	if tk, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "a"}); err != nil {
		t.Errorf("a's first request of the hour after the readmission: %v; want admitted (the undone decision gave its count back)", err)
	} else {
		tk.Done()
	}
	if _, err := ctl.TryAdmit(ctx, admission.Request{Tenant: "b"}); !errors.Is(err, admission.ErrRateLimited) {
		t.Errorf("b's second request of the hour: %v; want ErrRateLimited (the readmission counted once, for b)", err)
	}
}
