package oteltrace_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/oteltrace"
)

// BenchmarkDecision: one request (one policy, admitted and settled) under
// a span, with the tracing observer or without, the span sampled or not.
// "no-tracing" is the peer: no span, no observer. The adapter's cost is
// sampled minus sampled-no-adapter with a sampler that records, unsampled
// minus unsampled-no-adapter with one that does not.
func BenchmarkDecision(b *testing.B) {
	sampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	dropped := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	for _, bc := range []struct {
		name string
		tp   *sdktrace.TracerProvider // nil: no span
		obs  admission.Observer
	}{
		{"no-tracing", nil, admission.NopObserver{}},
		{"unsampled-no-adapter", dropped, admission.NopObserver{}},
		{"unsampled", dropped, oteltrace.Observer{}},
		{"sampled-no-adapter", sampled, admission.NopObserver{}},
		{"sampled", sampled, oteltrace.Observer{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
				Name: "rpm", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket,
				Limit: limits.MaxAmount, Per: time.Second,
			}}}, admission.WithObserver(bc.obs))
			if err != nil {
				b.Fatal(err)
			}
			defer ctl.Close()
			req := admission.Request{Tenant: "acme", Operation: "chat"}
			b.ReportAllocs()
			for b.Loop() {
				ctx := context.Background()
				if bc.tp != nil {
					c, s := bc.tp.Tracer("bench").Start(ctx, "request")
					tk, err := ctl.Admit(c, req)
					if err != nil {
						b.Fatal(err)
					}
					tk.Done()
					s.End()
					continue
				}
				tk, err := ctl.Admit(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				tk.Done()
			}
		})
	}
}
