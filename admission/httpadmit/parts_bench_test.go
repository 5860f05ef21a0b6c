package httpadmit_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpadmit"
)

func BenchmarkPartIdentify(b *testing.B) {
	r := benchRequest()
	ic := &httpadmit.IdentityConfig{Keys: httpadmit.KeyTable{httpadmit.HashKey("sk-bench-0123456789abcdef0123456789abcdef"): {Tenant: "acme"}}}
	b.ReportAllocs()
	for b.Loop() {
		ic.Identify(r)
	}
}

func BenchmarkPartClientAddr(b *testing.B) {
	r := benchRequest()
	ic := &httpadmit.IdentityConfig{}
	b.ReportAllocs()
	for b.Loop() {
		ic.ClientAddr(r)
	}
}

func BenchmarkPartAdmit(b *testing.B) {
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "per-tenant", Key: []admission.KeyPart{admission.KeyTenant},
		Algorithm: admission.TokenBucket, Limit: 1 << 40, Per: time.Second,
	}}})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		tk, _ := ctl.Admit(ctx, admission.Request{Tenant: "acme", Operation: "GET /x"})
		var st [8]admission.Status
		tk.Statuses(st[:0])
		tk.Done()
	}
}

func BenchmarkPartHeaders(b *testing.B) {
	w := httptest.NewRecorder()
	sts := []admission.Status{{Policy: "per-tenant", Limit: 1 << 40, Remaining: 1<<40 - 1, Window: time.Second, Reset: time.Millisecond}}
	b.ReportAllocs()
	for b.Loop() {
		httpadmit.SetLimitHeaders(w.Header(), sts)
	}
}
